"""The table layouts by name, and :func:`build_table`, which checks that the records fit one."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from harness.errors import PrimebenchError
from harness.views import bound, fid, genppl, genppl_matched, idle, ppl, precision, zeroshot
from harness.views.entries import Layout
from harness.views.generic import generic_table
from harness.views.table import Table

LAYOUTS: dict[str, Layout] = {
    m.LAYOUT.name: m.LAYOUT for m in (ppl, zeroshot, genppl, genppl_matched, precision, idle, fid, bound)
}


def build_table(records: Sequence[dict[str, Any]], layout: str) -> Table:
    """The table model of ``records`` in ``layout``: one row per model (or per model and the layout's
    protocol axes), cells that keep the number, its standard error and its kind, and footnotes."""
    if layout not in LAYOUTS:
        raise PrimebenchError(f"unknown table layout {layout!r}", fix=f"use one of {', '.join(LAYOUTS)}")
    if not records:
        raise PrimebenchError("no records to tabulate", fix="pass record files or folders")
    spec = LAYOUTS[layout]
    found = Counter(str(r.get("evaluation")) for r in records)
    wrong = sorted(e for e in found if e not in spec.evaluations)
    if wrong:
        fits = {e: [name for name, s in LAYOUTS.items() if e in s.evaluations] for e in found}
        listing = ", ".join(f"{n} {e!r}" for e, n in sorted(found.items()))
        advice = "; ".join(
            f"{e!r} records: --layout {' or '.join(fits[e]) or '(none yet; no layout takes them)'}"
            for e in sorted(found)
        )
        raise PrimebenchError(
            f"layout {layout!r} takes {' or '.join(map(repr, spec.evaluations))} records, found {listing}", fix=advice
        )
    return (spec.build or generic_table)(records, spec)


__all__ = ["LAYOUTS", "build_table"]
