"""``primebench eval``: evaluations of checkpoints, each writing a result record."""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli.eval_fid import fid_cmd
from harness.cli.eval_genppl import genppl_cmd
from harness.cli.eval_zeroshot import zeroshot_cmd
from harness.cli.options import (
    carry_over_option,
    device_option,
    ema_option,
    json_option,
    option,
    out_option,
    seed_option,
    time_sampler_option,
)
from harness.cli.parsing import LazyChoice, estimator_choices, policy_choices


@click.group("eval")
def eval_group():
    """Evaluate checkpoints: perplexity and bounds (ppl), Gen PPL with entropy (genppl), zero-shot tasks
    (zeroshot), FID of image models (fid)."""


@eval_group.command("ppl")
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.option(
    "--data",
    default=None,
    help="CORPUS[:SPLIT], a zero-shot preset (ptb, wikitext2, ...), or PRESET@PATH "
    "[default: the checkpoint's validation split].",
)
@option("--seq-len", "[default: the model's].", type=click.IntRange(min=2), default=None)
@click.option(
    "--wrap/--no-wrap",
    default=None,
    help="MDLM wrapping into [BOS] chunk [EOS] rows, or one document per row [default: as trained].",
)
@click.option(
    "--eos-between-docs/--no-eos-between-docs",
    default=None,
    help="EOS after every document when wrapping [default: the preset's, else as trained].",
)
@click.option(
    "--remainder", type=click.Choice(["drop", "pad"]), default=None, help="Last partial row: drop (MDLM) or pad."
)
@option("--mc-samples", type=click.IntRange(min=1), default=1, show_default=True)
@option("--batch-size", type=click.IntRange(min=1), default=16, show_default=True)
@click.option(
    "--estimator",
    type=LazyChoice(estimator_choices),
    default="default",
    show_default=True,
    help="default: the family's first estimator; both: every estimator it offers, side by side; or one by "
    "name (`primebench models` lists them; Prime: subtoken = valid bound, token_joint = paper objective); "
    "duel: for the masked families, the exact likelihood of the sampler that reveals tokens in --policy's "
    "order (kind exact-policy, its own column).",
)
@click.option(
    "--policy",
    type=LazyChoice(policy_choices),
    default=None,
    help="DUEL's unmasking policy: left-to-right, confidence (largest max-probability), margin (largest "
    "top-two gap), entropy (smallest) [default: confidence]. oracle (ground-truth order) is refused: not a "
    "likelihood.",
)
@click.option(
    "--policy-tokens",
    type=click.IntRange(min=1),
    default=None,
    help="DUEL: tokens revealed per forward pass [default: 1].",
)
@click.option(
    "--policy-block",
    type=click.IntRange(min=1),
    default=None,
    help="DUEL: pick inside the leftmost unfinished block of this many tokens (semi-autoregressive) "
    "[default: the whole row; BD3-LM: its own blocks].",
)
@time_sampler_option()
@seed_option()
@option("--max-rows", type=click.IntRange(min=1), default=None)
@carry_over_option()
@ema_option()
@click.option(
    "--ignore-bos",
    is_flag=True,
    help="Give the first position of every row as context, never masked or scored (BD3-LMs' zero-shot "
    "protocol). Recorded.",
)
@option(
    "--references",
    "ppl: the cross-entropy of a smoothed unigram and bigram model fitted on the train split, on the same tokens.",
    default=True,
    show_default=True,
)
@device_option()
@out_option()
@json_option()
def ppl_cmd(checkpoint, out, as_json, **settings):
    """Perplexity of CHECKPOINT: exact for the ARM, a valid bound for the diffusion families (MDLM, masked,
    Prime, BD3-LM, UDLM, DUO), and Prime's paper objective, which is not one."""
    from harness.cli.emit import emit_record
    from harness.evaluation.ppl import run_ppl
    from harness.views import render_ppl

    emit_record(run_ppl(checkpoint, **settings), out=out, as_json=as_json, render=render_ppl)


eval_group.add_command(fid_cmd)
eval_group.add_command(genppl_cmd)
eval_group.add_command(zeroshot_cmd)

COMMANDS = [eval_group]
