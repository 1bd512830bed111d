"""GIDD's HF layout (``gidd-hf:``, dvruette/gidd-*): a folder written by transformers' ``save_pretrained``
with the release's ``DITConfig`` fields, module names and rotary buffers, and the tokenizer files of
GIDD's code, loads strictly into the ``gidd`` family; its log-probabilities equal an op-by-op
recomputation from the raw tensors with the time t as input and the mask's logit dropped; it imports
through ``primebench import`` and evaluates through the CLI; every bad folder is named."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from click.testing import CliRunner

import harness
from harness.cli import main
from harness.errors import CheckpointError
from harness.models.gidd_import import rotary_tables
from tests.fixtures.releases import L, V, raw_weights, write_gidd_hf
from tests.harness.models.test_mdlm_import import _reference_logits

NET = V + 1  # GPT-2's 50257 tokens, [PAD] and [MASK]


@pytest.fixture(scope="module")
def gidd_folder(tmp_path_factory):
    return write_gidd_hf(tmp_path_factory.mktemp("rel") / "gidd-small-p_unif-0.2", seed=6, p_uniform=0.2)


def _check_log_probs(model, seed: int):
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(NET - 1, (3, L), generator=g)
    ids[torch.rand(3, L, generator=g) < 0.4] = NET - 1  # masks among tokens and uniform noise
    t = torch.tensor([0.05, 0.5, 0.97])
    with torch.no_grad():
        ours = model.log_probs(ids, t)
        # GIDD's DiT reads t itself; GIDD sets the mask's logit to -1e6 before its softmax
        logits = _reference_logits(raw_weights(seed, NET), ids, t)
        ref = torch.log_softmax(logits.masked_fill(torch.arange(NET) == NET - 1, -1e6), -1)[..., :-1]
    assert ours.shape == (3, L, NET - 1)
    torch.testing.assert_close(ours, ref, atol=3e-5, rtol=1e-5)


def test_gidd_release_loads_as_gidd(gidd_folder):
    model, tok, cfg = harness.load(f"gidd-hf:{gidd_folder}")
    assert model.family == "gidd" and model.vocab_size == V and model.process.states == NET
    assert tok.spec == "gpt2-pad" and tok.vocab_size == V
    assert cfg.model.p_uniform == pytest.approx(0.2) and cfg.model.gamma == 1.0 and model.seq_len == L
    assert model.label(cfg.model) == "gidd, p_u=0.2"
    _check_log_probs(model, 6)
    nll = model.nll(torch.randint(V, (2, L)), num_samples=2, generator=torch.Generator().manual_seed(0))
    assert nll.kind == "bound" and bool(torch.isfinite(nll.nats).all())


def test_the_time_input_is_t_not_a_noise_level(gidd_folder):
    model, _, _ = harness.load(f"gidd-hf:{gidd_folder}")
    ids = torch.randint(V, (2, L), generator=torch.Generator().manual_seed(3))
    t = torch.tensor([0.3, 0.8])
    with torch.no_grad():
        ref = torch.log_softmax(_reference_logits(raw_weights(6, NET), ids, t)[..., :-1], -1)
        wrong = torch.log_softmax(_reference_logits(raw_weights(6, NET), ids, -torch.log1p(-t))[..., :-1], -1)
        ours = model.log_probs(ids, t)
    assert (ours - ref).abs().max() < 3e-5 < (ours - wrong).abs().max()


def test_the_rotary_tables_are_gidds():
    cos, sin = rotary_tables(5, 4)
    assert cos.shape == (1, 5, 3, 1, 4)
    assert torch.equal(cos[0, :, 2], torch.ones(5, 1, 4)) and torch.equal(sin[0, :, 2], torch.zeros(5, 1, 4))
    # position 3, frequency 1 of head size 4: angle 3 / 100, on both halves, for q and k
    assert cos[0, 3, 0, 0, 1].item() == pytest.approx(torch.cos(torch.tensor(0.03)).item())
    assert sin[0, 3, 1, 0, 3].item() == pytest.approx(torch.sin(torch.tensor(0.03)).item())


def test_without_tokenizer_files_gpt2_with_pad_is_taken(tmp_path):
    folder = write_gidd_hf(tmp_path / "g", seed=1, tokenizer=False)
    model, tok, _ = harness.load(f"gidd-hf:{folder}")
    assert tok.spec == "gpt2-pad" and model.family == "gidd"


def test_bad_folders_are_named(tmp_path, gidd_folder):
    folder = write_gidd_hf(tmp_path / "rope", seed=1, tokenizer=False, rotary_base=500.0)
    with pytest.raises(CheckpointError, match="not base-10000 rotary of head size 8"):
        harness.load(f"gidd-hf:{folder}")
    folder = write_gidd_hf(tmp_path / "small-vocab", seed=1, vocab=300, tokenizer=False)
    with pytest.raises(CheckpointError, match="C = 299 tokens is not GPT-2's with \\[PAD\\]"):
        harness.load(f"gidd-hf:{folder}")
    with pytest.raises(CheckpointError, match="--tokenizer bytes has 257 ids but the model has C = 50258"):
        harness.load(f"gidd-hf:{gidd_folder}", tokenizer="bytes")
    # tokenizer files that give two tokens each other's ids
    swapped = tmp_path / "swapped"
    shutil.copytree(gidd_folder, swapped)
    doc = json.loads((swapped / "tokenizer.json").read_text())
    vocab = doc["model"]["vocab"]
    vocab["hello"], vocab["world"] = vocab["world"], vocab["hello"]
    (swapped / "tokenizer.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="gpt2-pad tokenizer differs from the tokenizer files in .* at 2 of"):
        harness.load(f"gidd-hf:{swapped}")
    # a tokenizer whose mask is not the last id
    moved = tmp_path / "moved-mask"
    shutil.copytree(gidd_folder, moved)
    doc = json.loads((moved / "tokenizer_config.json").read_text())
    (moved / "tokenizer_config.json").write_text(json.dumps(dict(doc, mask_token="[PAD]")))
    with pytest.raises(CheckpointError, match="the mask '\\[PAD\\]' at id 50257"):
        harness.load(f"gidd-hf:{moved}")
    # GIDD's config without p_uniform, or with a value out of range
    for bad, match in ((None, "needs vocab_size"), (1.5, "p_uniform is 1.5")):
        broken = tmp_path / f"p{bad}"
        shutil.copytree(gidd_folder, broken)
        doc = json.loads((broken / "config.json").read_text())
        doc.pop("p_uniform") if bad is None else doc.update(p_uniform=bad)
        (broken / "config.json").write_text(json.dumps(doc))
        with pytest.raises(CheckpointError, match=match):
            harness.load(f"gidd-hf:{broken}")
    with pytest.raises(CheckpointError, match="(?s)a GIDD release .* load it as gidd-hf:"):
        harness.load(f"mdlm-hf:{gidd_folder}")


def test_import_round_trips_and_evaluates(tmp_path, gidd_folder):
    runner = CliRunner()
    out = tmp_path / "gidd-imported"
    res = runner.invoke(main, ["import", str(gidd_folder), "--source-format", "gidd-hf", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "config.json").read_text())
    assert doc["primebench_import"]["format"] == "gidd-hf" and doc["gidd"] == {"p_uniform": 0.2, "gamma": 1.0}
    model, tok, cfg = harness.load(out)
    assert model.family == "gidd" and tok.vocab_size == V and cfg.model.p_uniform == pytest.approx(0.2)
    _check_log_probs(model, 6)
    doc["gidd"] = {"p_uniform": "high"}
    (out / "config.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="needs the numbers p_uniform and gamma"):
        harness.load(out)
    res = runner.invoke(main, ["eval", "ppl", f"gidd-hf:{gidd_folder}", "--max-rows", "2", "--json"])
    assert res.exit_code == 0, res.output
    record = json.loads(res.stdout[res.stdout.index("{") :])
    assert record["metrics"]["nll"]["kind"] == "bound" and record["model"]["family"] == "gidd"
    assert record["model"]["checkpoint_sha256"]
