import shutil

import pytest
import torch
import yaml

import harness
from harness.errors import CheckpointError


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_load_round_trip(trained):
    model, tok, cfg = harness.load(trained("arm"))
    assert cfg.model.family == "arm" and model.family == "arm"
    assert tok.vocab_size == model.vocab_size == 257
    x = torch.tensor([tok.encode("Hello world, this is text.")[:20]])
    out = model.nll(x)
    assert out.kind == "exact" and torch.isfinite(out.nats).all()


def test_ema_and_raw_weights_differ(trained):
    ema, _, _ = harness.load(trained("arm"), ema=True)
    raw, _, _ = harness.load(trained("arm"), ema=False)
    diffs = [float((a - b).detach().abs().max()) for a, b in zip(ema.parameters(), raw.parameters())]
    assert max(diffs) > 0


def test_missing_folder(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        harness.load(tmp_path / "nope")


def test_missing_weights(trained, tmp_path):
    ck = _copy(trained("arm"), tmp_path / "c")
    (ck / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        harness.load(ck)


def test_corrupt_weights(trained, tmp_path):
    ck = _copy(trained("arm"), tmp_path / "c")
    data = (ck / "model.safetensors").read_bytes()
    (ck / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        harness.load(ck)


def test_unknown_family(trained, tmp_path):
    ck = _copy(trained("arm"), tmp_path / "c")
    doc = yaml.safe_load((ck / "config.yaml").read_text())
    doc["model"]["family"] = "mdlmm"
    (ck / "config.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(CheckpointError, match="unknown model family 'mdlmm'") as exc:
        harness.load(ck)
    assert "mdlm" in exc.value.fix


def test_tokenizer_vocabulary_mismatch(trained, tmp_path):
    from harness.data import get_tokenizer

    ck = _copy(trained("arm"), tmp_path / "c")
    shutil.rmtree(ck / "tokenizer")
    get_tokenizer("gpt2").save(ck / "tokenizer")
    with pytest.raises(CheckpointError, match="vocabulary"):
        harness.load(ck)


def test_weights_from_another_model(trained, tmp_path):
    ck = _copy(trained("arm"), tmp_path / "c")
    doc = yaml.safe_load((ck / "config.yaml").read_text())
    doc["model"]["d_model"] = 32
    (ck / "config.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(CheckpointError, match="shape"):
        harness.load(ck)
