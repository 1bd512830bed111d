"""Idle steps: the paper-table layout of ``idle`` records and the one-record view that
``primebench audit idle`` prints."""

from __future__ import annotations

from rich.table import Table

from harness.logging import stdout_console
from harness.views.entries import Layout

LAYOUT = Layout(
    "idle",
    ("idle",),
    "Idle steps",
    axes=("ell", "steps", "seq_len", "length", "batch"),
    metrics=("isr", "nfe"),
    title_keys=("schedule",),
)


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def render_idle(record: dict) -> None:
    """One ``idle`` record on stdout: analytic, whole-batch and measured idle-step ratios per ell, with
    the expected NFE under caching, then what each column means."""

    p = record["protocol"]
    B, measured = p["batch"], p["measurement"]
    table = Table(title=f"idle-step ratio: L={p['length']}, T={p['steps']}, {p['schedule']} schedule")
    columns = ["ell", "units L*ell", "ISR (1 seq)", "paper", f"ISR (batch B={B})", "E[NFE] cached"]
    if B > 1:
        columns.append(f"E[NFE] batch cache B={B}")
    if measured:
        columns += [f"measured ISR ({measured['runs']} runs)", "measured NFE"]
    for name in columns:
        table.add_column(name, justify="left" if name == "ell" else "right")
    for r in record["rows"]:
        cells = [
            str(r["ell"]),
            str(r["units"]),
            _pct(r["isr"]),
            "" if r["paper_percent"] is None else f"{r['paper_percent']:.2f}%",
            _pct(r["isr_batch"]),
            f"{r['expected_nfe']:.1f}",
        ]
        if B > 1:
            cells.append(f"{r['expected_nfe_batch']:.1f}")
        if measured:
            m = r["measured"]
            se = "" if m["isr_stderr"] is None else f" ± {100 * m['isr_stderr']:.2f}"
            nse = "" if m["nfe_stderr"] is None else f" ± {m['nfe_stderr']:.1f}"
            cells += [f"{100 * m['isr']:.2f}{se}%", f"{m['nfe']:.1f}{nse}"]
        table.add_row(*cells)
    notes = [
        "ISR = idle steps / T; a step is idle when no unit (token; sub-token for ell > 1) changes. "
        "Analytic: (1/T) sum_k (1 - Delta_k)^(B L ell), Delta_k = reveal probability of step k (linear: 1/T).",
        "E[NFE] cached: denoiser calls when the output is reused across idle steps (per sequence); "
        "the batch cache (MDLM/Prime code) calls unless the whole batch is idle.",
        "measured NFE: the sampler also skips the call when nothing is masked, so its expectation is "
        "T (1 - ISR), E[NFE] cached minus P(step T idle) (< 1 call).",
    ]
    if measured:
        notes.append(
            f"measured: the real ancestral sampler (float64 draws, cache on) on ONE sequence with a "
            f"uniform stand-in denoiser, {measured['runs']} runs, seed {measured['seed']}; ± one standard error."
        )
    if p["paper"]:
        notes.append(f"paper: {p['paper']}.")
    out = stdout_console()
    out.print(table)
    for note in notes:
        out.print(note, highlight=False)


__all__ = ["LAYOUT", "render_idle"]
