"""The on-disk cache for derived data (extracted corpora, trained tokenizers).

Everything here can be regenerated from installed packages and local files; deleting the cache
costs time, never results. The root is ``$PRIMEBENCH_CACHE`` if set, else ``~/.cache/primebench``.
Files are written with :func:`harness.io.atomic_write_text` (temporary file in the same folder,
then ``os.replace``), so a crash or two concurrent processes (e.g. torchrun ranks) never leave a
half-written file behind.
"""

from __future__ import annotations

import os
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
