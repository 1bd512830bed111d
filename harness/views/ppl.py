"""Perplexity: the paper table of ``ppl`` records (one row per model) and the one-record view that
``primebench eval ppl`` prints."""

from __future__ import annotations

import json
from typing import Any

from rich.table import Table as RichTable

from harness.logging import stdout_console
from harness.metrics.references import NOT_LEARNED, no_better_than_unigram
from harness.views.entries import TITLES, Layout, entries, extra_metrics, metric_cell, sort_key, unique_labels
from harness.views.footnotes import apply_flags, count_note, differences, family_info, legend, shared_title, units_note
from harness.views.table import Cell, Column, Footnote, Table

#: the mark after a model that is no better than the unigram reference of its own tokens
NOT_LEARNED_MARK = "(!)"

# PPL records: the packing statistics follow from the data and the packing settings.
PPL_IGNORED = frozenset(
    {"rows_scored", "tokens_scored"}
    | {
        f"packing.{k}"
        for k in (
            "corpus",
            "split",
            "tokenizer",
            "seq_len",
            "documents",
            "document_tokens",
            "tokens_in",
            "tokens_dropped",
            "truncated_docs",
            "padded_rows",
            "rows",
            "tokens_out",
        )
    }
)
#: numbers that never share the PPL and NLL columns: (metric suffix, column title, kind mark), each
#: with its own pair of columns when any record has it
_OWN_COLUMNS = (
    ("_token_joint", "paper objective", "paper-objective"),
    ("_duel", "DUEL under its policy", "exact-policy"),
)
_PPL_METRICS = ("nll", "ppl", *(f"{m}{s}" for s, _, _ in _OWN_COLUMNS for m in ("nll", "ppl")))


def _protocol_summary(p: dict[str, Any], *, with_data: bool = True) -> str:
    """One cell: data, L, tokenizer, packing, K and rows, e.g. ``L=128, bpe:1000, wrap, eos, drop, K=1``."""
    parts = [str(p.get("data") or p.get("dataset") or "?")] if with_data else []
    if p.get("seq_len") is not None:
        parts.append(f"L={p['seq_len']}")
    if p.get("tokenizer") is not None:
        parts.append(str(p["tokenizer"]))
    if p.get("packing.wrap") is not None:
        parts.append("wrap" if p["packing.wrap"] else "no-wrap")
    if p.get("packing.eos_between_docs") is not None:
        parts.append("eos" if p["packing.eos_between_docs"] else "no-eos")
    if p.get("packing.remainder") is not None:
        parts.append(str(p["packing.remainder"]))
    if p.get("mc_samples") is not None:
        parts.append(f"K={p['mc_samples']}")
    if p.get("duel.name") is not None:
        block = p.get("duel.block")
        parts.append(
            f"DUEL policy={p['duel.name']}, {p.get('duel.tokens_per_step', 1)}/step"
            + (f", block {block}" if block else "")
        )
    if p.get("max_rows") is not None:
        parts.append(f"{p.get('rows_scored', p['max_rows'])} rows")
    return ", ".join(parts)


def ppl_table(records, spec: Layout) -> Table:
    """One row per model: PPL and NLL with their kind, the paper objective when any record has it,
    unknown metrics, tokens scored and a protocol summary."""
    items = sorted(entries(records), key=sort_key)
    unique_labels(items)
    own = [
        (f"ppl{suffix}", f"nll{suffix}", title, mark)
        for suffix, title, mark in _OWN_COLUMNS
        if any(k in e.metrics for e in items for k in (f"ppl{suffix}", f"nll{suffix}"))
    ]
    extra = extra_metrics(items, _PPL_METRICS)
    columns = [
        Column("model", "model", False),
        Column("family", "family", False),
        Column("ppl", "PPL"),
        Column("nll", "NLL (nats/token)"),
        Column("kind", "kind", False),
    ]
    for ppl, nll, title, mark in own:
        columns += [Column(ppl, f"PPL, {title}", mark=mark), Column(nll, f"NLL, {title}", mark=mark)]
    columns += [Column(n, TITLES.get(n, n)) for n in extra]
    columns += [Column("tokens_scored", "tokens scored"), Column("protocol", "protocol", False)]
    shared_data = len({json.dumps(e.protocol.get("data"), default=str) for e in items}) == 1
    rows, targets = [], []
    flagged = []
    for e in items:
        nll = (e.metrics.get("nll") or {}).get("value")
        label = e.label
        if nll is not None and no_better_than_unigram(nll, e.references):
            flagged.append(e.label)
            label = f"{e.label} {NOT_LEARNED_MARK}"
        cells = [
            Cell(text=label),
            Cell(text=e.family_label),
            metric_cell(e.metrics.get("ppl"), "ppl"),
            metric_cell(e.metrics.get("nll"), "nll"),
            Cell(text=str((e.metrics.get("ppl") or e.metrics.get("nll") or {}).get("kind", "-"))),
        ]
        cells += [metric_cell(e.metrics.get(n), n) for ppl, nll, _, _ in own for n in (ppl, nll)]
        cells += [metric_cell(e.metrics.get(n), n) for n in extra]
        tokens = e.protocol.get("tokens_scored")
        cells += [
            Cell() if tokens is None else Cell(value=float(tokens), kind="exact", stderr=0.0, decimals=0),
            Cell(text=_protocol_summary(e.protocol, with_data=not shared_data)),
        ]
        rows.append(cells)
        targets.append([(0, "", e.label)])
    diff_notes, flags = differences([("", items)], PPL_IGNORED, ())
    apply_flags(rows, targets, flags)
    ref_rows, ref_notes = reference_rows(items, len(columns), blank=2 * len(own) + len(extra))
    notes = legend(rows) + diff_notes + family_info(items) + ref_notes
    if flagged:
        notes.append(
            Footnote(
                None,
                f"{NOT_LEARNED_MARK} {', '.join(flagged)}: {NOT_LEARNED} (its NLL is not below the "
                "unigram reference of its own scored tokens)",
            )
        )
    rows += ref_rows
    units = units_note(items, [n for n in ("ppl", "nll", *extra) if any(n in e.metrics for e in items)])
    notes += [units] if units else []
    notes.append(count_note(len(records), {str(r.get("evaluation")) for r in records}))
    title = shared_title(spec.title, items, ("data",))
    return Table("ppl", title, tuple(columns), tuple(tuple(r) for r in rows), tuple(notes), len(records))


def reference_rows(items, n_columns: int, *, blank: int) -> tuple[list[list[Cell]], list[Footnote]]:
    """Rows labelled ``reference`` (unigram, bigram) under the models: one pair per distinct set of
    scored tokens (a family's token convention, the rows and the train split they were fitted on),
    naming the models it belongs to when there is more than one set."""
    groups: dict[str, tuple[dict, list[str]]] = {}
    for e in items:
        refs = e.references
        if not refs or "unigram" not in refs:
            continue
        key = json.dumps(
            [
                refs.get("fit_on"),
                refs.get("tokens_scored"),
                refs["unigram"]["nll"]["value"],
                refs["bigram"]["nll"]["value"],
            ]
        )
        groups.setdefault(key, (refs, []))[1].append(e.label)
    rows = []
    for refs, labels in groups.values():
        whose = f"; tokens of {', '.join(labels)}" if len(groups) > 1 else ""
        for name in ("unigram", "bigram"):
            cells = [
                Cell(text=name),
                Cell(text="reference"),
                metric_cell(refs[name]["ppl"], "ppl"),
                metric_cell(refs[name]["nll"], "nll"),
                Cell(text="exact"),
            ]
            cells += [Cell() for _ in range(blank)]  # the metric columns after the kind: empty
            cells += [
                Cell(value=float(refs["tokens_scored"]), kind="exact", stderr=0.0, decimals=0),
                Cell(text=f"fitted on {refs.get('fit_on')}{whose}"),
            ]
            assert len(cells) == n_columns
            rows.append(cells)
    notes = []
    if rows:
        notes.append(
            Footnote(
                None,
                "reference rows: the exact cross-entropy of a smoothed unigram and bigram model "
                "fitted on the train split, on the same scored tokens (a model that learned "
                "nothing from context sits at the unigram row)",
            )
        )
    return rows, notes


LAYOUT = Layout("ppl", ("ppl",), "Perplexity", build=ppl_table)


def render_ppl(record: dict) -> None:
    """One ``ppl`` record on stdout: each metric with its kind (bounds marked <=), then the scoring protocol."""

    p = record["protocol"]
    table = RichTable(title=f"{record['model']['name']} ({record['model']['family']}) on {p['data']}")
    for col in ("metric", "kind", "value", "± stderr", "units"):
        table.add_column(col)
    for name, m in record["metrics"].items():
        mark = "<= " if m["kind"] == "bound" else ""
        label = "paper objective (not a bound)" if m["kind"] == "paper-objective" else m["kind"]
        se = "n/a" if m["stderr"] is None else f"{m['stderr']:.4f}"
        table.add_row(name, label, f"{mark}{m['value']:.4f}", se, m["units"])
    refs = record.get("references") or {}
    for name in ("unigram", "bigram"):
        if name in refs:
            for metric in ("nll", "ppl"):
                m = refs[name][metric]
                table.add_row(f"{name} reference ({metric})", "exact", f"{m['value']:.4f}", "0.0000", m["units"])
    console = stdout_console()
    console.print(table)
    if refs:
        note = f"; {refs['note']}" if refs.get("note") else ""
        console.print(
            f"references fitted on {refs['fit_on']} ({refs['train_tokens']} tokens), scored on the same "
            f"{refs['tokens_scored']} tokens{note}"
        )
    duel = p.get("duel")
    if isinstance(duel, dict):
        block = f", inside blocks of {duel['block']}" if duel.get("block") else ""
        console.print(
            f"DUEL: the exact likelihood of the sampler that reveals {duel['tokens_per_step']} token(s) per step "
            f"in the {duel['name']} policy's order{block} ({duel['forward_passes_per_row']:.1f} forward passes per "
            "row); not the model's likelihood, which its bound bounds"
        )
    if "height" in p:  # images: one image per row, no packing
        console.print(
            f"dimensions scored {p['tokens_scored']:.0f} in {p['rows_scored']} images of "
            f"{p['height']}x{p['width']}x{p['channels']} ({p['levels']} levels, {p['tokenizer']}); "
            f"{p['token_convention']}; stderr: {p['stderr_method']}"
        )
        return
    console.print(
        f"tokens scored {p['tokens_scored']:.0f} in {p['rows_scored']} rows of L={p['seq_len']} "
        f"({p['tokenizer']}, wrap={p['packing'].get('wrap')}, "
        f"eos_between_docs={p['packing'].get('eos_between_docs')}); "
        f"{p['token_convention']}; stderr: {p['stderr_method']}"
    )


__all__ = ["LAYOUT", "PPL_IGNORED", "ppl_table", "render_ppl"]
