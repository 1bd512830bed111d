"""Reading the record files that tables are built from."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from harness.errors import PrimebenchError
from harness.records import read_record


def load_records(
    paths: Iterable[str | Path], *, skip: Callable[[Path, PrimebenchError], None] | None = None
) -> list[dict[str, Any]]:
    """The records of :func:`load_record_files`, without their paths."""
    return [record for _, record in load_record_files(paths, skip=skip)]


def load_record_files(
    paths: Iterable[str | Path], *, skip: Callable[[Path, PrimebenchError], None] | None = None
) -> list[tuple[Path, dict[str, Any]]]:
    """Read every record named by ``paths``: JSON files, or folders (all ``*.json`` inside,
    recursively, in sorted order). A file that is not a record raises :func:`read_record`'s error;
    with ``skip``, it is passed to ``skip(path, error)`` and left out instead, and only a set of
    paths where no file is readable raises (naming each problem)."""

    paths = [Path(p) for p in paths]
    files: list[Path] = []
    for path in paths:
        found = sorted(q for q in path.rglob("*.json") if q.is_file()) if path.is_dir() else [path]
        files.extend(f for f in found if f not in files)
    if not files:
        names = ", ".join(repr(str(p)) for p in paths) or "(none given)"
        raise PrimebenchError(
            f"no records found in {names}",
            fix="pass record files or folders written by `primebench eval ... --out DIR`",
        )
    if skip is None:
        return [(f, read_record(f)) for f in files]
    records, problems = [], []
    for file in files:
        try:
            records.append((file, read_record(file)))
        except (PrimebenchError, OSError) as exc:
            if isinstance(exc, OSError):
                exc = PrimebenchError(f"record {str(file)!r} cannot be read ({exc.strerror or exc})")
            problems.append(exc.problem)
            skip(file, exc)
    if not records:
        raise PrimebenchError(
            f"none of the {len(files)} JSON file{'s' if len(files) > 1 else ''} is a readable record: "
            + "; ".join(problems[:3])
            + ("; ..." if len(problems) > 3 else ""),
            fix="pass record files or folders written by `primebench eval ... --out DIR`",
        )
    return records


__all__ = ["load_records"]
