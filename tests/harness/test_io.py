"""harness.io: atomic writes never leave a partial or temporary file; one file hash."""

from __future__ import annotations

import hashlib
import os

import pytest

from harness.io import atomic_write, atomic_write_bytes, atomic_write_text, file_sha256


def test_atomic_write_replaces_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "sub" / "x.json"  # the folder is created
    atomic_write_text(path, "first")
    atomic_write_bytes(path, b"second")
    assert path.read_text() == "second"
    assert [p.name for p in path.parent.iterdir()] == ["x.json"]


def test_failed_write_keeps_the_old_file_and_removes_the_temporary(tmp_path):
    path = tmp_path / "x.bin"
    atomic_write_bytes(path, b"old")

    def half_then_fail(tmp):
        tmp.write_bytes(b"partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(path, half_then_fail)
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.bin"]


def test_failed_replace_never_exposes_a_partial_file(tmp_path, monkeypatch):
    path = tmp_path / "new.txt"

    def no_replace(src, dst):
        raise OSError("replace failed")

    monkeypatch.setattr(os, "replace", no_replace)
    with pytest.raises(OSError, match="replace failed"):
        atomic_write_text(path, "never seen")
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_with_a_path_writer(tmp_path):
    import torch

    path = tmp_path / "state.pt"
    atomic_write(path, lambda tmp: torch.save({"step": 3}, tmp))
    assert torch.load(path, weights_only=True) == {"step": 3}
    assert [p.name for p in tmp_path.iterdir()] == ["state.pt"]


def test_file_sha256_matches_hashlib_for_any_chunk(tmp_path):
    data = bytes(range(256)) * 1000
    path = tmp_path / "blob"
    path.write_bytes(data)
    expected = hashlib.sha256(data).hexdigest()
    assert file_sha256(path) == expected
    assert file_sha256(path, chunk=7) == expected


def test_create_exclusive_never_replaces(tmp_path):
    from harness.io import create_exclusive

    a = create_exclusive(tmp_path / "r.json", b"a")
    b = create_exclusive(tmp_path / "r.json", b"b")
    assert (a.name, b.name) == ("r.json", "r~1.json") and a.read_bytes() == b"a" and b.read_bytes() == b"b"
    with pytest.raises(FileExistsError):
        create_exclusive(tmp_path / "r.json", b"c", numbered=False)
    assert a.read_bytes() == b"a" and sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "r~1.json"]


def test_safetensors_bytes_are_deterministic_and_readable(tmp_path):
    import torch
    from safetensors.torch import load, save

    from harness.io import safetensors_bytes

    tensors = {"b.w": torch.randn(3, 2), "a": torch.arange(5), "h": torch.ones(2, dtype=torch.bfloat16),
               "m": torch.tensor([True, False]), "empty": torch.zeros(0)}
    meta = {"step": "3", "family": "mdlm", "vocab_size": "257", "seq_len": "64", "format": "x", "mask_id": "257"}
    data = safetensors_bytes(tensors, meta)
    assert data == safetensors_bytes(dict(reversed(list(tensors.items()))), dict(reversed(list(meta.items()))))
    back = load(data)
    assert back.keys() == tensors.keys() and all(torch.equal(back[k], tensors[k]) for k in tensors)
    # the library's own writer orders the metadata by hash map: its bytes differ between saves
    library = {save(tensors, metadata=meta) for _ in range(8)}
    assert len(library) > 1


def test_folder_lock_is_exclusive_and_released(tmp_path):
    from harness.errors import PrimebenchError
    from harness.io import FolderLock

    with FolderLock(tmp_path / "run"):
        with pytest.raises(PrimebenchError, match=f"pid {os.getpid()}"):
            with FolderLock(tmp_path / "run"):
                pass
    with FolderLock(tmp_path / "run"):
        pass
