"""Files: atomic writes and content hashes, the one copy every module uses.

A write goes to a unique temporary name in the target's folder and is moved into place with
``os.replace``, so a reader (or a crash, or two torchrun ranks writing the same cache file) sees
either the old file or the whole new one, never a partial file. The temporary name is opened with
``"xb"`` rather than ``mkstemp`` so the file gets the usual umask permissions.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from pathlib import Path
from typing import Callable, Mapping


def _temporary_name(path: Path) -> Path:
    return path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp"


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp)`` to fill a temporary file next to ``path``, then move it onto ``path``.

    For writers that take a file name (``torch.save``, safetensors' ``save_file``). On any error
    the temporary file is removed and ``path`` is left as it was. Returns ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary_name(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` so readers see either the old file or the whole new one."""

    def write(tmp: Path) -> None:
        with open(tmp, "xb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())

    return atomic_write(path, write)


def atomic_write_text(path: str | Path, text: str) -> Path:
    """UTF-8 text version of :func:`atomic_write_bytes`."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def read_json(path: str | Path, *, what: str, fix: str, error: type | None = None):
    """Parse a JSON file; a file that is not valid JSON raises ``error`` (a PrimebenchError class)
    naming ``what`` and the parser's complaint."""
    from harness.errors import PrimebenchError

    try:
        return json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise (error or PrimebenchError)(f"{what} {str(path)!r} is not valid JSON ({exc})", fix=fix) from exc


def file_sha256(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes, read in ``chunk``-byte blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def create_exclusive(path: str | Path, data: bytes, *, numbered: bool = True) -> Path:
    """Create a new file holding ``data`` without ever replacing one that exists.

    The bytes go to a temporary file that is then hard-linked to its name: the link fails when the
    name is taken (even by a process racing this one), so no record is overwritten or lost. With
    ``numbered``, a taken ``name.ext`` moves on to ``name~1.ext``, ``name~2.ext``, ...; without
    it a taken name raises :class:`FileExistsError`. Returns the path created.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary_name(path)
    with open(tmp, "xb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    try:
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
    finally:
        tmp.unlink(missing_ok=True)


_SAFETENSORS_DTYPES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64", "int32": "I32",
    "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
}


def safetensors_bytes(tensors: Mapping[str, "torch.Tensor"], metadata: Mapping[str, str] | None = None) -> bytes:
    """The safetensors file of ``tensors`` with the same bytes for the same tensors and metadata.

    The safetensors library writes its metadata in hash-map order, which changes from one save to
    the next, so identical models got different file hashes. Here tensors are laid out in name
    order and the JSON header has sorted keys; the format is the library's (8-byte little-endian
    header length, JSON header padded with spaces to 8 bytes, then the raw little-endian data).
    """
    import torch  # noqa: F401  (tensors are torch tensors)

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

    def __enter__(self) -> "FolderLock":
        try:
            import fcntl
        except ImportError:  # pragma: no cover  (not POSIX)
            return self
        from harness.errors import PrimebenchError

        self.folder.mkdir(parents=True, exist_ok=True)
        handle = open(self.folder / self.FILE, "a+")
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

    def __exit__(self, *exc) -> None:
        if self._handle is not None:
            self._handle.close()  # closing releases the flock
            self._handle = None
