"""The bound audit: the paper-table layout of ``bound`` records and the view that
``primebench audit bound`` prints (exact NLL, sub-token bound and paper objective side by side)."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table

from harness.views.entries import Layout

LAYOUT = Layout(
    "bound",
    ("bound",),
    "Bound audit (nats/token)",
    axes=("case", "name", "source", "C", "ell", "L"),
    metrics=("exact_nll", "subtoken_bound", "token_joint"),
)

FOOTNOTE = (
    "exact NLL: -log p_theta(x) (diffusion: of the one-sub-token-at-a-time sampler, by enumeration; ARM: exact).\n"
    "sub-token bound: a valid upper bound on the exact NLL (marginal of each masked sub-token).\n"
    "paper objective: MDM-Prime's L_vb with token-joint terms; NOT a bound when sub-tokens depend.\n"
    "All numbers in nats per token; ± is one Monte-Carlo standard error."
)


def _cell(value, stderr=None, ppl: bool = False) -> str:
    if value is None:
        return "-"
    text = f"{value:.4f}"
    if stderr is not None:
        text += f" ± {stderr:.4f}"
    if ppl and value < 700:
        text += f" (ppl {math.exp(value):.2f})"
    return text


def _table(audit):

    checkpoint = audit.protocol.get("source") == "checkpoint"
    title = (
        "bound audit: Monte Carlo on the checkpoint's validation rows"
        if checkpoint
        else "bound audit: exact enumeration on toy models"
    )
    table = Table(title=f"{title} (nats/token)", caption=FOOTNOTE, caption_justify="left")
    for name, justify in (
        ("case", "left"),
        ("data entropy", "right"),
        ("exact NLL (exact)", "right"),
        ("sub-token bound (bound)", "right"),
        ("paper objective, token-joint (NOT a bound)", "right"),
        ("gap = paper objective - exact", "right"),
        ("verdict", "left"),
    ):
        table.add_column(name, justify=justify, no_wrap=name in ("verdict", "case") and not checkpoint)
    for r in audit.rows:
        gap = "-" if r.gap is None else f"{r.gap:+.4f}"
        table.add_row(
            r.name,
            _cell(r.data_entropy),
            _cell(r.exact_nll, r.exact_nll_stderr, checkpoint),
            _cell(r.subtoken_bound, r.subtoken_bound_stderr, checkpoint),
            _cell(r.token_joint, r.token_joint_stderr, checkpoint),
            gap,
            r.verdict,
        )
    return table


def _bound_name(row) -> str:
    """What a row's bound is: next to a paper objective (token-joint terms) it is the sub-token bound
    (marginal terms) on the same draws; alone it is the whole-token NELBO."""
    return "sub-token bound" if row.token_joint is not None else "NELBO"


def _summary(audit) -> str:
    """Plain-words findings: what each Monte-Carlo number is, and whether the bound held."""
    holds = audit.subtoken_always_holds
    checked = sum(r.subtoken_holds is not None for r in audit.rows)
    below = sum(r.gap is not None and r.gap < -1e-12 for r in audit.rows)
    lines = []
    for r in audit.rows:
        if r.method == "enumeration":
            continue
        if r.subtoken_bound is not None:
            lines.append(
                f"{r.name}: {_cell(r.subtoken_bound, r.subtoken_bound_stderr, True)} nats/token is an "
                f"UPPER BOUND on the NLL ({_bound_name(r)})."
            )
        if r.token_joint is not None:
            lines.append(
                f"{r.name}: {_cell(r.token_joint, r.token_joint_stderr, True)} nats/token is the PAPER "
                "OBJECTIVE (token-joint L_vb), not a bound on the NLL."
            )
        if r.exact_nll is not None:
            lines.append(f"{r.name}: {_cell(r.exact_nll, r.exact_nll_stderr, True)} nats/token is the EXACT NLL.")
    if holds is True:
        lines.append(f"sub-token bound >= exact NLL in all {checked} rows where both are known.")
    elif holds is False:
        lines.append("VIOLATION: the sub-token bound fell below the exact NLL in some row: a bug in the estimator.")
    if below:
        lines.append(
            f"the paper objective (token-joint) is below the exact NLL in {below} of {checked} rows: "
            "it is not an upper bound on the NLL."
        )
    return "\n".join(lines)


def render_bound(audit) -> None:
    """A :class:`~harness.audit.bound.BoundAudit` on stdout: the table, then the findings in words."""

    out = Console(width=220)
    out.print(_table(audit))
    summary = _summary(audit)
    if summary:
        out.print(summary)


__all__ = ["FOOTNOTE", "LAYOUT", "render_bound"]
