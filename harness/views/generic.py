"""The generic table: one row per entry (model and the layout's protocol axes), one column per
metric. Layouts without a builder of their own (genppl, precision, idle, fid, bound) use it, and so
do metrics a layout does not know yet."""

from __future__ import annotations

import json

from harness.views.entries import TITLES, Layout, entries, extra_metrics, metric_cell, short, sort_key, unique_labels
from harness.views.footnotes import apply_flags, count_note, differences, family_info, legend, shared_title, units_note
from harness.views.table import Cell, Column, Table


def generic_table(records, spec: Layout, *, mark=None, tail=None) -> Table:
    """Rows sorted by family rank, name and axes; columns: model, family, axes, metrics.

    ``mark(entry)``: text appended to a row's label (None: nothing), for a layout's own flags;
    ``tail(items, columns)``: ``(rows, footnotes)`` added under the entries (a layout's reference
    rows), each row one cell per column."""
    items = entries(records)
    axes = [a for a in spec.axes if any(e.protocol.get(a) is not None for e in items)]
    items.sort(key=lambda e: sort_key(e, axes))
    unique_labels(items, extra=lambda e: tuple(json.dumps(e.protocol.get(a), default=str) for a in axes))
    names = [n for n in spec.metrics if any(n in e.metrics for e in items)]
    names += extra_metrics(items, names)
    columns = [Column("model", "model", False), Column("family", "family", False)]
    columns += [Column(a, a, False) for a in axes]
    columns += [Column(n, TITLES.get(n, n), mark="paper-objective" if n == "token_joint" else None) for n in names]
    rows = []
    for e in items:
        extra = mark(e) if mark else None
        cells = [Cell(text=e.label if extra is None else f"{e.label} {extra}"), Cell(text=e.family_label)]
        cells += [Cell(text="-" if e.protocol.get(a) is None else short(e.protocol[a], 30)) for a in axes]
        cells += [metric_cell(e.metrics.get(n), n) for n in names]
        rows.append(cells)
    for e in items:  # the axes are part of a row's name in the footnotes
        if axes:
            e.label = f"{e.label}[{', '.join(short(e.protocol.get(a), 20) for a in axes)}]"
    diff_notes, flags = differences([("", items)], frozenset(), axes)
    targets = [[(0, "", e.label)] for e in items]
    apply_flags(rows, targets, flags)
    tail_rows, tail_notes = tail(items, columns) if tail else ([], [])
    notes = legend(rows) + diff_notes + family_info(items) + tail_notes
    rows += tail_rows
    units = units_note(items, names)
    notes += [units] if units else []
    notes.append(count_note(len(records), {str(r.get("evaluation")) for r in records}))
    title = shared_title(spec.title, items, spec.title_keys)
    return Table(spec.name, title, tuple(columns), tuple(tuple(r) for r in rows), tuple(notes), len(records))


__all__ = ["generic_table"]
