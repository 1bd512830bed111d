"""``primebench reproduce JOB``: one command per paper-style table (jobs in :mod:`harness.reproduce`).

``primebench quickstart`` is the same command as ``primebench reproduce quickstart``."""

from __future__ import annotations

import time
from pathlib import Path

import click

from harness.cli.options import out_option


@click.group("reproduce")
def reproduce_group():
    """Regenerate a paper-style comparison: quickstart (this machine, ~10 min), precision, small, and the
    paper-scale presets (owt, zeroshot, genppl, cifar10-fid; precision --paper) with --dry-run."""


def _job_options(default_out: str, default_samples: int):
    """The options a machine-scale text job takes (quickstart, small)."""
    return lambda fn: _add_job_options(fn, Path(default_out), default_samples)


def _add_job_options(fn, default_out: Path, default_samples: int):
    options = [
        out_option("Folder of the checkpoints, records, tables.md and plots.", default=default_out, show_default=True),
        click.option("--force", is_flag=True, help="Redo every stage, even those done with the same config."),
        click.option("--judge", default="smollm2", show_default=True, help="Gen-PPL judge (offline default smollm2)."),
        click.option(
            "--steps",
            type=click.IntRange(min=1),
            default=None,
            help="Override train.steps of every model (a smoke run; recorded in each checkpoint's config).",
        ),
        click.option(
            "--max-rows",
            type=click.IntRange(min=1),
            default=None,
            help="Score only the first N validation rows and zero-shot documents (recorded).",
        ),
        click.option(
            "--samples",
            type=click.IntRange(min=1),
            default=default_samples,
            show_default=True,
            help="Gen-PPL (and, in the quickstart, precision-audit) samples per model and dtype.",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _run_quickstart(out, force, judge, steps, max_rows, samples):
    from harness.logging import console
    from harness.reproduce.quickstart import run_quickstart
    from harness.reproduce.report import print_sections, quickstart_sections

    t0 = time.time()
    result = run_quickstart(out, force=force, judge=judge, steps=steps, max_rows=max_rows, samples=samples)
    print_sections(quickstart_sections(result))
    minutes = (time.time() - t0) / 60
    console().log(
        f"quickstart finished in {minutes:.1f} min; records in {result.records}, tables in "
        f"{result.out / 'tables.md'}, plots {', '.join(p.name for p in sorted(result.out.glob('*.png')))} "
        f"(render again with: primebench table {result.records} --layout ppl)"
    )


@reproduce_group.command("quickstart")
@_job_options("results/runs/quickstart", 8)
def reproduce_quickstart_cmd(out, force, judge, steps, max_rows, samples):
    """Train ARM, MDLM, masked and Prime (ell=2, 4) on embedded Wikipedia text and digits; print ppl, genppl,
    zero-shot, idle, bound, precision and Gumbel tables; write tables.md and PNG plots."""
    _run_quickstart(out, force, judge, steps, max_rows, samples)


@click.command("quickstart")
@_job_options("results/runs/quickstart", 8)
def quickstart_cmd(out, force, judge, steps, max_rows, samples):
    """The same as `primebench reproduce quickstart` (what `make quickstart` runs)."""
    _run_quickstart(out, force, judge, steps, max_rows, samples)


@reproduce_group.command("precision")
@out_option(
    "Folder of the checkpoints, records, tables.md and precision.png.",
    default=Path("results/runs/precision"),
    show_default=True,
)
@click.option("--force", is_flag=True, help="Redo every stage, even those done with the same config.")
@click.option(
    "--steps",
    "train_steps",
    type=click.IntRange(min=1),
    default=None,
    help="Override train.steps of both models (a smoke run; recorded).",
)
@click.option("--sampling-steps", default=None, help="Sweep of T, comma-separated [default: 16,64,256].")
@click.option(
    "--samples",
    default=None,
    metavar="N|MODEL=N,...",
    help="Samples per run: N for both models, or per model (mdlm=48,prime=8; a model not named keeps its "
    "default) [default: mdlm=48,prime=8]. With --paper: one number.",
)
@click.option(
    "--paper",
    is_flag=True,
    help="The paper-scale preset instead: an imported MDLM-OWT checkpoint, L = 1024, "
    "T = 100 to 10,000, float32 vs float64 (with --dry-run, --checkpoint mdlm=SRC, "
    "--nproc, --tflops).",
)
@click.option("--dry-run", is_flag=True, help="With --paper: print the plan and stop (offline).")
@click.option(
    "--checkpoint", "checkpoints", multiple=True, metavar="mdlm=SRC", help="With --paper: the checkpoint to audit."
)
@click.option(
    "--nproc", type=click.IntRange(min=1), default=1, show_default=True, help="With --paper: torchrun processes."
)
@click.option(
    "--tflops",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="With --paper: measured TFLOP/s per GPU.",
)
@click.option("--gpu", default="GPU", show_default=True, help="With --paper: the GPU's name.")
def reproduce_precision_cmd(
    out, force, train_steps, sampling_steps, samples, paper, dry_run, checkpoints, nproc, tflops, gpu
):
    """The fp32 temperature effect at GPT-2's vocabulary: small MDLM and Prime, joint draw in float32 vs
    float64 over steps, the two-stage draw as control, and the entropy predicted by the draw's exact law."""
    from harness.cli.options import int_list, per_name_ints
    from harness.logging import console
    from harness.reproduce.precision import MODELS, run_precision
    from harness.reproduce.report import precision_sections, print_sections

    if paper:
        if samples is not None and (not samples.strip().isdigit() or int(samples) < 1):
            raise click.BadParameter(
                f"{samples!r}: with --paper give one number of samples, an integer >= 1", param_hint="--samples"
            )
        samples = None if samples is None else int(samples)
        root = Path("results/runs") if out == Path("results/runs/precision") else out
        _run_paper("precision", dry_run, checkpoints, nproc, tflops, gpu, samples, sampling_steps, root)
        return
    if dry_run or checkpoints:
        raise click.UsageError(
            "--dry-run and --checkpoint go with --paper (the machine-scale job trains its own models)"
        )
    try:
        per_model = None if samples is None else per_name_ints(samples, MODELS)
    except click.BadParameter as error:
        error.param_hint = "--samples"
        raise
    t0 = time.time()
    result = run_precision(
        out,
        force=force,
        steps=train_steps,
        samples=per_model,
        audit_steps=None if sampling_steps is None else int_list(sampling_steps),
    )
    print_sections(precision_sections(result))
    console().log(
        f"reproduce precision finished in {(time.time() - t0) / 60:.1f} min; tables in "
        f"{result.out / 'tables.md'}, plot {result.out / 'precision.png'}"
    )


@reproduce_group.command("small")
@_job_options("results/runs/small", 32)
@click.option(
    "--seeds",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Training seeds per family (0..N-1); tables add the mean with the seed-to-seed spread. Seed 0 "
    "reuses a one-seed run's stages.",
)
def reproduce_small_cmd(out, force, judge, steps, max_rows, samples, seeds):
    """The four families at CPU scale (about 95 minutes per seed on a 2-core CPU): perplexity (exact / valid
    bound / paper objective), Gen PPL with entropy in float64, zero-shot, idle steps measured on the models."""
    from harness.logging import console
    from harness.reproduce.report import print_sections, small_sections
    from harness.reproduce.small import run_small

    t0 = time.time()
    result = run_small(out, force=force, judge=judge, steps=steps, max_rows=max_rows, samples=samples, seeds=seeds)
    print_sections(small_sections(result))
    console().log(
        f"reproduce small finished in {(time.time() - t0) / 60:.1f} min; tables in {result.out / 'tables.md'}"
    )


def _paper_options(fn):
    options = [
        click.option(
            "--dry-run",
            is_flag=True,
            help="Print the plan (what is trained or loaded, evaluated, and its compute) and stop; works offline.",
        ),
        click.option(
            "--checkpoint",
            "checkpoints",
            multiple=True,
            metavar="NAME=SRC",
            help="Use an imported checkpoint for model NAME instead of training it (any source "
            "`primebench import` or harness.load takes); repeatable.",
        ),
        click.option(
            "--nproc",
            type=click.IntRange(min=1),
            default=1,
            show_default=True,
            help="Processes per node: the commands run under torchrun when > 1.",
        ),
        click.option(
            "--tflops",
            type=click.FloatRange(min=0, min_open=True),
            default=None,
            help="Measured TFLOP/s per GPU (e.g. from `primebench bench --device cuda`), for the hours estimate.",
        ),
        click.option("--gpu", default="GPU", show_default=True, help="Name of that GPU, for the plan's text."),
        click.option("--samples", type=click.IntRange(min=1), default=None, help="Samples (genppl, precision)."),
        click.option("--sampling-steps", default=None, help="Sweep of T, comma-separated (genppl, precision)."),
        out_option("Root folder of the preset's runs.", default=Path("results/runs"), show_default=True),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _run_paper(preset, dry_run, checkpoints, nproc, tflops, gpu, samples, sampling_steps, out):
    from harness.cli.options import int_list
    from harness.logging import console
    from harness.reproduce.paper import describe, plan, run_plan

    mapping = {}
    for item in checkpoints:
        name, sep, src = item.partition("=")
        if not sep or not name or not src:
            raise click.BadParameter(
                f"{item!r}: use NAME=SRC, e.g. mdlm=mdlm-hf:kuleshov-group/mdlm-owt", param_hint="--checkpoint"
            )
        mapping[name] = src
    steps = plan(
        preset,
        checkpoints=mapping,
        out=str(out),
        samples=samples,
        steps=None if sampling_steps is None else int_list(sampling_steps),
    )
    click.echo(describe(preset, steps, nproc=nproc, tflops=tflops, gpu=gpu))
    if not dry_run:
        from harness.reproduce.report import write_preset_report

        run_plan(steps, nproc=nproc, log=console().log)
        path = write_preset_report(preset, Path(out) / f"paper-{preset}")
        click.echo(path.read_text())
        console().log(f"table (ours beside the published numbers) in {path}")


def _paper_command(preset: str, summary: str):
    @reproduce_group.command(preset, help=summary + " Paper scale, for GPUs; --dry-run prints the plan offline.")
    @_paper_options
    def command(dry_run, checkpoints, nproc, tflops, gpu, samples, sampling_steps, out):
        _run_paper(preset, dry_run, checkpoints, nproc, tflops, gpu, samples, sampling_steps, out)

    return command


for _name, _summary in (
    ("owt", "OpenWebText perplexity of ARM, MDLM, Prime ell = 2 and 4 (MDM-Prime Table 1)."),
    ("zeroshot", "Zero-shot perplexity on the seven MDLM-style sets (MDM-Prime Table 2)."),
    ("genppl", "Gen PPL with entropy under GPT-2 Large, float64, over steps."),
    ("cifar10-fid", "CIFAR-10 FID and IS from 50,000 samples (MDM-Prime Table 3)."),
):
    _paper_command(_name, _summary)


COMMANDS = [reproduce_group, quickstart_cmd]
