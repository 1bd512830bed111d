"""The on-disk cache for derived data (extracted corpora, trained tokenizers).

Everything here can be regenerated from installed packages and local files; deleting the cache
costs time, never results. The root is ``$PRIMEBENCH_CACHE`` if set, else ``~/.cache/primebench``.
Files are written atomically (temporary file in the same folder, then ``os.replace``), so a crash
or two concurrent processes (e.g. torchrun ranks) never leave a half-written file behind.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

CACHE_ENV = "PRIMEBENCH_CACHE"


def cache_root() -> Path:
    """The cache root (not created)."""
    root = os.environ.get(CACHE_ENV)
    return Path(root).expanduser() if root else Path.home() / ".cache" / "primebench"


def cache_dir(*parts: str) -> Path:
    """``cache_root() / parts...``, created on demand."""
    path = cache_root().joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see either the old file or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A unique name opened with "xb" (not mkstemp) so the file gets the usual umask permissions.
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp"
    try:
        with open(tmp, "xb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """UTF-8 text version of :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode("utf-8"))


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
