"""``primebench audit bound [CHECKPOINT]``: exact NLL, sub-token bound and the paper objective side by
side (logic in :mod:`harness.audit.bound`, view in :mod:`harness.views.bound`)."""

from __future__ import annotations

import click

from harness.cli.options import (
    carry_over_option,
    device_option,
    ema_option,
    json_option,
    option,
    out_option,
    seed_option,
)
from harness.cli.parsing import Command


def _parse_toy(ctx, param, value: str | None) -> tuple[int, int | str, int] | None:
    """Click callback: "C,ELL,L" -> (C, ell, L), ELL an integer or ``binary``; None stays None
    (default 6,2,2 without CHECKPOINT)."""
    if value is None:
        return None
    parts = value.split(",")
    try:
        if len(parts) != 3:
            raise ValueError
        C, L = int(parts[0]), int(parts[2])
        ell: int | str = "binary" if parts[1].strip() == "binary" else int(parts[1])
    except ValueError:
        raise click.BadParameter(
            f"{value!r}: expected C,ELL,L (integers, ELL may be 'binary'; e.g. 6,2,2 or 16,binary,1)"
        ) from None
    if C < 2 or (ell != "binary" and ell < 1) or L < 1:
        raise click.BadParameter(f"{value!r}: expected C,ELL,L with C >= 2, ELL >= 1, L >= 1 (e.g. 6,2,2)")
    return C, ell, L


@click.command("bound", cls=Command)
@click.argument("checkpoint", required=False)
@click.option(
    "--toy",
    default=None,
    metavar="C,ELL,L",
    callback=_parse_toy,
    help="Shape of the random toy denoisers (without CHECKPOINT); ELL 'binary' is ceil(log2 C) digits of base 2 "
    "(MDM-Prime-v2). [default: 6,2,2]",
)
@click.option(
    "--shuffle-seed",
    help="Toys: relabel the ideal rows' classes by this seed's permutation before encoding (index shuffling). "
    "--unigram: the seed of its shuffled rows.",
    type=click.IntRange(min=0),
    default=None,
)
@click.option(
    "--unigram",
    help="Instead of toys: the ideal one-token model of --corpus's train unigram under this tokenizer (e.g. bpe:1000), "
    "at ell = 1, 2, 4 and binary, without and with index shuffling (seed --shuffle-seed, default 0).",
    default=None,
    metavar="TOKENIZER",
)
@click.option("--corpus", help="The corpus of --unigram.", default="wiki-embedded", show_default=True)
@option("--seeds", "Random toy models (without CHECKPOINT).", default=3, show_default=True, type=click.IntRange(min=0))
@seed_option("First toy seed / Monte-Carlo seed.")
@option(
    "--mc-samples",
    "With CHECKPOINT; >= 2 for a standard error.",
    default=4,
    show_default=True,
    type=click.IntRange(min=2),
)
@option("--max-rows", "Validation rows, with CHECKPOINT.", default=32, show_default=True, type=click.IntRange(min=1))
@click.option("--batches", type=click.IntRange(min=1), default=None, hidden=True)
@option("--batch-size", default=8, show_default=True, type=click.IntRange(min=1))
@carry_over_option()
@ema_option()
@device_option(detail="For a checkpoint's model.")
@out_option()
@json_option()
def bound_cmd(
    checkpoint,
    toy,
    shuffle_seed,
    unigram,
    corpus,
    seeds,
    seed,
    mc_samples,
    max_rows,
    batches,
    batch_size,
    carry_over,
    ema,
    device,
    out,
    as_json,
):
    """Exact NLL vs the sub-token bound vs the paper's token-joint objective (nats/token).

    Without CHECKPOINT: exact enumeration on the reference worked example and random toy models, or
    (--unigram) on the ideal model of a real corpus's unigram law at ell = 1, 2, 4 and binary.
    With CHECKPOINT (a folder of ours, or a release by prefix: {release_prefixes}): Monte Carlo on
    the first --max-rows rows of its validation split (Prime: both numbers; the other diffusion
    families: their bound; an ARM: the exact NLL).
    """
    from harness.audit.bound import audit_checkpoint, toy_audit, unigram_audit
    from harness.cli.emit import emit_record
    from harness.logging import console
    from harness.views import render_bound

    if batches is not None:  # the old spelling counted batches, not rows
        click.echo("warning: --batches is deprecated; use --max-rows N (rows = batches x batch size)", err=True)
        max_rows = batches * batch_size
    if unigram is not None and (checkpoint is not None or toy is not None):
        raise click.UsageError("--unigram scores the ideal model of a corpus: give it without CHECKPOINT and --toy")
    if unigram is not None:
        audit = unigram_audit(unigram, corpus=corpus, shuffle_seed=0 if shuffle_seed is None else shuffle_seed)
    elif checkpoint is None:
        C, ell, L = toy or (6, 2, 2)
        audit = toy_audit(C, ell, L, seeds=seeds, seed=seed, shuffle_seed=shuffle_seed)
    elif toy is not None or shuffle_seed is not None:
        raise click.UsageError(
            "--toy and --shuffle-seed apply only without CHECKPOINT (a checkpoint's shuffle is stored with it)"
        )
    else:
        audit = audit_checkpoint(
            checkpoint,
            mc_samples=mc_samples,
            max_rows=max_rows,
            batch_size=batch_size,
            seed=seed,
            device=device,
            carry_over=carry_over,
            ema=ema,
            log=lambda message: console().log(message),
        )
    emit_record(audit.to_record(), out=out, as_json=as_json, render=lambda _: render_bound(audit), indent=None)


COMMANDS = [bound_cmd]
