"""``primebench audit precision CHECKPOINT``: the fp32-versus-fp64 sampling audit (logic in
:mod:`harness.audit.precision`, view in :mod:`harness.views.precision`)."""

from __future__ import annotations

import click

from harness.cli.options import device_option, draw_option, int_list, out_option


@click.command("precision")
@click.argument("checkpoint", type=click.Path(file_okay=False))
@click.option("--steps", default="64,256,1024,4096", show_default=True, help="Sampling steps T, comma-separated.")
@click.option("--samples", default=8, show_default=True, type=click.IntRange(min=1), help="Samples per run.")
@click.option("--dtypes", default="float32,float64", show_default=True, help="Categorical-draw dtypes to compare.")
@click.option(
    "--method",
    default="mdlm-legacy",
    show_default=True,
    type=click.Choice(["mdlm-legacy", "gumbel", "race"]),
    help="Categorical sampling method.",
)
@draw_option("joint")
@click.option("--sampler", default=None, help="Sampler to audit (default: the family's; ancestral for diffusion).")
@click.option(
    "--controls/--no-controls",
    default=True,
    show_default=True,
    help="Also run the token-by-token sampler (first-hitting / autoregressive) as a reference.",
)
@click.option("--batch-size", default=8, show_default=True, type=click.IntRange(min=1))
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of every run (same in each dtype).")
@click.option("--bits", is_flag=True, help="Entropy in bits instead of nats.")
@click.option(
    "--judge", default=None, help="Also report Gen PPL under this judge (smollm2, an HF causal LM folder, arm:CKPT)."
)
@click.option(
    "--carry-over/--no-carry-over",
    default=None,
    help="Prime: sample with or without carry-over, overriding the checkpoint [default: as trained]. Recorded.",
)
@click.option(
    "--ema/--no-ema", default=True, show_default=True, help="Sample from the EMA weights or the raw ones. Recorded."
)
@device_option(help="torch device for the model and the draws.")
@out_option("Write the JSON record and its plot (same name, .png) into this folder.", dest="out_dir")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON record instead of the table.")
def precision_cmd(
    checkpoint,
    steps,
    samples,
    dtypes,
    method,
    draw,
    sampler,
    controls,
    batch_size,
    seed,
    bits,
    judge,
    carry_over,
    ema,
    device,
    out_dir,
    as_json,
):
    """Same sampler, same seed, fp32 vs fp64: does the sample entropy depend on the draw's precision?"""
    from harness.audit.precision import audit_checkpoint, plot
    from harness.cli.emit import emit_record
    from harness.logging import console
    from harness.views import render_precision

    run = audit_checkpoint(
        checkpoint,
        steps=int_list(steps),
        num_samples=samples,
        dtypes=[d.strip() for d in dtypes.split(",") if d.strip()],
        method=method,
        sampler=sampler,
        controls=controls,
        batch_size=batch_size,
        seed=seed,
        entropy_base=2 if bits else "e",
        judge=judge,
        device=device,
        log=lambda message: console().log(message),
        carry_over=carry_over,
        ema=ema,
        draw=draw,
    )
    path = emit_record(run.record, out=out_dir, as_json=as_json, render=render_precision, indent=None)
    if path is not None:
        console().log(f"plot written to {plot(run.audit, path.with_suffix('.png'))}")


COMMANDS = [precision_cmd]
