"""Settings objects of the evaluations (frozen dataclasses, one field per setting), and the one way
to change some of their fields by name (:func:`changed`): a misspelt name is an error that lists the
fields, never a silent default."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any, TypeVar

from harness.errors import InputError

S = TypeVar("S")


def changed(settings: S, changes: dict[str, Any], what: str) -> S:
    """``settings`` (a dataclass instance) with ``changes`` applied by field name; ``what`` names the
    evaluation in the error for an unknown name."""
    known = {f.name for f in fields(settings)}
    unknown = sorted(set(changes) - known)
    if unknown:
        raise InputError(
            f"unknown {what} setting(s) {unknown}",
            fix=f"use the fields of {type(settings).__name__}: {', '.join(sorted(known))}",
        )
    return replace(settings, **changes)


__all__ = ["changed"]
