"""``primebench eval genppl``: Gen PPL with entropy (registered on the ``eval`` group)."""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli.emit import emit_record
from harness.cli.options import (
    carry_over_option,
    command,
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
from harness.cli.parsing import FiniteFloat


@command("genppl", aliases={"--nucleus": "--nucleus-p"})
@click.argument("checkpoint", type=click.Path(path_type=Path))
@option("--sampler")
@option("--steps", "(ancestral, maskgit, remdm, posterior) [default: L].", type=click.IntRange(min=1), default=None)
@option("--samples", type=click.IntRange(min=1), default=16, show_default=True)
@dtype_option("float64", detail="Every categorical draw is made in it.")
@method_option("gumbel")
@click.option(
    "--nucleus-p",
    "nucleus_p",
    type=FiniteFloat(0.0, 1.0, min_open=True),
    default=1.0,
    show_default=True,
    help="Nucleus (top-p) mass, in (0, 1].",
)
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
    "--remask-schedule",
    type=click.Choice(["cap", "rescale", "conf", "loop"]),
    default=None,
    help="--sampler remdm: ReMDM's schedule of the remasking probability sigma [default: cap]. Recorded.",
)
@click.option(
    "--remask-eta",
    type=FiniteFloat(0.0, 1.0),
    default=None,
    help="--sampler remdm: eta of cap, rescale and loop [default: ReMDM's scripts: 0.008, 0.015, 0.02].",
)
@click.option("--remask-t-on", type=FiniteFloat(0.0, 1.0), default=None, help="remdm loop: t_on [default: 0.55].")
@click.option("--remask-t-off", type=FiniteFloat(0.0, 1.0), default=None, help="remdm loop: t_off [default: 0.05].")
@click.option(
    "--remask-alpha-on", type=FiniteFloat(0.0, 1.0), default=None, help="remdm loop: alpha_on [default: 0.9]."
)
@click.option(
    "--correction-steps",
    type=click.IntRange(1),
    default=None,
    help="--sampler self-correction: most correction steps after the posterior sampler [default: GIDD's 128].",
)
@click.option(
    "--correction-temperature",
    type=FiniteFloat(1e-3, 1e3),
    default=None,
    help="self-correction: temperature of the proposals [default: 0.1].",
)
@click.option(
    "--correction-t0",
    type=FiniteFloat(0.0, 1.0),
    default=None,
    help="self-correction: the time the denoiser is called at [default: 0.01].",
)
@click.option(
    "--correction-patience",
    type=click.IntRange(0),
    default=None,
    help="self-correction: steps without a better agreement before a row stops [default: 32].",
)
@click.option(
    "--correction-tokens-per-step",
    type=click.IntRange(1),
    default=None,
    help="self-correction: tokens replaced per step [default: 1].",
)
@carry_over_option()
@ema_option()
@click.option(
    "--temperature",
    type=FiniteFloat(1e-3, 1e3),
    default=1.0,
    show_default=True,
    help="Softmax temperature, in [0.001, 1000].",
)
@option("--seq-len", "Generated length [default: the model's L].", type=click.IntRange(min=2), default=None)
@option("--judge", default="smollm2", show_default=True)
@option("--batch-size", type=click.IntRange(min=1), default=8, show_default=True)
@seed_option()
@option("--bits", is_flag=True)
@option(
    "--references",
    "genppl: held-out text (data), one held-out row as every sample (tiled) and unigram draws, scored as the "
    "samples are; the run is flagged when its cross-sample diversity collapses.",
    default=True,
    show_default=True,
)
@click.option(
    "--samples-file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help='Score the samples in this JSONL file (one object per line with "tokens", ids in the checkpoint\'s '
    'tokenizer, or "text"; what --out writes) instead of drawing any: every metric, references and MAUVE '
    "alike. --samples and --seq-len then come from the file.",
)
@click.option(
    "--sweep",
    default=None,
    metavar="KNOB=V1,V2,...",
    help="Draw one record per value of temperature, nucleus-p or (--sampler remdm) eta (e.g. "
    "temperature=0.8,0.9,1.0) and read Gen PPL off the curve at the data reference's entropy (a genppl-matched "
    "record and its PNG in --out).",
)
@click.option(
    "--mauve/--no-mauve",
    default=True,
    show_default=True,
    help="With --references and a judge: MAUVE (the mauve-text package, judge features) of the samples and of "
    "every reference against held-out rows disjoint from the data reference. Its settings are recorded.",
)
@device_option()
@out_option("The record and the samples (JSONL) are written into it.")
@json_option()
def genppl_cmd(checkpoint, out, as_json, **settings):
    """Sample from CHECKPOINT (or take --samples-file) and report Gen PPL under a judge with entropy, diversity,
    MAUVE, NFE and speed, beside held-out text and degenerate references scored alike."""
    from harness.evaluation.genppl import run_genppl, samples_jsonl
    from harness.views import render_genppl

    sweep = settings.pop("sweep")
    if sweep is not None:
        return _sweep(checkpoint, sweep, out, as_json, settings)
    record, rows = run_genppl(checkpoint, **settings)
    # the samples file takes the record's name (record~1.json <-> record~1.samples.jsonl)
    emit_record(
        record,
        out=out,
        as_json=as_json,
        render=render_genppl,
        attachments={"samples_file": (".samples.jsonl", samples_jsonl(rows))},
    )


def _sweep(checkpoint, sweep, out, as_json, settings):
    """Every point's record (and samples) into ``out``, then the matched record with its plot."""
    from harness.evaluation.genppl import samples_jsonl
    from harness.evaluation.genppl_sweep import run_sweep
    from harness.views.genppl_matched import plot_matched, render_matched

    record, points = run_sweep(checkpoint, sweep=sweep, **settings)
    emit_record(
        record,
        out=out,
        as_json=as_json,
        render=render_matched,
        attachments={"plot_file": (".png", plot_matched([record]))},
        before=[(point, {"samples_file": (".samples.jsonl", samples_jsonl(rows))}) for point, rows in points],
    )
