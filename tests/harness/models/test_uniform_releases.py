"""UDLM's and DUO's HF layouts (``udlm-hf:``, ``duo-hf:``): folders written by transformers'
``save_pretrained`` with the releases' config fields and module names load strictly into the
``udlm`` / ``duo`` families, give the log-probabilities of an op-by-op recomputation from the raw
tensors, import through ``primebench import`` and evaluate through the CLI; wrong prefixes and
unsupported variants are named."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

import harness
from harness.cli import main
from harness.errors import CheckpointError
from tests.fixtures.releases import L, write_uniform_hf
from tests.harness.models.test_mdlm_import import _reference_logits

BYTES = 257  # the byte tokenizer's C, for a UDLM folder the tests can tokenize offline


@pytest.fixture(scope="module")
def udlm_folder(tmp_path_factory):
    return write_uniform_hf(tmp_path_factory.mktemp("rel") / "udlm-lm1b", "udlm", vocab=BYTES, seed=3)


@pytest.fixture(scope="module")
def duo_folder(tmp_path_factory):
    return write_uniform_hf(tmp_path_factory.mktemp("rel") / "duo", "duo", vocab=50258, seed=4)


def _check_log_probs(model, vocab: int, seed: int):
    from tests.fixtures.releases import raw_weights

    ids = torch.randint(vocab, (3, L), generator=torch.Generator().manual_seed(1))
    t = torch.tensor([0.1, 0.5, 0.95])
    with torch.no_grad():
        ours = model.log_probs(ids, t)
        sigma = -torch.log1p(-(1 - 1e-3) * t)  # the releases' time input: log-linear total noise
        ref = torch.log_softmax(_reference_logits(raw_weights(seed, vocab), ids, sigma), -1)
    torch.testing.assert_close(ours, ref, atol=3e-5, rtol=1e-5)


def test_udlm_release_loads_as_udlm(udlm_folder):
    model, tok, cfg = harness.load(f"udlm-hf:{udlm_folder}", tokenizer="bytes")
    assert model.family == "udlm" and model.vocab_size == BYTES and model.process.states == BYTES
    assert tok.spec == "bytes" and cfg.model.time_conditioning and model.seq_len == L
    _check_log_probs(model, BYTES, 3)
    nll = model.nll(torch.randint(BYTES, (2, L)), num_samples=2, generator=torch.Generator().manual_seed(0))
    assert nll.kind == "bound" and bool(torch.isfinite(nll.nats).all())


def test_duo_release_loads_as_duo_with_the_padded_gpt2(duo_folder):
    model, tok, cfg = harness.load(f"duo-hf:{duo_folder}")
    assert model.family == "duo" and model.vocab_size == 50258
    assert tok.spec == "gpt2-pad" and tok.vocab_size == 50258 and tok.decode([50257]) == "[PAD]"
    assert cfg.model.family == "duo" and cfg.model.curriculum_end == 0
    _check_log_probs(model, 50258, 4)


def test_a_wrong_prefix_names_the_right_one(udlm_folder, duo_folder):
    with pytest.raises(CheckpointError, match="(?s)a UDLM release .* load it as udlm-hf:"):
        harness.load(f"mdlm-hf:{udlm_folder}")
    with pytest.raises(CheckpointError, match="(?s)a DUO release .* load it as duo-hf:"):
        harness.load(f"udlm-hf:{duo_folder}")


def test_unsupported_variants_are_refused(tmp_path):
    with pytest.raises(CheckpointError, match="cfg is true"):
        harness.load(f"udlm-hf:{write_uniform_hf(tmp_path / 'a', 'udlm', vocab=BYTES, cfg=True)}", tokenizer="bytes")
    with pytest.raises(CheckpointError, match="causal is true"):
        harness.load(f"duo-hf:{write_uniform_hf(tmp_path / 'b', 'duo', vocab=BYTES, causal=True)}", tokenizer="bytes")
    folder = write_uniform_hf(tmp_path / "c", "udlm", vocab=BYTES, time_conditioning=False)
    with pytest.raises(CheckpointError, match="needs the time input"):
        harness.load(f"udlm-hf:{folder}", tokenizer="bytes")
    with pytest.raises(CheckpointError, match="no tokenizer files"):
        harness.load(f"udlm-hf:{write_uniform_hf(tmp_path / 'd', 'udlm', vocab=BYTES)}")


def test_import_round_trips_and_evaluates(tmp_path, udlm_folder, duo_folder):
    runner = CliRunner()
    out = tmp_path / "udlm-imported"
    res = runner.invoke(main, ["import", f"udlm-hf:{udlm_folder}", "--out", str(out), "--tokenizer", "bytes"])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "config.json").read_text())
    assert doc["primebench_import"]["format"] == "udlm-hf" and "udlm" in doc
    model, _, _ = harness.load(out)
    assert model.family == "udlm"
    _check_log_probs(model, BYTES, 3)
    out = tmp_path / "duo-imported"
    res = runner.invoke(main, ["import", str(duo_folder), "--source-format", "duo-hf", "--out", str(out)])
    assert res.exit_code == 0, res.output
    model, tok, _ = harness.load(out)
    assert model.family == "duo" and tok.spec == "gpt2-pad"
    res = runner.invoke(main, ["eval", "ppl", f"duo-hf:{duo_folder}", "--max-rows", "2", "--json"])
    assert res.exit_code == 0, res.output
    record = json.loads(res.stdout[res.stdout.index("{") :])
    assert record["metrics"]["nll"]["kind"] == "bound" and record["model"]["family"] == "duo"
    assert record["model"]["checkpoint_sha256"]
