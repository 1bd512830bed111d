"""The memory estimate checked before a run starts: its parts against the real model, its refusal of a
setting that cannot fit (in seconds, nothing written), and the limit's sources."""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.errors import ConfigError
from harness.resources import LIMIT_VARIABLE, backbone_parameters, check_fits, memory_limit, training_step_bytes


def test_the_parameter_count_is_the_backbones():
    from harness.models import build_model

    model = build_model("mdlm", vocab_size=1000, seq_len=64, d_model=64, n_layers=3, n_heads=4, time_conditioning=True)
    real = sum(p.numel() for p in model.parameters())
    est = backbone_parameters(d=64, layers=3, vocab_in=1001, vocab_out=1000, mlp_ratio=4, cond_dim=64)
    assert 0.9 * real <= est <= 1.2 * real


def test_attention_grows_with_the_square_of_the_length_on_cpu_only():
    kw = dict(batch=8, d=64, layers=2, heads=2, vocab_in=258, vocab_out=257)
    short, long = (training_step_bytes(seq_len=n, **kw).total for n in (1000, 100_000))
    assert long > 5000 * short  # the L^2 attention probabilities dominate
    fused = training_step_bytes(seq_len=100_000, attention_matrix=False, **kw).total
    assert fused < long / 100


def test_a_run_that_cannot_fit_is_refused_in_seconds_and_writes_nothing(tmp_path):
    began = time.perf_counter()
    res = CliRunner().invoke(main, ["train", "tiny/mdlm", "data.seq_len=100000", "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and "needs about" in res.output and "TiB of memory" in res.output
    assert "data.seq_len" in res.output and time.perf_counter() - began < 30
    assert not (tmp_path / "r" / "model.safetensors").exists()


def test_the_limit_comes_from_the_environment_or_the_machine(monkeypatch):
    monkeypatch.setenv(LIMIT_VARIABLE, "1M")
    assert memory_limit() == (2**20, f"{LIMIT_VARIABLE}=1M")
    with pytest.raises(ConfigError, match="needs about"):
        check_fits(
            training_step_bytes(batch=8, seq_len=64, d=64, layers=2, heads=2, vocab_in=258, vocab_out=257),
            what="x",
            sized_by="y",
        )
    monkeypatch.setenv(LIMIT_VARIABLE, "lots")
    with pytest.raises(ConfigError, match="is not a size"):
        memory_limit()
    monkeypatch.delenv(LIMIT_VARIABLE)
    limit, source = memory_limit()
    assert limit > 2**30 and "MemTotal" in source
