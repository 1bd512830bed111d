"""``primebench eval genppl``: Gen PPL with entropy (registered on the ``eval`` group)."""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli.emit import emit_record
from harness.cli.options import device_option, draw_option, out_option


@click.command("genppl")
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.option(
    "--sampler", default=None, help="ancestral, first-hitting, maskgit, autoregressive [default: the family's]."
)
@click.option(
    "--steps",
    "-T",
    type=click.IntRange(min=1),
    default=None,
    help="Sampling steps T (ancestral, maskgit) [default: L].",
)
@click.option("--samples", "-n", type=click.IntRange(min=1), default=16, show_default=True)
@click.option(
    "--dtype",
    type=click.Choice(["float32", "float64"]),
    default="float64",
    show_default=True,
    help="Precision of every categorical draw.",
)
@click.option("--method", type=click.Choice(["gumbel", "race", "mdlm-legacy"]), default="gumbel", show_default=True)
@click.option("--nucleus", "nucleus_p", type=float, default=1.0, show_default=True, help="Nucleus (top-p) mass.")
@click.option(
    "--nucleus-rule",
    type=click.Choice(["cross", "below"]),
    default="cross",
    show_default=True,
    help="cross: keep the class that crosses p (HF, DUO); below: keep classes with cumulative mass <= p "
    "(BD3-LMs, MDM-Prime). Recorded.",
)
@draw_option()
@click.option(
    "--carry-over/--no-carry-over",
    default=None,
    help="Prime: evaluate with or without carry-over, overriding the checkpoint [default: as trained]. Recorded.",
)
@click.option(
    "--ema/--no-ema",
    default=True,
    show_default=True,
    help="Evaluate the EMA weights (as MDLM does) or the raw ones. Recorded.",
)
@click.option("--temperature", type=float, default=1.0, show_default=True)
@click.option("--seq-len", type=click.IntRange(min=2), default=None, help="Generated length [default: the model's L].")
@click.option(
    "--judge",
    default="smollm2",
    show_default=True,
    help="smollm2 (offline), an HF causal LM folder or name, or arm:CKPT.",
)
@click.option("--batch-size", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--bits", is_flag=True, help="Entropy in bits instead of nats.")
@device_option()
@out_option("Write the record and the samples (JSONL) into this folder.")
@click.option("--json", "as_json", is_flag=True)
def genppl_cmd(
    checkpoint,
    sampler,
    steps,
    samples,
    dtype,
    method,
    nucleus_p,
    nucleus_rule,
    draw,
    carry_over,
    ema,
    temperature,
    seq_len,
    judge,
    batch_size,
    seed,
    bits,
    device,
    out,
    as_json,
):
    """Sample from CHECKPOINT and report Gen PPL under a judge with unigram entropy, NFE and speed."""
    from harness.evaluation.genppl import run_genppl, samples_jsonl
    from harness.views import render_genppl

    if not 0.0 < nucleus_p <= 1.0:
        raise click.BadParameter("must be in (0, 1]", param_hint="--nucleus")
    if temperature <= 0:
        raise click.BadParameter("must be > 0", param_hint="--temperature")
    record, rows = run_genppl(
        checkpoint,
        sampler=sampler,
        steps=steps,
        samples=samples,
        dtype=dtype,
        method=method,
        nucleus_p=nucleus_p,
        nucleus_rule=nucleus_rule,
        temperature=temperature,
        seq_len=seq_len,
        judge=judge,
        batch_size=batch_size,
        seed=seed,
        bits=bits,
        device=device,
        carry_over=carry_over,
        ema=ema,
        draw=draw,
    )
    # the samples file takes the record's name (record~1.json <-> record~1.samples.jsonl)
    emit_record(
        record,
        out=out,
        as_json=as_json,
        render=render_genppl,
        attachments={"samples_file": (".samples.jsonl", samples_jsonl(rows))},
    )
