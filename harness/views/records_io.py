"""Reading the record files that tables are built from."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from harness.errors import PrimebenchError


def load_records(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Read every record named by ``paths``: JSON files, or folders (all ``*.json`` inside,
    recursively, in sorted order). A file that is not a record raises :func:`read_record`'s error."""
    from harness.records import read_record

    paths = [Path(p) for p in paths]
    files: list[Path] = []
    for path in paths:
        found = sorted(q for q in path.rglob("*.json") if q.is_file()) if path.is_dir() else [path]
        files.extend(f for f in found if f not in files)
    if not files:
        names = ", ".join(repr(str(p)) for p in paths) or "(none given)"
        raise PrimebenchError(f"no records found in {names}",
                              fix="pass record files or folders written by `primebench eval ... --out DIR`")
    return [read_record(f) for f in files]


__all__ = ["load_records"]
