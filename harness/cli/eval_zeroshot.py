"""``primebench eval zeroshot``: zero-shot tasks through lm-evaluation-harness (registered on ``eval``)."""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli.options import (
    carry_over_option,
    command,
    device_option,
    draw_option,
    ema_option,
    json_option,
    option,
    out_option,
    seed_option,
    time_sampler_option,
)


@command("zeroshot", aliases={"--limit": "--max-rows"})
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.option(
    "--tasks",
    default="wiki_rolling,wiki_lastword",
    show_default=True,
    help="Comma-separated: the local tasks wiki_rolling, wiki_lastword, or lm-eval task names (those need the "
    "network).",
)
@option("--mc-samples", "Per request.", type=click.IntRange(min=1), default=32, show_default=True)
@option("--batch-size", type=click.IntRange(min=1), default=16, show_default=True)
@option("--max-rows", "Per task.", type=click.IntRange(min=1), default=None)
@time_sampler_option()
@option("--sampler", "For generation tasks.")
@option("--steps", "For generation tasks [default: max_gen_toks].", type=click.IntRange(min=1), default=None)
@draw_option()
@click.option(
    "--bootstrap-iters",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="lm-eval bootstrap iterations for standard errors (0: none).",
)
@seed_option()
@carry_over_option()
@ema_option()
@device_option()
@out_option()
@json_option()
def zeroshot_cmd(checkpoint, max_rows, out, as_json, **settings):
    """Zero-shot tasks through lm-eval: exact for the ARM, bounds (perplexities) and estimates (accuracies)
    otherwise."""
    from harness.cli.emit import emit_record
    from harness.lmeval import run_zeroshot
    from harness.views import render_zeroshot

    record = run_zeroshot(checkpoint, max_rows=max_rows, **settings)
    emit_record(record, out=out, as_json=as_json, render=render_zeroshot)
