"""harness.io: atomic writes never leave a partial or temporary file; one file hash."""

from __future__ import annotations

import errno
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
    from harness.errors import WriteError

    path = tmp_path / "new.txt"

    def no_replace(src, dst):
        raise OSError("replace failed")

    monkeypatch.setattr(os, "replace", no_replace)
    with pytest.raises(WriteError, match="replace failed"):
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

    tensors = {
        "b.w": torch.randn(3, 2),
        "a": torch.arange(5),
        "h": torch.ones(2, dtype=torch.bfloat16),
        "m": torch.tensor([True, False]),
        "empty": torch.zeros(0),
    }
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


class _FullDisk:
    """A file opened for writing on a disk with no space left: the file is created, every write fails."""

    def __init__(self, handle):
        self.handle = handle

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.close()

    def write(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self.handle, name)


def full_disk(monkeypatch, *, when=lambda name: True):
    """Make every file that harness.io opens for writing (and whose name passes ``when``) hit ENOSPC."""
    import builtins

    import harness.io

    def fake_open(file, mode="r", *args, **kwargs):
        handle = builtins.open(file, mode, *args, **kwargs)
        writing = any(flag in mode for flag in "wxa+")
        return _FullDisk(handle) if writing and when(os.path.basename(file)) else handle

    monkeypatch.setattr(harness.io, "open", fake_open, raising=False)


def test_a_full_disk_keeps_the_old_file_and_names_the_path_and_the_fix(tmp_path, monkeypatch):
    from harness.errors import PrimebenchError

    path = tmp_path / "record.json"
    atomic_write_text(path, "old")
    full_disk(monkeypatch)
    with pytest.raises(PrimebenchError) as info:
        atomic_write_text(path, "new")
    assert str(path) in info.value.problem and "No space left on device" in info.value.problem
    assert "ENOSPC" in info.value.problem and "free space" in info.value.fix and "--out" in info.value.fix
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_a_full_disk_while_creating_a_record_leaves_no_temporary_file(tmp_path, monkeypatch):
    from harness.errors import PrimebenchError
    from harness.io import create_exclusive
    from harness.records import write_record

    full_disk(monkeypatch)
    with pytest.raises(PrimebenchError, match="No space left") as info:
        create_exclusive(tmp_path / "r.json", b"{}")
    assert str(tmp_path / "r.json") in info.value.problem and "free space" in info.value.fix
    assert list(tmp_path.iterdir()) == []
    # a record with an attachment: the disk fills up at the record, and its attachment goes too
    full_disk(monkeypatch, when=lambda name: ".json." in name)  # the record's temporary name, not the .jsonl
    record = {"evaluation": "x", "model": {"name": "m"}, "protocol": {}}
    with pytest.raises(PrimebenchError, match="No space left"):
        write_record(record, tmp_path / "out", attachments={"samples_file": (".samples.jsonl", b"{}\n")})
    assert list((tmp_path / "out").iterdir()) == []


def test_a_lock_file_that_is_a_symbolic_link_is_refused_and_its_target_kept(tmp_path):
    from harness.errors import PrimebenchError
    from harness.io import FolderLock

    precious = tmp_path / "precious.txt"
    precious.write_text("years of notes")
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").symlink_to(precious)
    with pytest.raises(PrimebenchError, match="symbolic link") as info:
        with FolderLock(run):
            pass
    assert str(run / ".lock") in info.value.problem and "remove the link" in info.value.fix
    assert precious.read_text() == "years of notes"
    (run / ".lock").unlink()
    (run / ".lock").symlink_to(tmp_path / "dangling.txt")  # a dangling link would create its target
    with pytest.raises(PrimebenchError, match="symbolic link"):
        with FolderLock(run):
            pass
    assert not (tmp_path / "dangling.txt").exists()
    (run / ".lock").unlink()
    with FolderLock(run):  # the link removed, as the fix says: the lock works again
        pass


def test_a_lock_file_with_another_hard_link_is_refused_and_its_twin_kept(tmp_path):
    from harness.errors import PrimebenchError
    from harness.io import FolderLock

    precious = tmp_path / "precious.txt"
    precious.write_text("years of notes")
    run = tmp_path / "run"
    run.mkdir()
    os.link(precious, run / ".lock")
    with pytest.raises(PrimebenchError, match="hard links"):
        with FolderLock(run):
            pass
    assert precious.read_text() == "years of notes"


def test_replace_together_after_a_crash_holds_all_old_or_all_new_files(tmp_path, monkeypatch):
    """A crash before the staged files are complete keeps every old file; a crash after it (between
    two moves into place) is completed by finish_replace_together."""
    import harness.io
    from harness.errors import WriteError
    from harness.io import PENDING, finish_replace_together, replace_together

    replace_together(tmp_path, {"a": b"a1", "b": b"b1"}, note="step 1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]
    full_disk(monkeypatch, when=lambda name: name == "b")
    with pytest.raises(WriteError, match="No space left") as info:
        replace_together(tmp_path, {"a": b"a2", "b": b"b2"}, note="step 2")
    assert str(tmp_path / "b") in info.value.problem
    assert (tmp_path / "a").read_bytes() == b"a1" and (tmp_path / "b").read_bytes() == b"b1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]
    monkeypatch.undo()

    class Killed(BaseException):
        pass

    real_replace = os.replace

    def killed_at_b(src, dst):
        if os.path.basename(dst) == "b":
            raise Killed
        real_replace(src, dst)

    monkeypatch.setattr(harness.io.os, "replace", killed_at_b)
    with pytest.raises(Killed):
        replace_together(tmp_path, {"a": b"a3", "b": b"b3"}, note="step 3")
    monkeypatch.undo()
    assert (tmp_path / "a").read_bytes() == b"a3" and (tmp_path / "b").read_bytes() == b"b1"  # torn, for now
    found = finish_replace_together(tmp_path)
    assert found.completed and found.note == "step 3"
    assert (tmp_path / "a").read_bytes() == b"a3" and (tmp_path / "b").read_bytes() == b"b3"
    assert not (tmp_path / PENDING).exists() and finish_replace_together(tmp_path) is None


def _stage(folder, files: dict, *, note="step 9"):
    """What replace_together leaves when killed after its COMMITTED mark: the staged files and the mark."""
    import hashlib
    import json as _json

    from harness.io import COMMITTED, PENDING

    pending = folder / PENDING
    pending.mkdir(parents=True)
    for name, data in files.items():
        (pending / name).write_bytes(data)
    digests = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    (pending / COMMITTED).write_text(_json.dumps({"note": note, "files": digests}))
    return pending


def test_a_staged_file_changed_after_its_commit_never_replaces_the_good_one(tmp_path):
    from harness.io import PENDING, finish_replace_together, replace_together

    replace_together(tmp_path, {"model.safetensors": b"good weights", "config.yaml": b"good"})
    pending = _stage(tmp_path, {"model.safetensors": b"new weights", "config.yaml": b"new"})
    (pending / "model.safetensors").write_bytes(b"new wei")  # truncated after the mark
    found = finish_replace_together(tmp_path)
    assert not found.completed and "does not match the SHA-256" in found.reason and found.note == "step 9"
    assert (tmp_path / "model.safetensors").read_bytes() == b"good weights"
    assert (tmp_path / "config.yaml").read_bytes() == b"good" and not (tmp_path / PENDING).exists()


def test_only_the_listed_files_are_moved_in(tmp_path):
    """A .lock, a script or a link planted in .pending is never moved into the folder."""
    from harness.io import finish_replace_together

    outside = tmp_path / "outside.txt"
    outside.write_text("not mine to move")
    folder = tmp_path / "run"
    folder.mkdir()
    pending = _stage(folder, {"model.safetensors": b"w", "config.yaml": b"c"})
    (pending / ".lock").write_text("12345")
    (pending / "run.sh").write_text("rm -rf ~")
    (pending / "link").symlink_to(outside)
    found = finish_replace_together(folder)
    assert found.completed and sorted(p.name for p in folder.iterdir()) == ["config.yaml", "model.safetensors"]
    assert outside.read_text() == "not mine to move"
    pending = _stage(folder, {"model.safetensors": b"w2"})
    (pending / "model.safetensors").unlink()
    (pending / "model.safetensors").symlink_to(outside)  # a listed name that is a link: discarded
    found = finish_replace_together(folder)
    assert not found.completed and "not a plain file" in found.reason
    assert (folder / "model.safetensors").read_bytes() == b"w"


@pytest.mark.parametrize("kind", ["file", "link", "legacy"])
def test_a_pending_that_is_not_ours_is_named_or_discarded(tmp_path, kind):
    from harness.errors import WriteError
    from harness.io import COMMITTED, PENDING, finish_replace_together

    (tmp_path / "model.safetensors").write_bytes(b"good")
    if kind == "file":
        (tmp_path / PENDING).write_text("x")
    elif kind == "link":
        (tmp_path / PENDING).symlink_to(tmp_path)
    else:  # a mark without the manifest: its files cannot be checked, so they are discarded
        (tmp_path / PENDING).mkdir()
        (tmp_path / PENDING / "model.safetensors").write_bytes(b"unchecked")
        (tmp_path / PENDING / COMMITTED).write_text("step 3")
    if kind == "legacy":
        found = finish_replace_together(tmp_path)
        assert not found.completed and "not the manifest" in found.reason
    else:
        with pytest.raises(WriteError, match=r"\.pending is (a symbolic link|not a folder)"):
            finish_replace_together(tmp_path)
    assert (tmp_path / "model.safetensors").read_bytes() == b"good"
