"""Files: atomic writes and content hashes, the one copy every module uses.

A write goes to a unique temporary name in the target's folder and is moved into place with
``os.replace``, so a reader (or a crash, or two torchrun ranks writing the same cache file) sees
either the old file or the whole new one, never a partial file. The temporary name is opened with
``"xb"`` rather than ``mkstemp`` so the file gets the usual umask permissions.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path
from typing import Callable


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


def file_sha256(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes, read in ``chunk``-byte blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()
