"""SEDD's HF layout (``sedd-hf:``): folders written by huggingface_hub's ``PyTorchModelHubMixin`` with
SEDD's Hydra config and module names load strictly into ``sedd`` (absorbing graph) or
``sedd-uniform``, give the scores of an op-by-op recomputation with SEDD's shift by sigma, import
through ``primebench import`` and evaluate through the CLI; unsupported variants are named."""

from __future__ import annotations

import json
import math

import pytest
import torch
from click.testing import CliRunner

import harness
from harness.cli import main
from harness.errors import CheckpointError
from tests.fixtures.releases import L, raw_weights, sedd_config, write_sedd_hf
from tests.harness.models.test_mdlm_import import _reference_logits

BYTES = 257  # the byte tokenizer's C: folders the tests tokenize offline


@pytest.fixture(scope="module")
def absorb_folder(tmp_path_factory):
    return write_sedd_hf(tmp_path_factory.mktemp("rel") / "sedd-small", sedd_config("absorb", BYTES), seed=6)


def _reference_scores(seed: int, rows: int, ids: torch.Tensor, t: torch.Tensor, *, scale: bool) -> torch.Tensor:
    """SEDD's ``forward`` from the raw tensors: the DiT at sigma = -log(1 - (1 - 1e-3) t), minus
    log(e^sigma - 1) + log(V - 1) when scaled, and 0 at the current state."""
    sigma = -torch.log1p(-(1 - 1e-3) * t)
    x = _reference_logits(raw_weights(seed, rows), ids, sigma)
    if scale:
        x = x - torch.log(torch.expm1(sigma))[:, None, None] - math.log(rows - 1)
    return x.scatter(-1, ids[..., None], 0.0)


def _check_scores(model, seed: int, rows: int, *, scale: bool):
    ids = torch.randint(rows, (3, L), generator=torch.Generator().manual_seed(1))
    t = torch.tensor([0.05, 0.5, 0.95])
    with torch.no_grad():
        ours = model.log_scores(ids, t)
    want = _reference_scores(seed, rows, ids, t, scale=scale)
    # float32 through two blocks in another op order: the difference is rounding that scales with the
    # largest score (5e-5 of scores up to 7.8 on one CPU, under 3e-5 on another); a wrong
    # term moves scores by far more
    scale_of = float(want[torch.isfinite(want)].abs().max())
    torch.testing.assert_close(ours, want, atol=2e-5 * max(scale_of, 1.0), rtol=1e-5)


def test_absorbing_release_loads_as_sedd(absorb_folder):
    model, tok, cfg = harness.load(f"sedd-hf:{absorb_folder}", tokenizer="bytes")
    assert model.family == "sedd" and model.vocab_size == BYTES and model.process.states == BYTES + 1
    assert model.scale_by_sigma and cfg.model.scale_by_sigma and cfg.model.time_conditioning
    assert tok.spec == "bytes" and model.seq_len == L and cfg.model.schedule == "loglinear"
    _check_scores(model, 6, BYTES + 1, scale=True)
    nll = model.nll(torch.randint(BYTES, (2, L)), num_samples=2, generator=torch.Generator().manual_seed(0))
    assert nll.kind == "bound" and bool(torch.isfinite(nll.nats).all())


def test_uniform_and_unscaled_releases_and_the_older_weights_file(tmp_path):
    folder = write_sedd_hf(tmp_path / "u", sedd_config("uniform", BYTES), seed=7, safetensors=False)
    assert (folder / "pytorch_model.bin").is_file() and not (folder / "model.safetensors").exists()
    model, _, cfg = harness.load(f"sedd-hf:{folder}", tokenizer="bytes")
    assert model.family == "sedd-uniform" and model.process.states == BYTES and not cfg.model.scale_by_sigma
    _check_scores(model, 7, BYTES, scale=False)
    folder = write_sedd_hf(tmp_path / "a", sedd_config("absorb", BYTES, scale_by_sigma=False), seed=8)
    model, _, _ = harness.load(f"sedd-hf:{folder}", tokenizer="bytes")
    assert model.family == "sedd" and not model.scale_by_sigma
    _check_scores(model, 8, BYTES + 1, scale=False)


def test_gpt2_is_the_release_tokenizer(tmp_path):
    folder = write_sedd_hf(tmp_path / "gpt2", sedd_config("absorb"), seed=9)
    model, tok, _ = harness.load(f"sedd-hf:{folder}")
    assert tok.spec == "gpt2" and model.vocab_size == 50257


def test_a_folder_is_recognised_and_a_wrong_prefix_names_the_right_one(absorb_folder):
    with pytest.raises(CheckpointError, match="(?s)a SEDD release .* load it as sedd-hf:"):
        harness.load(f"mdlm-hf:{absorb_folder}")
    with pytest.raises(CheckpointError, match="sedd-hf:"):
        harness.load(absorb_folder)


@pytest.mark.parametrize(
    "change,match",
    [
        (lambda c: c["noise"].update(type="geometric"), "noise.type is 'geometric'"),
        (lambda c: c["graph"].update(type="random"), "graph.type is 'random'"),
        (lambda c: c["model"].update(scale_by_sigma=True), "scale_by_sigma is true on the uniform graph"),
        (lambda c: c.pop("model"), "'model' is missing"),
        (lambda c: c["model"].update(n_blocks=3), "missing"),
    ],
)
def test_unsupported_or_broken_configs_are_refused(tmp_path, change, match):
    folder = write_sedd_hf(tmp_path / "x", sedd_config("uniform", BYTES), seed=0)
    config = json.loads((folder / "config.json").read_text())
    change(config)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=match):
        harness.load(f"sedd-hf:{folder}", tokenizer="bytes")


def test_import_round_trips_and_evaluates(tmp_path, absorb_folder):
    runner = CliRunner()
    out = tmp_path / "sedd-imported"
    res = runner.invoke(main, ["import", f"sedd-hf:{absorb_folder}", "--out", str(out), "--tokenizer", "bytes"])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "config.json").read_text())
    assert doc["primebench_import"]["format"] == "sedd-hf" and doc["sedd"]["scale_by_sigma"] is True
    model, _, _ = harness.load(out)
    assert model.family == "sedd"
    _check_scores(model, 6, BYTES + 1, scale=True)
    res = runner.invoke(main, ["eval", "ppl", str(out), "--max-rows", "2", "--json"])
    assert res.exit_code == 0, res.output
    record = json.loads(res.stdout[res.stdout.index("{") :])
    assert record["metrics"]["nll"]["kind"] == "bound" and record["model"]["family"] == "sedd"
