"""``primebench audit gumbel``: what a finite-precision Gumbel-max draw samples, closed forms next to
real draws (logic in :mod:`harness.audit.gumbel_audit`, view in :mod:`harness.views.gumbel`)."""

from __future__ import annotations

import math

import click

from harness.audit.gumbel_audit import DEFAULT_DRAWS, GPT2_VOCAB, MDLM_ELEMENT_BUDGET
from harness.cli.options import command, dtype_option, json_option, method_option, option, out_option, seed_option


def _parse_probs(ctx, param, value: str | None) -> list[float] | None:
    if value is None:
        return None
    try:
        probs = [float(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of numbers (e.g. 0.1,0.2,0.3,0.4)") from None
    if len(probs) < 2:
        raise click.BadParameter(f"{value!r}: give at least two class probabilities, e.g. 0.1,0.9")
    if any(not math.isfinite(v) or v < 0 for v in probs):
        raise click.BadParameter(f"{value!r}: probabilities must be finite and >= 0")
    if sum(probs) <= 0:
        raise click.BadParameter(f"{value!r}: at least one probability must be positive")
    return probs


@command("gumbel", aliases={"--methods": "--method", "--draws": "--samples"})
@click.option(
    "--probs",
    default=None,
    callback=_parse_probs,
    metavar="P1,P2,...",
    help="Class probabilities to audit (>= 0; normalised).",
)
@click.option(
    "--mdlm-step",
    type=click.IntRange(min=1),
    default=None,
    metavar="K",
    help="Audit MDLM's ancestral step K of T instead (peaked and flat token distributions).",
)
@option("--steps", "T for --mdlm-step. [default: 1024]", type=click.IntRange(min=1), default=None)
@click.option(
    "--vocab",
    type=click.IntRange(min=2, max=10_000_000),
    default=None,
    help=f"Vocabulary size V for --mdlm-step. [default: {GPT2_VOCAB}, GPT-2]",
)
@dtype_option("float32,float64", many=True, detail="Precisions of the uniforms.")
@method_option("gumbel,race,mdlm-legacy", many=True)
@option(
    "--samples",
    f"Draws per method and dtype. [default: {DEFAULT_DRAWS:,}; with --mdlm-step at most "
    f"{MDLM_ELEMENT_BUDGET:,} / (V + 1), i.e. 333 at V = 50257]",
    type=click.IntRange(min=1),
    default=None,
)
@seed_option("Of the draws (and of the Zipf ranks).")
@out_option()
@json_option()
def gumbel_cmd(probs, mdlm_step, steps, vocab, dtypes, methods, samples, seed, out, as_json):
    """What a float32/float64 Gumbel-max draw really samples: intended vs Zheng et al.'s Prop. 5.2 vs the
    torch.rand grid model vs empirical frequencies, with KL and entropy (nats)."""
    from harness.audit.gumbel_audit import gumbel_audit
    from harness.cli.emit import emit_record
    from harness.logging import console
    from harness.views import render_gumbel

    if (probs is None) == (mdlm_step is None):
        raise click.UsageError("give exactly one of --probs P1,P2,... or --mdlm-step K (with --steps T --vocab V)")
    if probs is not None and (steps is not None or vocab is not None):
        raise click.UsageError("--steps and --vocab apply only with --mdlm-step")
    steps = 1024 if steps is None else steps
    vocab = GPT2_VOCAB if vocab is None else vocab
    if mdlm_step is not None and mdlm_step > steps:
        raise click.BadParameter(f"step {mdlm_step} is past the last step T = {steps}", param_hint="--mdlm-step")
    audit = gumbel_audit(
        probs=probs,
        mdlm_step=mdlm_step,
        steps=steps,
        vocab=vocab,
        dtypes=dtypes,
        methods=methods,
        draws=samples,
        seed=seed,
        log=lambda message: console().log(message),
    )
    emit_record(audit.to_record(), out=out, as_json=as_json, render=render_gumbel)


COMMANDS = [gumbel_cmd]
