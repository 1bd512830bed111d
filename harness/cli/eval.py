"""``primebench eval``: evaluations of checkpoints, each writing a result record."""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli.eval_fid import fid_cmd
from harness.cli.eval_genppl import genppl_cmd
from harness.cli.options import LazyChoice, device_option, draw_option, estimator_choices, out_option


@click.group("eval")
def eval_group():
    """Evaluate checkpoints: perplexity and bounds (ppl), Gen PPL with entropy (genppl), zero-shot tasks (zeroshot)."""


@eval_group.command("ppl")
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.option(
    "--data",
    default=None,
    help="CORPUS[:SPLIT], a zero-shot preset (ptb, wikitext2, ...), or PRESET@PATH. [default: the checkpoint's validation split]",
)
@click.option("--seq-len", type=click.IntRange(min=2), default=None, help="Row length L [default: the model's].")
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
@click.option(
    "--mc-samples",
    "-K",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Monte-Carlo corruptions per sequence (diffusion families).",
)
@click.option("--batch-size", type=click.IntRange(min=1), default=16, show_default=True)
@click.option(
    "--estimator",
    type=LazyChoice(estimator_choices),
    default="default",
    show_default=True,
    help="default: the family's first estimator; both: every estimator it offers, side by side; or one by name (`primebench models` lists them; Prime: subtoken = valid bound, token_joint = paper objective).",
)
@click.option(
    "--time-sampler",
    type=click.Choice(["t", "n"]),
    default=None,
    help="t: MDLM time draw; n: exact mask count [default: the family's].",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--max-rows", type=click.IntRange(min=1), default=None, help="Score only the first N rows (recorded).")
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
@click.option(
    "--ignore-bos",
    is_flag=True,
    help="Give the first position of every row as context, never masked or scored (BD3-LMs' zero-shot protocol). Recorded.",
)
@click.option(
    "--references/--no-references",
    default=True,
    show_default=True,
    help="Score the unigram and bigram references (fitted on the train split) on the same tokens, into the record's references.",
)
@device_option()
@out_option()
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON.")
def ppl_cmd(
    checkpoint,
    data,
    seq_len,
    wrap,
    eos_between_docs,
    remainder,
    mc_samples,
    batch_size,
    estimator,
    time_sampler,
    seed,
    max_rows,
    carry_over,
    ema,
    ignore_bos,
    references,
    device,
    out,
    as_json,
):
    """Perplexity of CHECKPOINT: exact for the ARM, a bound for MDLM/masked/Prime (and Prime's paper objective)."""
    from harness.cli.emit import emit_record
    from harness.evaluation.ppl import run_ppl
    from harness.views import render_ppl

    if mc_samples < 1:
        raise click.BadParameter("must be >= 1", param_hint="--mc-samples")
    if batch_size < 1:
        raise click.BadParameter("must be >= 1", param_hint="--batch-size")
    record = run_ppl(
        checkpoint,
        data=data,
        seq_len=seq_len,
        wrap=wrap,
        eos_between_docs=eos_between_docs,
        remainder=remainder,
        mc_samples=mc_samples,
        batch_size=batch_size,
        estimator=estimator,
        time_sampler=time_sampler,
        seed=seed,
        max_rows=max_rows,
        device=device,
        ignore_bos=ignore_bos,
        carry_over=carry_over,
        ema=ema,
        references=references,
    )
    emit_record(record, out=out, as_json=as_json, render=render_ppl)


@eval_group.command("zeroshot")
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.option(
    "--tasks",
    default="wiki_rolling,wiki_lastword",
    show_default=True,
    help="Comma-separated: the local tasks wiki_rolling, wiki_lastword, or lm-eval task names (those need the network).",
)
@click.option(
    "--mc-samples",
    "-K",
    type=click.IntRange(min=1),
    default=32,
    show_default=True,
    help="Monte-Carlo corruptions per request (diffusion families; the ARM is exact).",
)
@click.option("--batch-size", type=click.IntRange(min=1), default=16, show_default=True, help="Rows per forward pass.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    help="Score only the first N documents of each task (recorded).",
)
@click.option(
    "--time-sampler",
    type=click.Choice(["t", "n"]),
    default=None,
    help="n: exact mask count, weight N/n; t: MDLM time draw [default: n, t for time-conditioned networks].",
)
@click.option("--sampler", default=None, help="Sampler for generation tasks [default: the family's].")
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    default=None,
    help="Sampler steps for generation tasks [default: max_gen_toks].",
)
@draw_option()
@click.option(
    "--bootstrap-iters",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="lm-eval bootstrap iterations for standard errors (0: none).",
)
@click.option("--seed", type=int, default=0, show_default=True)
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
@device_option()
@out_option()
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON.")
def zeroshot_cmd(
    checkpoint,
    tasks,
    mc_samples,
    batch_size,
    limit,
    time_sampler,
    sampler,
    steps,
    draw,
    bootstrap_iters,
    seed,
    carry_over,
    ema,
    device,
    out,
    as_json,
):
    """Zero-shot tasks through lm-eval: exact for the ARM, bounds (perplexities) and estimates (accuracies) otherwise."""
    from harness.cli.emit import emit_record
    from harness.lmeval import run_zeroshot
    from harness.views import render_zeroshot

    for name, value in (("--mc-samples", mc_samples), ("--batch-size", batch_size)):
        if value < 1:
            raise click.BadParameter("must be >= 1", param_hint=name)
    record = run_zeroshot(
        checkpoint,
        tasks=tasks,
        mc_samples=mc_samples,
        batch_size=batch_size,
        limit=limit,
        seed=seed,
        time_sampler=time_sampler,
        sampler=sampler,
        steps=steps,
        bootstrap_iters=bootstrap_iters,
        device=device,
        carry_over=carry_over,
        ema=ema,
        draw=draw,
    )
    emit_record(record, out=out, as_json=as_json, render=render_zeroshot)


eval_group.add_command(fid_cmd)
eval_group.add_command(genppl_cmd)

COMMANDS = [eval_group]
