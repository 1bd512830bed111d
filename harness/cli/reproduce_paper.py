"""``primebench reproduce precision`` and the paper-scale presets ``reproduce owt|zeroshot|genppl|
cifar10-fid`` (plans and jobs in :mod:`harness.reproduce.precision` and :mod:`harness.reproduce.paper`)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from harness.cli.options import Command, option, out_option
from harness.cli.parsing import FiniteFloat, PerNameInts, int_list_type

# --steps was the training steps of `reproduce precision`; it is now the sampling steps everywhere, so the
# old meaning cannot be an alias: docs/cli.md lists the change
STEPS_ALIASES = {"--sampling-steps": "--steps"}
PRECISION_ALIASES = {**STEPS_ALIASES, "--paper": "--paper-scale"}


def _precision_models() -> tuple[str, ...]:
    from harness.reproduce.precision import MODELS

    return tuple(MODELS)


def _paper_options(fn):
    options = [
        option("--dry-run", is_flag=True),
        option("--checkpoint", multiple=True, metavar="NAME=SRC"),
        option("--nproc", type=click.IntRange(min=1), default=1, show_default=True),
        option("--tflops", type=FiniteFloat(min=0, min_open=True), default=None),
        option("--gpu", default="GPU", show_default=True),
    ]
    for decorator in reversed(options):
        fn = decorator(fn)
    return fn


@click.command("precision", cls=Command, aliases=PRECISION_ALIASES)
@out_option(
    "Checkpoints, records, tables.md and precision.png go into it.",
    default=Path("results/runs/precision"),
    show_default=True,
)
@option("--force", is_flag=True)
@option("--train-steps", "Of both models.", type=click.IntRange(min=1), default=None)
@option("--steps", "The sweep, comma-separated [default: 16,64,256].", type=int_list_type("16,64,256"))
@option(
    "--samples",
    "Per run: N for both models, or per model (mdlm=48,prime=8; a model not named keeps its default) "
    "[default: mdlm=48,prime=8]. With --paper-scale: one number.",
    default=None,
    metavar="N|MODEL=N,...",
    type=PerNameInts(lambda: _precision_models(), "mdlm=48,prime=8"),
)
@click.option(
    "--paper-scale",
    "paper",
    is_flag=True,
    help="The paper-scale preset instead: an imported MDLM-OWT checkpoint, L = 1024, T = 100 to 10,000, float32 "
    "vs float64 (with --dry-run, --checkpoint mdlm=SRC, --nproc, --tflops).",
)
@_paper_options
def reproduce_precision_cmd(out, force, train_steps, steps, samples, paper, dry_run, checkpoints, nproc, tflops, gpu):
    """The fp32 temperature effect at GPT-2's vocabulary: small MDLM and Prime, joint draw in float32 vs
    float64 over steps, the two-stage draw as control, and the entropy predicted by the draw's exact law."""
    from harness.logging import console
    from harness.reproduce.precision import MODELS, run_precision
    from harness.reproduce.report import precision_sections, print_sections

    if paper:
        if isinstance(samples, dict):
            raise click.BadParameter(
                f"{samples!r}: with --paper-scale give one number of samples, an integer >= 1", param_hint="--samples"
            )
        root = Path("results/runs") if out == Path("results/runs/precision") else out
        run_paper("precision", dry_run, checkpoints, nproc, tflops, gpu, samples, steps, root)
        return
    if dry_run or checkpoints:
        raise click.UsageError(
            "--dry-run and --checkpoint go with --paper-scale (the machine-scale job trains its own models)"
        )
    per_model = dict.fromkeys(MODELS, samples) if isinstance(samples, int) else samples
    t0 = time.time()
    result = run_precision(out, force=force, steps=train_steps, samples=per_model, audit_steps=steps)
    print_sections(precision_sections(result))
    console().log(
        f"reproduce precision finished in {(time.time() - t0) / 60:.1f} min; tables in "
        f"{result.out / 'tables.md'}, plot {result.out / 'precision.png'}"
    )


def run_paper(preset, dry_run, checkpoints, nproc, tflops, gpu, samples, steps, out):
    """Plan the paper-scale ``preset``, print it, and (unless ``dry_run``) run it and write its table."""
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
    planned = plan(preset, checkpoints=mapping, out=str(out), samples=samples, steps=steps)
    click.echo(describe(preset, planned, nproc=nproc, tflops=tflops, gpu=gpu))
    if dry_run:
        click.echo(cache_report(preset, mapping))
    if not dry_run:
        from harness.reproduce.report import write_preset_report

        run_plan(planned, nproc=nproc, log=console().log)
        path = write_preset_report(preset, Path(out) / f"paper-{preset}")
        click.echo(path.read_text())
        console().log(f"table (ours beside the published numbers) in {path}")


def cache_report(preset: str, mapping: dict[str, str]) -> str:
    """What the preset reads from the hub, and which of it the caches hold (checked without the network)."""
    from harness.prefetch import missing
    from harness.reproduce.paper import prefetch_targets

    targets = prefetch_targets(preset, mapping)
    if not targets:
        return "cache: the preset reads nothing from the hub (its inputs are local files)"
    lines = ["cache (checked offline; `primebench prefetch " + preset + "` fetches what is missing):"]
    for target in targets:
        why = missing(target)
        lines.append(f"  {target}: " + ("cached" if why is None else f"MISSING ({why})"))
    return "\n".join(lines)


def _paper_command(preset: str, summary: str, sampling: bool = False):
    """The ``reproduce PRESET`` command; ``sampling``: the preset samples, so it takes ``--samples`` and the
    ``--steps`` sweep (the others have nothing these would change, so they do not take them)."""

    def paper_cmd(dry_run, checkpoints, nproc, tflops, gpu, out, samples=None, steps=None):
        run_paper(preset, dry_run, checkpoints, nproc, tflops, gpu, samples, steps, out)

    paper_cmd = out_option("The root of the preset's runs.", default=Path("results/runs"), show_default=True)(paper_cmd)
    if sampling:
        paper_cmd = option("--steps", "The sweep, comma-separated.", type=int_list_type("128,256"))(paper_cmd)
        paper_cmd = option("--samples", "Per model and T.", type=click.IntRange(min=1), default=None)(paper_cmd)
    paper_cmd = _paper_options(paper_cmd)
    help_text = summary + " Paper scale, for GPUs; --dry-run prints the plan."
    return click.command(preset, cls=Command, aliases=STEPS_ALIASES if sampling else None, help=help_text)(paper_cmd)


PAPER_COMMANDS = [
    _paper_command(name, summary, sampling)
    for name, summary, sampling in (
        ("owt", "OpenWebText perplexity of ARM, MDLM, BD3-LM, Prime ell = 2 and 4 (MDM-Prime Table 1).", False),
        ("zeroshot", "Zero-shot perplexity on the seven MDLM-style sets (MDM-Prime Table 2).", False),
        ("genppl", "Gen PPL with entropy under GPT-2 Large, float64, over steps.", True),
        ("cifar10-fid", "CIFAR-10 FID and IS from 50,000 samples (MDM-Prime Table 3).", False),
    )
]
