"""Sampling precision: the paper-table layout of ``precision`` records and the one-record view that
``primebench audit precision`` prints."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from harness.views.entries import Layout

LAYOUT = Layout(
    "precision",
    ("precision",),
    "Sampling precision audit",
    axes=("sampler", "steps", "dtype"),
    metrics=("entropy", "gen_ppl", "nfe", "idle_steps"),
    title_keys=("method",),
)


def _se(value: float | None, decimals: int) -> str:
    return "n/a" if value is None else f"{value:.{decimals}f}"


def render_precision(record: dict) -> None:
    """One ``precision`` record on stdout: one row per (sampler, steps, dtype) run with its entropy,
    NFE, idle steps and wall time per sample (and Gen PPL when judged)."""

    p, rows = record["protocol"], record["rows"]
    units = p["entropy"]["units"] if rows else "nats"
    table = Table(
        title=f"precision audit: {p['sampler']}, method {p['method']}, {p['num_samples']} samples, seed {p['seed']}"
    )
    for name, justify in (
        ("sampler", "left"),
        ("steps", "right"),
        ("dtype", "left"),
        (f"entropy ({units})", "right"),
        ("± stderr", "right"),
        ("NFE", "right"),
        ("idle", "right"),
        ("wall s/sample", "right"),
    ):
        table.add_column(name, justify=justify)
    judged = any("gen_ppl" in r["metrics"] for r in rows)
    if judged:
        table.add_column(f"Gen PPL ({p.get('judge')})", justify="right")
    for r in rows:
        m, run = r["metrics"], r["protocol"]
        gen = m.get("gen_ppl")
        table.add_row(
            run["sampler"],
            "per unit" if run["steps"] is None else str(run["steps"]),
            run["dtype"],
            f"{m['entropy']['value']:.4f}",
            _se(m["entropy"]["stderr"], 4),
            f"{m['nfe']['value']:.1f}",
            f"{m['idle_steps']['value']:.1f}",
            f"{r['wall_s_per_sample']:.4f}",
            *([f"{gen['value']:.2f} ± {_se(gen['stderr'], 2)}" if gen else ""] if judged else []),
        )
    Console(width=120).print(table)


__all__ = ["LAYOUT", "render_precision"]
