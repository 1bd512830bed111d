"""Zero-shot perplexity: ``ppl`` and ``zeroshot`` records pivoted to one row per model and one column
per dataset (the papers' order), and the one-record view that ``primebench eval zeroshot`` prints."""

from __future__ import annotations

from rich.table import Table as RichTable

from harness.errors import PrimebenchError
from harness.logging import stdout_console
from harness.views.entries import Entry, Layout, entries, metric_cell, sort_key
from harness.views.footnotes import apply_flags, count_note, differences, family_info, legend
from harness.views.generic import generic_table
from harness.views.ppl import PPL_IGNORED
from harness.views.table import Cell, Column, Footnote, Table

_ZEROSHOT_ORDER = ("owt", "lambada", "wikitext2", "wikitext103", "ptb", "lm1b", "ag_news", "pubmed", "arxiv")


def _primary(metrics: dict) -> str | None:
    """The metric a zero-shot cell shows: ``ppl``, else the first perplexity-like one, else the first."""
    if "ppl" in metrics:
        return "ppl"
    return next((n for n in metrics if n.startswith("ppl")), next(iter(metrics), None))


def zeroshot_table(records, spec: Layout) -> Table:
    """Rows: models (and a "paper objective" row where a record has one); cells: perplexity per
    dataset. Protocol differences are compared within each dataset column only. Records of lm-eval
    runs (``eval zeroshot``: several tasks and metrics each) get one column per task metric instead."""
    if all(r.get("evaluation") == "zeroshot" for r in records):
        return generic_table(records, spec)
    items = entries(records)
    for e in items:
        e.protocol.setdefault("dataset", e.protocol.get("data"))
    datasets = list(dict.fromkeys(str(e.protocol.get("dataset")) for e in items))
    datasets.sort(key=lambda d: (_ZEROSHOT_ORDER.index(d) if d in _ZEROSHOT_ORDER else len(_ZEROSHOT_ORDER), d))
    models: dict[tuple[str, str], dict[str, Entry]] = {}
    for e in sorted(items, key=sort_key):
        cells = models.setdefault((e.label, e.family), {})
        dataset = str(e.protocol.get("dataset"))
        if dataset in cells:
            raise PrimebenchError(
                f"two records for model {e.label!r} on dataset {dataset!r} "
                f"(created {cells[dataset].created} and {e.created})",
                fix="pass one record per model and dataset (remove the older file)",
            )
        cells[dataset] = e
    columns = [Column("model", "model", False), Column("family", "family", False)]
    columns += [Column(d, d) for d in datasets]
    rows, targets = [], []
    for (label, _), by_ds in models.items():
        first = next(iter(by_ds.values()))
        variants = [(None, label)]
        if any("ppl_token_joint" in e.metrics and "ppl" in e.metrics for e in by_ds.values()):
            variants.append(("ppl_token_joint", f"{label}, paper objective"))
        for metric, row_label in variants:
            cells = [Cell(text=row_label), Cell(text=first.family_label)]
            for d in datasets:
                e = by_ds.get(d)
                name = metric or (None if e is None else _primary(e.metrics))
                cells.append(metric_cell(None if e is None else e.metrics.get(name), name or ""))
            rows.append(cells)
            targets.append([(2 + i, d, label) for i, d in enumerate(datasets)])
    groups = [(d, [e for e in items if str(e.protocol.get("dataset")) == d]) for d in datasets]
    ignored = PPL_IGNORED | {"dataset", "data", "split", "detokenizer"}
    diff_notes, flags = differences(groups, ignored, ())
    apply_flags(rows, targets, flags)
    notes = legend(rows) + diff_notes + family_info(items)
    notes.append(Footnote(None, "cells: perplexity (exp of nats/token) of each dataset; rows: models"))
    notes.append(count_note(len(records), {str(r.get("evaluation")) for r in records}))
    return Table("zeroshot", spec.title, tuple(columns), tuple(tuple(r) for r in rows), tuple(notes), len(records))


LAYOUT = Layout("zeroshot", ("ppl", "zeroshot"), "Zero-shot perplexity", build=zeroshot_table)


def render_zeroshot(record: dict) -> None:
    """One ``zeroshot`` record on stdout (bounds marked <=), with the protocol in one line."""

    p = record["protocol"]
    table = RichTable(
        title=f"{record['model']['name']} ({record['model']['family']}) zero-shot, lm-eval {p['lm_eval_version']}"
    )
    for col in ("task", "metric", "kind", "value", "± stderr", "units"):
        table.add_column(col)
    for name, m in record["metrics"].items():
        task, metric = name.split("/", 1)
        mark = "<= " if m["kind"] == "bound" else ""
        se = "n/a" if m["stderr"] is None else f"{m['stderr']:.4f}"
        table.add_row(task, metric, m["kind"], f"{mark}{m['value']:.4f}", se, m["units"])
    console = stdout_console()
    console.print(table)
    a = p["adapter"]
    k = "" if p["mc_samples"] is None else f" (K={p['mc_samples']})"
    rows = p.get("max_rows", p.get("limit"))  # records before the rename say ``limit``
    console.print(
        f"documents {p['documents']} (max rows {rows}); {p['estimator']['kind']}{k}: {p['estimator']['estimator']}; "
        f"requests {a['requests']}; truncated contexts {a['truncated_requests']} "
        f"({a['truncated_context_tokens']} tokens)"
    )


__all__ = ["LAYOUT", "render_zeroshot", "zeroshot_table"]
