"""The view that ``primebench quickstart`` prints: its paper tables and idle-step tables, in order."""

from __future__ import annotations


def render_quickstart(result) -> None:
    """A :class:`~harness.quickstart.QuickstartRecords` on stdout: perplexity, Gen PPL, both idle-step
    audits, the bound audit, then the digits' bits per dimension and FID."""
    from harness.logging import stdout_console
    from harness.views.idle import render_idle
    from harness.views.layouts import build_table
    from harness.views.table import to_rich

    screen = stdout_console()
    screen.print(to_rich(build_table(result.ppl, "ppl")))
    screen.print(to_rich(build_table(result.genppl, "genppl")))
    render_idle(result.idle_paper)
    render_idle(result.idle_here)
    screen.print(to_rich(build_table([result.bound], "bound")))
    screen.print(to_rich(build_table([r for r in result.images if r["evaluation"] == "ppl"], "ppl")))
    screen.print(to_rich(build_table([r for r in result.images if r["evaluation"] == "fid"], "fid")))


__all__ = ["render_quickstart"]
