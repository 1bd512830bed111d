"""Generative perplexity: the paper-table layout of ``genppl`` records and the one-record view that
``primebench eval genppl`` prints."""

from __future__ import annotations

from harness.views.entries import Layout

LAYOUT = Layout(
    "genppl",
    ("genppl",),
    "Generative perplexity",
    axes=("sampler", "steps", "dtype", "nucleus_p"),
    metrics=("gen_ppl", "entropy_model", "entropy_judge", "nfe"),
    title_keys=("judge",),
)


def render_genppl(record: dict) -> None:
    """One ``genppl`` record on stdout: each metric with its sampling error, then the judge's protocol."""
    from rich.table import Table

    from harness.logging import stdout_console

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
    console = stdout_console()
    console.print(table)
    if p.get("judge"):
        console.print(
            f"judge: {p['judge_description']}; retokenised without special tokens, truncated at "
            f"{p['judge_retokenization']['max_length']} tokens; "
            "Gen PPL is an estimate from these samples (± is its sampling error)"
        )


__all__ = ["LAYOUT", "render_genppl"]
