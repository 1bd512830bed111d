"""``primebench bench``: speed and memory on this machine (logic in :mod:`harness.bench`)."""

from __future__ import annotations

import click

from harness.cli.options import device_option, json_option, out_option

STAGES = ("gemm", "forward", "train_step", "nll_cost", "sampling", "precision_cost", "judge")


@click.command("bench")
@click.option(
    "--quick", is_flag=True, help="Fewer repeats and smaller sampling runs (about 5 minutes on a 2-core CPU)."
)
@click.option("--stages", default=",".join(STAGES), show_default=True, help="Comma-separated stages to run.")
@device_option()
@out_option("bench.json (the record) and README.md (the table) are written into it.")
@json_option()
def bench_cmd(quick, stages, device, out, as_json):
    """Measure speed and memory ratios, each beside its target (pass / short)."""
    import json
    from pathlib import Path

    from harness.bench import render_markdown, run_bench
    from harness.logging import console
    from harness.records import record_json

    names = [s.strip() for s in stages.split(",") if s.strip()]
    unknown = [s for s in names if s not in STAGES]
    if unknown:
        raise click.BadParameter(f"unknown stage {unknown[0]!r}; stages: {', '.join(STAGES)}", param_hint="--stages")
    record = run_bench(quick=quick, device=device, stages=names, log=lambda message: console().log(message))
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
