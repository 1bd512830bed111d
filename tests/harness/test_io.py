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
