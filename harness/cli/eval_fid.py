"""``primebench eval fid``: FID (and Inception Score) of an image checkpoint's samples (logic in
:mod:`harness.fid.evaluate`, view in :mod:`harness.views.fid`)."""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli.emit import emit_record
from harness.cli.options import device_option, draw_option, out_option


@click.command("fid")
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.option("--samples", "-n", type=click.IntRange(min=1), default=1000, show_default=True)
@click.option(
    "--reference",
    default=None,
    help="DATASET:SPLIT, e.g. digits:train, mnist5k:train, cifar10:PATH:train [default: the checkpoint's dataset, train split].",
)
@click.option(
    "--features",
    default=None,
    help="inception, digits-classifier or mnist-classifier [default: by the reference dataset].",
)
@click.option(
    "--backend",
    type=click.Choice(["torch-fidelity", "torchmetrics", "frechet"]),
    default="torch-fidelity",
    show_default=True,
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=256,
    show_default=True,
    help="Images per sampling and feature batch.",
)
@click.option(
    "--inception-weights",
    type=click.Path(path_type=Path),
    default=None,
    help="weights-inception-2015-12-05-6726825d.pth [default: the torch hub cache].",
)
@click.option(
    "--classifier-seed", type=int, default=0, show_default=True, help="Training seed of the digit classifier features."
)
@click.option("--sampler", default=None, help="Sampler [default: the family's].")
@click.option("--steps", "-T", type=click.IntRange(min=1), default=None, help="Sampling steps [default: L].")
@click.option("--dtype", type=click.Choice(["float32", "float64"]), default="float64", show_default=True)
@click.option("--method", type=click.Choice(["gumbel", "race", "mdlm-legacy"]), default="gumbel", show_default=True)
@draw_option()
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--paper-protocol",
    is_flag=True,
    help="CIFAR-10: 50,000 samples vs the train split, Inception, torchmetrics (needs --reference cifar10:PATH).",
)
@device_option()
@out_option()
@click.option("--json", "as_json", is_flag=True)
def fid_cmd(
    checkpoint,
    samples,
    reference,
    features,
    backend,
    batch_size,
    inception_weights,
    classifier_seed,
    sampler,
    steps,
    dtype,
    method,
    draw,
    seed,
    paper_protocol,
    device,
    out,
    as_json,
):
    """FID of CHECKPOINT's samples against a reference set, in a named feature space (IS too for Inception)."""
    from harness.fid.evaluate import run_fid
    from harness.views import render_fid

    for name, value in (("--samples", samples), ("--batch-size", batch_size)):
        if value < (2 if name == "--samples" else 1):
            raise click.BadParameter("too small", param_hint=name)
    record = run_fid(
        checkpoint,
        reference=reference,
        features=features,
        backend=backend,
        samples=samples,
        batch_size=batch_size,
        sampler=sampler,
        steps=steps,
        dtype=dtype,
        method=method,
        seed=seed,
        inception_weights=inception_weights,
        classifier_seed=classifier_seed,
        device=device,
        paper_protocol=paper_protocol,
        draw=draw,
    )
    emit_record(record, out=out, as_json=as_json, render=render_fid)
