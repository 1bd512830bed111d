"""``primebench audit precision CHECKPOINT``: the fp32-versus-fp64 sampling audit (logic in
:mod:`harness.audit.precision`, view in :mod:`harness.views.precision`)."""

from __future__ import annotations

import click

from harness.cli.options import (
    carry_over_option,
    command,
    device_option,
    draw_option,
    dtype_option,
    ema_option,
    json_option,
    method_option,
    option,
    out_option,
    seed_option,
)
from harness.cli.parsing import int_list_type


@command("precision", aliases={"--dtypes": "--dtype"})
@click.argument("checkpoint", type=click.Path(file_okay=False))
@option(
    "--steps",
    "Comma-separated; each is run.",
    default="64,256,1024,4096",
    show_default=True,
    type=int_list_type("64,256,1024,4096"),
)
@option("--samples", "Per run.", default=8, show_default=True, type=click.IntRange(min=1))
@dtype_option("float32,float64", many=True)
@method_option("mdlm-legacy")
@draw_option("joint")
@option("--sampler", "(the family's default when unset).")
@click.option(
    "--controls/--no-controls",
    default=True,
    show_default=True,
    help="Also run the token-by-token sampler (first-hitting / autoregressive) as a reference.",
)
@option("--batch-size", default=8, show_default=True, type=click.IntRange(min=1))
@seed_option("The same in each dtype.")
@option("--bits", is_flag=True)
@option("--judge", "Also report Gen PPL under it.", default=None)
@carry_over_option()
@ema_option()
@device_option()
@out_option("The JSON record and its plot (same name, .png) are written into it.")
@json_option()
def precision_cmd(checkpoint, steps, samples, dtypes, bits, out, as_json, **settings):
    """Same sampler, same seed, fp32 vs fp64: does the sample entropy depend on the draw's precision?"""
    from harness.audit.precision import audit_checkpoint, plot
    from harness.cli.emit import emit_record
    from harness.logging import console
    from harness.views import render_precision

    run = audit_checkpoint(
        checkpoint,
        steps=steps,
        num_samples=samples,
        dtypes=dtypes,
        entropy_base=2 if bits else "e",
        log=lambda message: console().log(message),
        **settings,
    )
    path = emit_record(run.record, out=out, as_json=as_json, render=render_precision, indent=None)
    if path is not None:
        console().log(f"plot written to {plot(run.audit, path.with_suffix('.png'))}")


COMMANDS = [precision_cmd]
