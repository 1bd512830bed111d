"""``primebench reproduce JOB``: one command per paper-style table (jobs in :mod:`harness.reproduce`).

``primebench quickstart`` is the same command as ``primebench reproduce quickstart``. The precision job
and the paper-scale presets are in :mod:`harness.cli.reproduce_paper`."""

from __future__ import annotations

import time
from pathlib import Path

import click

from harness.cli.options import Command, command, option, out_option
from harness.cli.parsing import comma_list
from harness.cli.reproduce_paper import PAPER_COMMANDS, reproduce_precision_cmd

# the one-release spellings of the machine-scale jobs' renamed options
JOB_ALIASES = {"--steps": "--train-steps"}


@click.group("reproduce")
def reproduce_group():
    """Regenerate a paper-style comparison: quickstart (this machine, see results/quickstart), precision,
    small, and the paper-scale presets (owt, zeroshot, genppl, cifar10-fid; precision --paper) with --dry-run."""


def _job_options(default_out: str, default_samples: int):
    """The options a machine-scale text job takes (quickstart, small)."""
    options = [
        out_option(
            "Checkpoints, records, tables.md and plots go into it.", default=Path(default_out), show_default=True
        ),
        option("--force", is_flag=True),
        option("--judge", default="smollm2", show_default=True),
        option("--train-steps", "Every model's.", type=click.IntRange(min=1), default=None),
        option("--max-rows", "Of the validation split and of each zero-shot task.", type=click.IntRange(min=1)),
        option(
            "--samples",
            "Gen-PPL (and, in the quickstart, precision-audit) samples per model and dtype.",
            type=click.IntRange(min=1),
            default=default_samples,
            show_default=True,
        ),
    ]

    def decorate(fn):
        for decorator in reversed(options):
            fn = decorator(fn)
        return fn

    return decorate


def _run_quickstart(out, force, judge, train_steps, max_rows, samples):
    from harness.logging import console
    from harness.reproduce.quickstart import run_quickstart
    from harness.reproduce.report import print_sections, quickstart_sections

    t0 = time.time()
    result = run_quickstart(out, force=force, judge=judge, steps=train_steps, max_rows=max_rows, samples=samples)
    print_sections(quickstart_sections(result))
    minutes = (time.time() - t0) / 60
    console().log(
        f"quickstart finished in {minutes:.1f} min; records in {result.records}, tables in "
        f"{result.out / 'tables.md'}, plots {', '.join(p.name for p in sorted(result.out.glob('*.png')))} "
        f"(render again with: primebench table {result.records} --layout ppl)"
    )


@reproduce_group.command("quickstart", cls=Command, aliases=JOB_ALIASES)
@_job_options("results/runs/quickstart", 8)
def reproduce_quickstart_cmd(out, force, judge, train_steps, max_rows, samples):
    """Train ARM, BD3-LM, MDLM, masked and Prime (ell=2, 4) on embedded Wikipedia text and digits; print ppl, genppl,
    zero-shot, idle, bound, precision and Gumbel tables; write tables.md and PNG plots."""
    _run_quickstart(out, force, judge, train_steps, max_rows, samples)


@command("quickstart", aliases=JOB_ALIASES)
@_job_options("results/runs/quickstart", 8)
def quickstart_cmd(out, force, judge, train_steps, max_rows, samples):
    """The same as `primebench reproduce quickstart` (what `make quickstart` runs)."""
    _run_quickstart(out, force, judge, train_steps, max_rows, samples)


def _small_models() -> tuple[str, ...]:
    from harness.reproduce.small import MODELS

    return MODELS


@reproduce_group.command("small", cls=Command, aliases=JOB_ALIASES)
@_job_options("results/runs/small", 32)
@option(
    "--seed",
    "The first training seed. The records of other seeds already in OUT/records (an earlier run of the job) "
    "stay in the tables, so a later seed is trained without seed 0's checkpoints.",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
)
@option(
    "--seeds",
    "Training seeds per family; tables add the mean with the seed-to-seed spread. Seed 0 reuses a "
    "one-seed run's stages.",
    type=click.IntRange(min=1, max=100),
    default=1,
    show_default=True,
)
@option(
    "--models",
    "The other models' records already in OUT/records (an earlier run of the job) stay in the tables.",
    default=None,
    metavar="NAMES",
    type=comma_list(lambda: _small_models(), "model"),
)
def reproduce_small_cmd(out, force, judge, train_steps, max_rows, samples, seed, seeds, models):
    """Every family at CPU scale (about two hours per seed on a 2-core CPU): perplexity (exact / valid bound /
    paper objective), Gen PPL with entropy in float64, zero-shot, idle steps measured on the models."""
    from harness.logging import console
    from harness.reproduce.report import print_sections, small_sections
    from harness.reproduce.small import run_small

    t0 = time.time()
    result = run_small(
        out,
        force=force,
        judge=judge,
        steps=train_steps,
        max_rows=max_rows,
        samples=samples,
        seeds=seeds,
        models=models,
        first_seed=seed,
    )
    print_sections(small_sections(result))
    console().log(
        f"reproduce small finished in {(time.time() - t0) / 60:.1f} min; tables in {result.out / 'tables.md'}"
    )


reproduce_group.add_command(reproduce_precision_cmd)
for _command in PAPER_COMMANDS:
    reproduce_group.add_command(_command)

COMMANDS = [reproduce_group, quickstart_cmd]
