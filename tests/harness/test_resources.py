"""The memory estimate checked before a run starts: its parts against the real model, its refusal of a
setting that cannot fit (in seconds, nothing written), and the limit's sources."""

from __future__ import annotations

import time

import pytest
import torch
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


def test_the_inference_estimate_reads_every_networks_sizes():
    """Our backbone, a release's DiT and BD3-LM's doubled row: the sizes come from the network itself,
    the weights from its parameters."""
    from harness.backbone import network_shape
    from harness.models import build_model
    from harness.models.mdlm_dit import MDLMDiT
    from harness.models.mdlm_import import MDLMBackbone
    from harness.resources import inference_for_model

    model = build_model("mdlm", vocab_size=500, seq_len=64, d_model=64, n_layers=3, n_heads=4)
    assert network_shape(model.backbone) == {"d_model": 64, "n_layers": 3, "n_heads": 4, "mlp_ratio": 4}
    dit = MDLMDiT(vocab_size=501, hidden_dim=96, cond_dim=32, n_blocks=2, n_heads=3)
    assert network_shape(MDLMBackbone(dit, vocab_size=500, time_conditioning=False))["d_model"] == 96
    est = inference_for_model(model, batch=4, seq_len=64)
    assert est.parts["weights"] == sum(p.numel() * 4 for p in model.parameters())
    assert est.parts["logits over the vocabulary"] == 4 * 64 * 500 * 12
    bd3 = build_model("bd3lm", vocab_size=500, seq_len=64, d_model=64, n_layers=3, n_heads=4)
    one, two = (inference_for_model(m, batch=4, seq_len=64).parts["one layer's activations"] for m in (model, bd3))
    assert two > 2 * one  # 2L positions, and attention over them grows with their square
    f64 = inference_for_model(model, batch=4, seq_len=64, float64_logits=True)
    assert f64.parts["logits over the vocabulary"] > est.parts["logits over the vocabulary"]


def test_the_inference_estimate_lies_above_what_an_evaluation_batch_and_a_sampler_add():
    """bench's figures: the measured growth of resident memory is at most the estimate."""
    from harness.bench.network import inference_memory_figures

    for figure in inference_memory_figures(B=4, L=256, d=128, layers=2, heads=4, vocab=5000):
        assert figure.ok, (figure.name, figure.detail)
        assert figure.detail["estimate_mib"] > 0


def test_evaluation_and_sampling_that_cannot_fit_are_refused_before_any_work(monkeypatch):
    from harness.evaluation.ppl import evaluate_nll
    from harness.models import build_model
    from harness.sampling import generate

    model = build_model("mdlm", vocab_size=500, seq_len=64, d_model=64, n_layers=2, n_heads=4)
    monkeypatch.setenv(LIMIT_VARIABLE, "1M")
    with pytest.raises(ConfigError, match="scoring batches of 8 rows of 64 tokens needs about") as info:
        evaluate_nll(model, torch.zeros(20, 64, dtype=torch.long), batch_size=8)
    assert "--batch-size" in info.value.fix
    with pytest.raises(ConfigError, match="sampling batches of 3 rows of 64 tokens needs about"):
        generate(model, num_samples=3, batch_size=16, steps=2, generator=0)
    monkeypatch.setenv(LIMIT_VARIABLE, "1G")
    assert generate(model, num_samples=3, batch_size=16, steps=2, generator=0).tokens.shape == (3, 64)


def test_eval_refuses_a_batch_that_cannot_fit_with_the_options_to_change(trained, monkeypatch):
    checkpoint = trained("mdlm")
    monkeypatch.setenv(LIMIT_VARIABLE, "2M")
    res = CliRunner().invoke(main, ["eval", "ppl", str(checkpoint), "--max-rows", "4"])
    assert res.exit_code == 2 and "needs about" in res.output and "--batch-size" in res.output, res.output
