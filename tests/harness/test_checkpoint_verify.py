"""What a load checks against what the save recorded: the tokenizer (in its folder or rebuilt), the
family in the weights' metadata, and the bytes of the weights (issue 26, "silently wrong numbers")."""

from __future__ import annotations

import random
import shutil

import pytest
import yaml

import harness
from harness.errors import CheckpointError


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def _edit_config(ckpt, edit):
    doc = yaml.safe_load((ckpt / "config.yaml").read_text())
    edit(doc)
    (ckpt / "config.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


@pytest.fixture(scope="module")
def bpe_checkpoint(tmp_path_factory):
    """A checkpoint as `primebench train` saves it, with a bpe:300 trained on a small text corpus (not
    the default one); untrained weights, since only the tokenizer matters here."""
    from harness.checkpoint import save_checkpoint
    from harness.config import load_config
    from harness.data import get_corpus, get_tokenizer
    from harness.models import model_from_config

    folder = tmp_path_factory.mktemp("bpe-ckpt")
    words = "alpha beta gamma delta river stone cloud maple ember quartz".split()
    rng = random.Random(0)
    text = folder / "docs.txt"
    text.write_text("\n\n".join(" ".join(rng.choice(words) for _ in range(40)) for _ in range(300)))
    cfg = load_config("tiny/mdlm", [f"data.corpus=text:{text}", "data.tokenizer=bpe:300"])
    corpus = get_corpus(cfg.data.corpus)
    tokenizer = get_tokenizer(cfg.data.tokenizer, corpus=corpus)
    model = model_from_config(cfg.model, vocab_size=tokenizer.vocab_size, seq_len=cfg.data.seq_len)
    save_checkpoint(folder / "run", model=model, ema_state=None, cfg=cfg, tokenizer=tokenizer, step=1)
    return folder / "run", corpus


def test_a_tokenizer_rebuilt_from_the_default_corpus_is_refused(bpe_checkpoint, tmp_path):
    from harness.evaluation import load_for_evaluation

    run, corpus = bpe_checkpoint
    recorded = yaml.safe_load((run / "config.yaml").read_text())["resolved"]["tokenizer_sha256"]
    ckpt = _copy(run, tmp_path / "c")
    shutil.rmtree(ckpt / "tokenizer")
    with pytest.raises(CheckpointError, match="no tokenizer/ folder") as info:
        load_for_evaluation(ckpt)  # rebuilds bpe:300 from the default corpus: another tokenizer
    assert str(ckpt) in info.value.problem and recorded in info.value.problem
    found = info.value.problem.rsplit("hashes to ", 1)[1]
    assert len(found) == 64 and found != recorded
    assert "restore the tokenizer/ folder from the training run" in info.value.fix
    _, _, tokenizer, _ = load_for_evaluation(ckpt, corpus=corpus)  # rebuilt from the run's own corpus: the same
    assert tokenizer.spec == f"bpe:300@{corpus.spec}"


def test_a_checkpoint_saved_before_the_tokenizer_hash_is_held_to_its_spec(bpe_checkpoint, tmp_path):
    from harness.evaluation import load_for_evaluation

    run, corpus = bpe_checkpoint
    ckpt = _copy(run, tmp_path / "c")
    shutil.rmtree(ckpt / "tokenizer")
    _edit_config(ckpt, lambda doc: doc["resolved"].pop("tokenizer_sha256"))
    with pytest.raises(CheckpointError, match=r"is 'bpe:300' but the checkpoint was trained with 'bpe:300@text:"):
        load_for_evaluation(ckpt)
    load_for_evaluation(ckpt, corpus=corpus)


def test_a_changed_tokenizer_folder_names_both_hashes(trained, tmp_path):
    ckpt = _copy(trained("mdlm"), tmp_path / "c")
    recorded = yaml.safe_load((ckpt / "config.yaml").read_text())["resolved"]["tokenizer_sha256"]
    config = next((ckpt / "tokenizer").glob("*.yaml"))
    config.write_text(config.read_text() + "# edited\n")
    with pytest.raises(CheckpointError, match="not the tokenizer this checkpoint was trained with") as info:
        harness.load(ckpt)
    assert recorded in info.value.problem and "hashes to" in info.value.problem
    assert "from the training run" in info.value.fix


def test_a_config_of_another_family_than_the_weights_is_refused(trained, tmp_path):
    ckpt = _copy(trained("mdlm"), tmp_path / "c")
    _edit_config(ckpt, lambda doc: doc["model"].update(family="masked"))  # same network: every key loads
    with pytest.raises(CheckpointError, match="model.family 'masked' but the weights .* by a 'mdlm' model") as info:
        harness.load(ckpt)
    assert "'mdlm'" in info.value.fix and "config.yaml" in info.value.fix


def test_weights_changed_since_training_are_refused(trained, tmp_path):
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from harness.io import file_sha256

    ckpt = _copy(trained("arm"), tmp_path / "c")
    weights = ckpt / "model.safetensors"
    resolved = yaml.safe_load((ckpt / "config.yaml").read_text())["resolved"]
    assert resolved["weights_sha256"] == file_sha256(weights)  # what records call checkpoint_sha256
    with safe_open(str(weights), framework="pt") as fh:
        meta = fh.metadata()
    tensors = load_file(str(weights))
    name = next(k for k in tensors if tensors[k].dtype.is_floating_point)
    tensors[name] = tensors[name] * 1.001  # still finite, still the right shapes: only the hash can tell
    save_file(tensors, str(weights), metadata=meta)
    with pytest.raises(CheckpointError, match="changed since training saved it") as info:
        harness.load(ckpt)
    assert str(weights) in info.value.problem and resolved["weights_sha256"] in info.value.problem
    assert "restore model.safetensors" in info.value.fix and "re-train" in info.value.fix
    _edit_config(ckpt, lambda doc: doc["resolved"].pop("weights_sha256"))
    harness.load(ckpt)  # a checkpoint saved before the hash was recorded loads unchecked
