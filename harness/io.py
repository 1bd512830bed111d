"""Files: atomic writes and content hashes, the one copy every module uses.

A write goes to a unique temporary name in the target's folder and is moved into place with
``os.replace``, so a reader (or a crash, or two torchrun ranks writing the same cache file) sees
either the old file or the whole new one, never a partial file. The temporary name is opened with
``"xb"`` rather than ``mkstemp`` so the file gets the usual umask permissions. Files that must
change together (a checkpoint's weights and trainer state) go through :func:`replace_together`.
A write that fails (a full disk, no permission) leaves no temporary file and raises
:class:`harness.errors.WriteError` naming the file; the previous file is untouched.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch  # noqa: F401  (tensors are torch tensors)

from harness import stopping
from harness.errors import PrimebenchError, WriteError

if TYPE_CHECKING:
    import torch


def _temporary_name(path: Path) -> Path:
    return path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp"


def write_error(path: Path, exc: OSError, *, kept: str = "the previous file, if any, is unchanged"):
    """The :class:`harness.errors.WriteError` for an ``OSError`` met while writing ``path``
    (a full disk, a quota, a read-only or unwritable folder)."""

    reason = exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc))
    code = errno.errorcode.get(exc.errno or 0)
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
    fix = (
        f"free space on the disk that holds {str(path.parent)!r}, or choose another --out"
        if full
        else f"make {str(path.parent)!r} writable, or choose another --out"
    )
    return WriteError(f"cannot write {str(path)!r}: {reason}{f' ({code})' if code else ''}; {kept}", fix=fix)


@stopping.uncut
def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp)`` to fill a temporary file next to ``path``, then move it onto ``path``.

    For writers that take a file name (``torch.save``, safetensors' ``save_file``). On any error
    the temporary file is removed and ``path`` is left as it was; an ``OSError`` (a full disk, no
    permission) becomes a :class:`harness.errors.WriteError` naming ``path``. Returns ``path``.
    """
    path = Path(path)
    tmp = _temporary_name(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(tmp)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise write_error(path, exc) from exc
        raise
    return path


def _write_synced(path: Path, data: bytes) -> None:
    """Create ``path`` (it must not exist) holding ``data``, flushed to the disk."""
    with open(path, "xb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _fsync_folder(folder: Path) -> None:
    """Make the names created, replaced or removed in ``folder`` durable."""
    with contextlib.suppress(OSError):  # some filesystems (and non-POSIX systems) cannot fsync a folder
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` so readers see either the old file or the whole new one."""
    return atomic_write(path, lambda tmp: _write_synced(tmp, data))


def atomic_write_text(path: str | Path, text: str) -> Path:
    """UTF-8 text version of :func:`atomic_write_bytes`."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def read_json(path: str | Path, *, what: str, fix: str, error: type | None = None):
    """Parse a JSON file; a file that is not valid JSON raises ``error`` (a PrimebenchError class)
    naming ``what`` and the parser's complaint."""

    try:
        return json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise (error or PrimebenchError)(f"{what} {str(path)!r} is not valid JSON ({exc})", fix=fix) from exc
    except RecursionError:
        raise (error or PrimebenchError)(
            f"{what} {str(path)!r} is nested too deeply to be read (more levels than Python's parser allows)",
            fix=fix,
        ) from None


def file_sha256(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes, read in ``chunk``-byte blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


@stopping.uncut
def create_exclusive(path: str | Path, data: bytes, *, numbered: bool = True) -> Path:
    """Create a new file holding ``data`` without ever replacing one that exists.

    The bytes go to a temporary file that is then hard-linked to its name: the link fails when the
    name is taken (even by a process racing this one), so no record is overwritten or lost. With
    ``numbered``, a taken ``name.ext`` moves on to ``name~1.ext``, ``name~2.ext``, ...; without
    it a taken name raises :class:`FileExistsError`. Returns the path created.
    An ``OSError`` other than a taken name (a full disk, no permission) becomes a
    :class:`harness.errors.WriteError` naming ``path``; no temporary file is left behind.
    """
    path = Path(path)
    tmp = _temporary_name(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_synced(tmp, data)
        candidate, n = path, 0
        while True:
            try:
                os.link(tmp, candidate)
                return candidate
            except FileExistsError:
                if not numbered:
                    raise
                n += 1
                candidate = path.with_name(f"{path.stem}~{n}{path.suffix}")
    except FileExistsError:
        raise
    except OSError as exc:
        raise write_error(path, exc, kept="nothing was written") from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


#: the folder inside a target folder where :func:`replace_together` stages the new files
PENDING = ".pending"
#: the file inside :data:`PENDING` whose presence says every staged file is complete
COMMITTED = "COMMITTED"


@dataclass(frozen=True)
class Recovered:
    """What :func:`finish_replace_together` found of a group replace that a crash interrupted."""

    #: True: the new files were complete and have now been moved into place; False: they were
    #: incomplete and were removed, so the folder holds the previous files
    completed: bool
    #: the ``note`` the interrupted writer gave (e.g. ``"step 40"``); empty when not completed
    note: str
    #: why complete-looking staged files were discarded (a file missing, changed or not a plain
    #: file); empty otherwise
    reason: str = ""


@stopping.uncut
def replace_together(folder: str | Path, files: Mapping[str, bytes], *, note: str = "") -> None:
    """Replace the files ``files`` (name -> bytes) in ``folder`` as one, so a crash at any moment
    (SIGKILL, power loss, a full disk) leaves either every old file or every new one.

    The new files are written and fsynced into ``folder/.pending/`` and marked complete by a
    ``COMMITTED`` file written last, which holds the note and the SHA-256 of every staged file; only
    then are they moved over the old ones (``os.replace``, which needs no space) and the pending
    folder removed. A crash before the mark leaves the old files
    as they were; a crash after it leaves the new files complete, and :func:`finish_replace_together`
    (called here first, and by whoever reads the folder after a crash) moves the rest into place.
    An ``OSError`` while staging removes the pending folder and becomes a
    :class:`harness.errors.WriteError`; the old files are untouched.
    """
    folder = Path(folder)
    finish_replace_together(folder)
    pending, target = folder / PENDING, folder
    try:
        pending.mkdir(parents=True)
        for name, data in files.items():
            target = folder / name
            _write_synced(pending / name, data)
        target = folder
        _fsync_folder(pending)
        manifest = {"note": note, "files": {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}}
        _write_synced(pending / COMMITTED, json.dumps(manifest, sort_keys=True).encode("utf-8"))
        _fsync_folder(pending)
    except BaseException as exc:
        shutil.rmtree(pending, ignore_errors=True)
        if isinstance(exc, OSError):
            raise write_error(target, exc, kept=f"the previous {', '.join(files)} are unchanged") from exc
        raise
    # committed: from here on a crash is completed by finish_replace_together, never undone
    for name in files:
        os.replace(pending / name, folder / name)
    _fsync_folder(folder)
    shutil.rmtree(pending)


@stopping.uncut
def finish_replace_together(folder: str | Path) -> Recovered | None:
    """Complete or discard a :func:`replace_together` that a crash interrupted in ``folder``.

    Only the files the ``COMMITTED`` manifest lists are moved in, and only when each is a plain file
    (not a link) whose SHA-256 is the recorded one: a staged file that was truncated or changed, or
    anything planted beside them (a ``.lock``, a script, a link), never replaces what the folder
    holds; then the whole pending folder is discarded and the previous files stay.

    Returns None when there was none. A ``.pending`` that is not a folder this function could have
    written (a plain file, a link) is a :class:`harness.errors.WriteError` naming it. Call it (under
    the folder's lock) before reading files that are replaced together."""
    folder = Path(folder)
    pending = folder / PENDING
    if not pending.exists() and not pending.is_symlink():
        return None
    if pending.is_symlink() or not pending.is_dir():
        kind = "a symbolic link" if pending.is_symlink() else "not a folder"
        raise WriteError(
            f"{pending} is {kind}; the harness stages its saves in a folder of that name",
            fix=f"remove it (rm {pending}) and run again",
        )
    marker = pending / COMMITTED
    if marker.is_file() and not marker.is_symlink():
        note, listed, reason = _read_commit(marker, pending)
        if not reason:
            for name in listed:
                os.replace(pending / name, folder / name)
            _fsync_folder(folder)
            shutil.rmtree(pending)
            return Recovered(completed=True, note=note)
        shutil.rmtree(pending)
        return Recovered(completed=False, note=note, reason=reason)
    shutil.rmtree(pending)
    return Recovered(completed=False, note="")


def _read_commit(marker: Path, pending: Path) -> tuple[str, list[str], str]:
    """``(note, files to move, reason to discard them or "")`` from a ``COMMITTED`` manifest."""
    try:
        manifest = json.loads(marker.read_bytes().decode("utf-8"))
        note, files = str(manifest["note"]), dict(manifest["files"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return "", [], "its COMMITTED mark is not the manifest this version writes"
    move = []
    for name, digest in files.items():
        name = str(name)
        if "/" in name or name.startswith(".") or name == COMMITTED:
            return note, [], f"it lists {name!r}, which is not a file a save writes"
        path = pending / name
        if not path.exists() and not path.is_symlink():  # moved in before the crash: the folder has it
            placed = pending.parent / name
            if placed.is_file() and not placed.is_symlink() and file_sha256(placed) == digest:
                continue
            return note, [], f"the staged {name!r} is missing"
        if path.is_symlink() or not path.is_file():
            return note, [], f"the staged {name!r} is not a plain file"
        if file_sha256(path) != digest:
            return note, [], f"the staged {name!r} does not match the SHA-256 recorded when it was written"
        move.append(name)
    return note, sorted(move), ""


_SAFETENSORS_DTYPES = {
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "bool": "BOOL",
}


def safetensors_bytes(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None = None) -> bytes:
    """The safetensors file of ``tensors`` with the same bytes for the same tensors and metadata.

    The safetensors library writes its metadata in hash-map order, which changes from one save to
    the next, so identical models got different file hashes. Here tensors are laid out in name
    order and the JSON header has sorted keys; the format is the library's (8-byte little-endian
    header length, JSON header padded with spaces to 8 bytes, then the raw little-endian data).
    """

    header: dict = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs, offset = [], 0
    for name in sorted(tensors):
        tensor = tensors[name].detach().contiguous().cpu()
        dtype = _SAFETENSORS_DTYPES.get(str(tensor.dtype).removeprefix("torch."))
        if dtype is None:
            raise TypeError(f"tensor {name!r}: dtype {tensor.dtype} has no safetensors code")
        raw = tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        header[name] = {"dtype": dtype, "shape": list(tensor.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + b"".join(blobs)


class FolderLock:
    """An exclusive lock on a folder while one process writes into it (``with FolderLock(dir):``).

    Held with ``flock`` on ``DIR/.lock``, so the operating system drops it when the process ends,
    however it ends: a crashed run never leaves the folder locked. The file holds the owner's pid
    for the message a second writer gets. Where ``fcntl`` does not exist the lock is a no-op.
    """

    FILE = ".lock"

    def __init__(self, folder: str | Path, *, what: str = "folder"):
        self.folder = Path(folder)
        self.what = what
        self._handle = None

    def __enter__(self) -> FolderLock:
        try:
            import fcntl  # deferred: POSIX-only; elsewhere the lock is a no-op
        except ImportError:  # pragma: no cover  (not POSIX)
            return self

        self.folder.mkdir(parents=True, exist_ok=True)
        handle = self._open()
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            owner = handle.read().strip() or "unknown"
            handle.close()
            raise PrimebenchError(
                f"{self.what} {str(self.folder)!r} is in use by another process (pid {owner})",
                fix="wait for that run to finish, or choose another --out",
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._handle = handle
        return self

    def _open(self):
        """Open (or create) the lock file for reading and writing, never through a link.

        The pid is written into the file, so a ``.lock`` that is a symbolic link (or a hard link)
        would truncate and overwrite whatever it points at; such a lock file is refused."""

        path = self.folder / self.FILE
        fix = f"remove it (rm {str(path)!r}): the lock file is created anew"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError as exc:
            if path.is_symlink():
                raise PrimebenchError(
                    f"the lock file {str(path)!r} is a symbolic link (to {os.readlink(path)!r}); it is never "
                    "followed, so the file it points at is left alone",
                    fix=f"remove the link (rm {str(path)!r}): the lock file is created anew",
                ) from None
            raise PrimebenchError(f"cannot open the lock file {str(path)!r}: {exc.strerror or exc}", fix=fix) from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            os.close(fd)
            kind = "has other hard links" if stat.S_ISREG(info.st_mode) else "is not a plain file"
            raise PrimebenchError(
                f"the lock file {str(path)!r} {kind}; writing the pid into it would change another file", fix=fix
            )
        return os.fdopen(fd, "r+")

    def __exit__(self, *exc) -> None:
        if self._handle is not None:
            self._handle.close()  # closing releases the flock
            self._handle = None
