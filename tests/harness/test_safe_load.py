"""No weights file runs code: every pickle the harness (or a library it calls) opens is refused
when it holds more than tensors, and each load path says so with a clear error."""

from __future__ import annotations

import os

import pytest
import torch

from harness.errors import CheckpointError, PrimebenchError
from harness.safe_load import UnsafeFileError, load_torch_file, plain_tensor_copy


class _Payload:
    """Unpickling this calls os.system: the file a malicious upload would contain."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _evil(path, marker, *, inside=None):
    payload = {"weights": torch.ones(2), "x": _Payload(marker)} if inside is None else dict(inside, x=_Payload(marker))
    torch.save(payload, path)
    return path


@pytest.fixture
def marker(tmp_path):
    path = tmp_path / "CODE_RAN"
    yield path
    assert not path.exists(), "the malicious pickle ran its command"


def test_the_payload_really_runs_code_when_unpickled_unsafely(tmp_path):
    # guards the other tests: without weights_only the file does execute its command
    marker = tmp_path / "ran"
    torch.load(_evil(tmp_path / "evil.pt", marker), weights_only=False)
    assert marker.exists()


def test_load_torch_file_refuses_code_and_names_damage(tmp_path, marker):
    with pytest.raises(UnsafeFileError, match="arbitrary code"):
        load_torch_file(_evil(tmp_path / "evil.pt", marker), what="weights", fix="f")
    (tmp_path / "bad.pt").write_bytes(b"\x80\x04garbage" * 8)
    with pytest.raises(PrimebenchError, match="corrupt") as info:
        load_torch_file(tmp_path / "bad.pt", what="weights", fix="restore it")
    assert not isinstance(info.value, UnsafeFileError) and info.value.fix == "restore it"
    with pytest.raises(PrimebenchError, match="does not exist"):
        load_torch_file(tmp_path / "missing.pt", what="weights", fix="f")
    torch.save({"a": torch.arange(3)}, tmp_path / "ok.pt")
    assert torch.equal(load_torch_file(tmp_path / "ok.pt", what="w", fix="f", mmap=True)["a"], torch.arange(3))


def test_plain_tensor_copy_holds_the_same_tensors(tmp_path):
    state = {"conv.weight": torch.randn(3, 2), "bn.num_batches_tracked": torch.tensor(4)}
    torch.save(state, tmp_path / "w.pth")
    copy = plain_tensor_copy(tmp_path / "w.pth", what="w", fix="f")
    assert copy != tmp_path / "w.pth"
    back = torch.load(copy, weights_only=True)
    assert back.keys() == state.keys() and all(torch.equal(back[k], state[k]) for k in state)


def test_inception_weights_explicit_and_in_the_hub_cache_are_refused(tmp_path, monkeypatch, marker):
    from harness.fid.features import INCEPTION_WEIGHTS_FILE, get_feature_space

    with pytest.raises(UnsafeFileError, match="Inception weights"):
        get_feature_space("inception", inception_weights=_evil(tmp_path / "w.pth", marker))
    folder = tmp_path / "hub" / "checkpoints"
    folder.mkdir(parents=True)
    _evil(folder / INCEPTION_WEIGHTS_FILE, marker)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    with pytest.raises(UnsafeFileError):
        get_feature_space("inception")
    (folder / INCEPTION_WEIGHTS_FILE).write_bytes(b"not weights")
    with pytest.raises(PrimebenchError, match="corrupt") as info:
        get_feature_space("inception")
    assert INCEPTION_WEIGHTS_FILE in info.value.fix


def test_trainer_state_with_code_is_refused_on_resume(tmp_path, marker):
    from harness.config import load_config
    from harness.training import train

    cfg = load_config("tiny/arm", ["train.steps=4", "train.save_every=2"])
    train(cfg, tmp_path / "r", quiet=True, stop_after=2)
    state = torch.load(tmp_path / "r" / "trainer_state.pt", weights_only=True)
    _evil(tmp_path / "r" / "trainer_state.pt", marker, inside=state)
    with pytest.raises(CheckpointError, match="not the one saved with this checkpoint"):
        train(cfg, tmp_path / "r", quiet=True, resume=True)  # its hash no longer matches: never unpickled
    (tmp_path / "r" / "trainer_state.sha256").unlink()  # a checkpoint saved before the hash existed
    with pytest.raises(CheckpointError, match="arbitrary code"):
        train(cfg, tmp_path / "r", quiet=True, resume=True)


def test_classifier_cache_with_code_or_garbage_is_refused(tmp_path, marker):
    from harness.fid.digits_classifier import read_classifier

    with pytest.raises(UnsafeFileError):
        read_classifier(_evil(tmp_path / "digits.pt", marker))
    (tmp_path / "junk.pt").write_bytes(b"junk")
    with pytest.raises(PrimebenchError, match="delete"):
        read_classifier(tmp_path / "junk.pt")
    torch.save({"state_dict": {}, "height": 8}, tmp_path / "wrong.pt")
    with pytest.raises(PrimebenchError, match="does not hold a classifier"):
        read_classifier(tmp_path / "wrong.pt")


def test_judge_folder_with_a_code_pickle_is_refused_before_transformers_opens_it(tmp_path, marker):
    from harness.judges import load_judge

    folder = tmp_path / "judge"
    folder.mkdir()
    (folder / "config.json").write_text(
        '{"model_type": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 8, "vocab_size": 10}'
    )
    _evil(folder / "pytorch_model.bin", marker)
    with pytest.raises(UnsafeFileError, match="judge weights"):
        load_judge(str(folder))
    (folder / "pytorch_model.bin").write_bytes(b"garbage")
    with pytest.raises(PrimebenchError, match="corrupt"):
        load_judge(str(folder))
