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


def test_a_tokenizer_that_is_not_the_runs_own_is_refused(trained, tmp_path):
    from harness.data.tokenizers.simple import PixelTokenizer

    ckpt = _copy(trained("mdlm"), tmp_path / "c")
    shutil.rmtree(ckpt / "tokenizer")
    PixelTokenizer(257).save(ckpt / "tokenizer")  # same vocabulary size, another tokenizer
    with pytest.raises(CheckpointError, match="trained with 'bytes'"):
        harness.load(ckpt)
    ckpt = _copy(trained("mdlm"), tmp_path / "d")
    config = next((ckpt / "tokenizer").glob("*.yaml"))
    config.write_text(config.read_text() + "# edited\n")  # same spec, different files
    with pytest.raises(CheckpointError, match="not the tokenizer this checkpoint was trained with"):
        harness.load(ckpt)


def test_an_invalid_tokenizer_file_is_a_clear_error(tmp_path):
    from harness.data import get_corpus, get_tokenizer, load_tokenizer
    from harness.errors import DataError

    text = tmp_path / "docs.txt"
    text.write_text("\n\n".join(f"document {i} about the cat and the dog and the bird" for i in range(200)))
    tok = get_tokenizer("bpe:280", corpus=get_corpus(f"text:{text}"))
    tok.save(tmp_path / "tok")
    (tmp_path / "tok" / "tokenizer.json").write_text("{ not json")
    with pytest.raises(DataError, match="not a valid tokenizer file") as info:
        load_tokenizer(tmp_path / "tok")
    assert info.value.fix
    next((tmp_path / "tok").glob("*.yaml")).write_text("kind: [unclosed")
    with pytest.raises(DataError, match="not valid YAML"):
        load_tokenizer(tmp_path / "tok")


def test_non_finite_weights_are_refused(trained, tmp_path):
    from safetensors.torch import load_file, save_file

    ckpt = _copy(trained("arm"), tmp_path / "c")
    tensors = load_file(str(ckpt / "model.safetensors"))
    name = next(k for k in tensors if k.startswith("ema.") and tensors[k].dtype.is_floating_point)
    tensors[name][...] = float("nan")
    save_file(tensors, str(ckpt / "model.safetensors"), metadata={"step": "20"})
    with pytest.raises(CheckpointError, match="not finite"):
        harness.load(ckpt)
    doc = yaml.safe_load((ckpt / "config.yaml").read_text())
    doc["resolved"].pop("weights_sha256", None)  # the file was rewritten here: as a checkpoint without the hash
    (ckpt / "config.yaml").write_text(yaml.safe_dump(doc))
    harness.load(ckpt, ema=False)  # the raw weights are still finite


def test_identical_models_save_identical_bytes(trained, tmp_path):
    from harness.checkpoint import save_checkpoint

    model, tok, cfg = harness.load(trained("prime"))
    for name in ("a", "b"):
        save_checkpoint(
            tmp_path / name,
            model=model,
            ema_state=None,
            cfg=cfg,
            tokenizer=tok,
            step=5,
            trainer_state={"optimizer": {"state": {}, "param_groups": []}},
        )
    for name in ("model.safetensors", "trainer_state.pt", "config.yaml"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
