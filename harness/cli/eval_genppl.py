"""``primebench eval genppl``: Gen PPL with entropy (registered on the ``eval`` group)."""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli.emit import emit_record
from harness.cli.eval import eval_group


@eval_group.command("genppl")
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.option("--sampler", default=None, help="ancestral, first-hitting, maskgit, autoregressive [default: the family's].")
@click.option("--steps", "-T", type=int, default=None, help="Sampling steps T (ancestral, maskgit) [default: L].")
@click.option("--samples", "-n", type=int, default=16, show_default=True)
@click.option("--dtype", type=click.Choice(["float32", "float64"]), default="float64", show_default=True, help="Precision of every categorical draw.")
@click.option("--method", type=click.Choice(["gumbel", "race", "mdlm-legacy"]), default="gumbel", show_default=True)
@click.option("--nucleus", "nucleus_p", type=float, default=1.0, show_default=True, help="Nucleus (top-p) mass.")
@click.option("--temperature", type=float, default=1.0, show_default=True)
@click.option("--seq-len", type=int, default=None, help="Generated length [default: the model's L].")
@click.option("--judge", default="smollm2", show_default=True, help="smollm2 (offline), an HF causal LM folder or name, or arm:CKPT.")
@click.option("--batch-size", type=int, default=8, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--bits", is_flag=True, help="Entropy in bits instead of nats.")
@click.option("--device", default="cpu", show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Write the record and the samples (JSONL) into this folder.")
@click.option("--json", "as_json", is_flag=True)
def genppl_cmd(checkpoint, sampler, steps, samples, dtype, method, nucleus_p, temperature, seq_len, judge, batch_size, seed, bits, device, out, as_json):
    """Sample from CHECKPOINT and report Gen PPL under a judge with unigram entropy, NFE and speed."""
    from harness.evaluation.genppl import run_genppl, write_samples
    from harness.logging import console
    from harness.views import render_genppl

    if samples < 1:
        raise click.BadParameter("must be >= 1", param_hint="--samples")
    if not 0.0 < nucleus_p <= 1.0:
        raise click.BadParameter("must be in (0, 1]", param_hint="--nucleus")
    if temperature <= 0:
        raise click.BadParameter("must be > 0", param_hint="--temperature")
    record, rows = run_genppl(
        checkpoint, sampler=sampler, steps=steps, samples=samples, dtype=dtype, method=method, nucleus_p=nucleus_p,
        temperature=temperature, seq_len=seq_len, judge=judge, batch_size=batch_size, seed=seed, bits=bits, device=device,
    )
    if out is not None:
        from harness.records import record_filename

        path = write_samples(rows, Path(out) / record_filename(record).replace(".json", ".samples.jsonl"))
        record["samples_file"] = str(path)  # outside the protocol: the record's file name hashes the protocol
        console().log(f"samples written to {path}")
    emit_record(record, out=out, as_json=as_json, render=render_genppl)
