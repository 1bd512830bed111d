"""``primebench eval fid``: FID (and Inception Score) of an image checkpoint's samples (logic in
:mod:`harness.fid.evaluate`, view in :mod:`harness.views.fid`)."""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli.emit import emit_record
from harness.cli.options import (
    carry_over_option,
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


@click.command("fid")
@click.argument("checkpoint", type=click.Path(path_type=Path))
@option("--samples", type=click.IntRange(min=2), default=1000, show_default=True)
@click.option(
    "--reference",
    default=None,
    help="DATASET:SPLIT, e.g. digits:train, mnist5k:train, cifar10:PATH:train [default: the checkpoint's "
    "dataset, train split].",
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
@option(
    "--batch-size", "Images per sampling and feature batch.", type=click.IntRange(min=1), default=256, show_default=True
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
@option("--sampler")
@option("--steps", "[default: L].", type=click.IntRange(min=1), default=None)
@dtype_option("float64")
@method_option("gumbel")
@draw_option()
@carry_over_option()
@ema_option()
@seed_option()
@click.option(
    "--paper-protocol",
    is_flag=True,
    help="CIFAR-10: 50,000 samples vs the train split, Inception, torchmetrics (needs --reference cifar10:PATH).",
)
@device_option()
@out_option()
@json_option()
def fid_cmd(checkpoint, out, as_json, **settings):
    """FID of CHECKPOINT's samples against a reference set, in a named feature space (IS too for Inception)."""
    from harness.fid.evaluate import run_fid
    from harness.views import render_fid

    emit_record(run_fid(checkpoint, **settings), out=out, as_json=as_json, render=render_fid)
