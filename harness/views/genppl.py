"""Generative perplexity: the paper-table layout of ``genppl`` records and the one-record view that
``primebench eval genppl`` prints."""

from __future__ import annotations

import math

from rich.table import Table

from harness.logging import stdout_console
from harness.views.entries import Layout, metric_cell
from harness.views.generic import generic_table
from harness.views.table import Cell, Footnote

#: the mark after a run whose samples collapsed (cross-sample diversity far below held-out text)
COLLAPSED_MARK = "(collapsed)"


def _collapsed(entry) -> str | None:
    check = (entry.references or {}).get("check") or {}
    return COLLAPSED_MARK if check.get("collapsed") else None


def _close(a, b) -> bool:
    """Whether two reference blocks are the same up to the judge's float round-off (another batch or
    thread count moves its scores by about 1e-7): equal structure, numbers within 1e-5 relative."""

    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-5)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return a == b


def _reference_rows(items, columns):
    """``data``, ``tiled`` and ``unigram`` rows labelled ``reference``: one set per distinct
    reference block (named after the runs it belongs to when there is more than one); blocks that
    differ only by float round-off are one."""

    groups: list[tuple[dict, list[str]]] = []
    for e in items:
        refs = e.references
        if refs and "data" in refs:
            block = {n: refs[n] for n in ("data", "tiled", "unigram", "provenance")}
            same = next((g for g in groups if _close(g[0], block)), None)
            if same is None:
                groups.append((block, [e.label]))
            else:
                same[1].append(e.label)
    rows = []
    for refs, labels in groups:
        whose = f" ({', '.join(labels)})" if len(groups) > 1 else ""
        for name in ("data", "tiled", "unigram"):
            metrics = refs[name]["metrics"]
            cells = [Cell(text=f"{name}{whose}"), Cell(text="reference")]
            cells += [metric_cell(metrics.get(col.key), col.key) for col in columns[2:]]
            rows.append(cells)
    notes = []
    if rows:
        notes.append(
            Footnote(
                None,
                "reference rows, scored as the samples are: data = held-out rows of the training corpus, "
                "tiled = one held-out row as every sample (collapse), unigram = tokens drawn from the train "
                "split's frequencies (no context)",
            )
        )
    flagged = [e.label for e in items if _collapsed(e)]
    if flagged:
        rule = next(e.references["check"]["rule"] for e in items if _collapsed(e))
        notes.append(Footnote(None, f"{COLLAPSED_MARK} {', '.join(flagged)}: {rule}"))
    return rows, notes


def genppl_table(records, spec: Layout):
    """The generic table with a (collapsed) mark on runs whose diversity collapsed, and the
    reference rows under the runs."""

    return generic_table(records, spec, mark=_collapsed, tail=_reference_rows)


LAYOUT = Layout(
    "genppl",
    ("genppl",),
    "Generative perplexity",
    axes=("sampler", "steps", "dtype", "nucleus_p"),
    metrics=(
        "gen_ppl",
        "entropy_model",
        "pooled_entropy",
        "distinct_4",
        "cross_repeat_4",
        "mauve",
        "entropy_judge",
        "nfe",
    ),
    title_keys=("judge",),
    build=genppl_table,
)


def render_genppl(record: dict) -> None:
    """One ``genppl`` record on stdout: each metric with its sampling error, then the judge's protocol."""

    p = record["protocol"]
    title = (
        f"{record['model']['name']} ({record['model']['family']}): {p['samples']} samples, {p.get('sampler')} "
        f"steps={p.get('steps')} dtype={p.get('dtype')} method={p.get('method')} nucleus={p.get('nucleus_p')}"
    )
    table = Table(title=title)
    for col in ("metric", "value", "± stderr", "units"):
        table.add_column(col)
    for name, m in record["metrics"].items():
        se = "n/a" if m["stderr"] is None else f"{m['stderr']:.3f}"
        table.add_row(name, f"{m['value']:.3f}", se, m["units"])
    refs = record.get("references") or {}
    for name in ("data", "tiled", "unigram"):
        for metric, m in (refs.get(name) or {}).get("metrics", {}).items():
            se = "n/a" if m["stderr"] is None else f"{m['stderr']:.3f}"
            table.add_row(f"{name} reference: {metric}", f"{m['value']:.3f}", se, m["units"])
    console = stdout_console()
    console.print(table)
    if refs.get("check"):
        check = refs["check"]
        state = "COLLAPSED" if check["collapsed"] else "not collapsed"
        console.print(f"diversity: {state}: {check['why']}; {check['rule']}")
    if p.get("judge"):
        console.print(
            f"judge: {p['judge_description']}; retokenised without special tokens, truncated at "
            f"{p['judge_retokenization']['max_length']} tokens; "
            "Gen PPL is an estimate from these samples (± is its sampling error)"
        )


__all__ = ["LAYOUT", "render_genppl"]
