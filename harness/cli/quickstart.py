"""``primebench quickstart``: the main job on the embedded defaults (what ``make quickstart`` runs;
pipeline in :mod:`harness.quickstart`, view in :mod:`harness.views.quickstart`)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from harness.cli.options import out_option

from harness.quickstart import GENPPL


@click.command("quickstart")
@out_option("Folder of the checkpoints, records and tables.", default=Path("results/runs/quickstart"), show_default=True)
@click.option("--force", is_flag=True, help="Redo stages whose outputs exist.")
@click.option("--judge", default="smollm2", show_default=True, help="Gen-PPL judge (offline default smollm2).")
@click.option("--steps", type=click.IntRange(min=1), default=None, help="Override train.steps of every model (a smoke run; recorded in each checkpoint's config).")
@click.option("--max-rows", type=click.IntRange(min=1), default=None, help="Score only the first N validation rows (recorded).")
@click.option("--samples", type=click.IntRange(min=1), default=GENPPL["samples"], show_default=True, help="Gen-PPL samples per model and dtype.")
def quickstart_cmd(out, force, judge, steps, max_rows, samples):
    """Train ARM, MDLM, masked and Prime (ell=2, 4) on embedded Wikipedia text; print ppl, genppl, idle and bound tables."""
    from harness.logging import console
    from harness.quickstart import run_quickstart
    from harness.views import render_quickstart

    t0 = time.time()
    result = run_quickstart(out, force=force, judge=judge, steps=steps, max_rows=max_rows, samples=samples)
    render_quickstart(result)
    minutes = (time.time() - t0) / 60
    console().log(f"quickstart finished in {minutes:.1f} min; records in {result.records} "
                  f"(render again with: primebench table {result.records} --layout ppl)")


COMMANDS = [quickstart_cmd]
