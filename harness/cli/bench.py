"""``primebench bench``: speed and memory on this machine (logic in :mod:`harness.bench`)."""

from __future__ import annotations

import click

from harness.cli.options import device_option, json_option, out_option

STAGES = ("gemm", "forward", "train_step", "nll_cost", "sampling", "precision_cost", "judge")
PRESETS = ("paper-shapes", "tiny-shapes")  # kept here so `primebench --help` imports no torch; tested


@click.command("bench")
@click.option(
    "--quick", is_flag=True, help="Fewer repeats and smaller sampling runs (about 5 minutes on a 2-core CPU)."
)
@click.option("--stages", default=",".join(STAGES), show_default=True, help="Comma-separated stages to run.")
@click.option(
    "--preset",
    type=click.Choice(PRESETS),
    default=None,
    help="Instead of the stages: every family at the papers' shape (paper-shapes: DiT-small, L = 1024, GPT-2's "
    "vocabulary, bf16 on CUDA; within 5 minutes on one H100), or its CPU form at tiny shapes (tiny-shapes).",
)
@click.option("--compile", "compile_", is_flag=True, help="With --preset: also time the forward under torch.compile.")
@device_option()
@out_option("bench.json (the record) and README.md (the table) are written into it.")
@json_option()
def bench_cmd(quick, stages, preset, compile_, device, out, as_json):
    """Measure speed and memory ratios, each beside its target (pass / short)."""
    import json
    from pathlib import Path

    from harness.bench import render_markdown, render_shapes_markdown, run_bench, run_shape_bench
    from harness.logging import console
    from harness.records import record_json

    log = lambda message: console().log(message)  # noqa: E731
    if preset is not None:
        record = run_shape_bench(preset, device=device, compile_=compile_, log=log)
        text = render_shapes_markdown(record)
    else:
        if compile_:
            raise click.BadParameter("--compile goes with --preset", param_hint="--compile")
        names = [s.strip() for s in stages.split(",") if s.strip()]
        unknown = [s for s in names if s not in STAGES]
        if unknown:
            raise click.BadParameter(
                f"unknown stage {unknown[0]!r}; stages: {', '.join(STAGES)}", param_hint="--stages"
            )
        record = run_bench(quick=quick, device=device, stages=names, log=log)
        text = render_markdown(record)
    if out is not None:
        from harness.io import FolderLock, atomic_write_text

        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        with FolderLock(folder):
            atomic_write_text(folder / "bench.json", record_json(record))
            atomic_write_text(folder / "README.md", text)
        console().log(f"written {folder / 'bench.json'} and {folder / 'README.md'}")
    click.echo(json.dumps(record, indent=2) if as_json else text)


COMMANDS = [bench_cmd]
