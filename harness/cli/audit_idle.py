"""``primebench audit idle``: the idle-step ratio of the ancestral sampler, analytic and measured
(logic in :mod:`harness.audit.idle` and :mod:`harness.audit.idle_measure`, view in
:mod:`harness.views.idle`)."""

from __future__ import annotations

import click

from harness.cli.options import int_list, out_option


def _parse_ells(ctx, param, value: str) -> list[int]:
    """Click callback: "1,2,3" -> [1, 2, 3], every entry a positive integer (ell = 1 is MDLM)."""
    return int_list(value, example="1,2,3,4,6,8")


@click.command("idle")
@click.option(
    "--length", "-L", default=1024, show_default=True, type=click.IntRange(min=1), help="Sequence length L in tokens."
)
@click.option(
    "--steps",
    "-T",
    default=1024,
    show_default=True,
    type=click.IntRange(min=1),
    help="Sampling steps T of the ancestral sampler.",
)
@click.option(
    "--ell",
    "ells",
    default="1,2,3,4,6,8",
    show_default=True,
    callback=_parse_ells,
    help="Sub-tokens per token, comma-separated (1 = MDLM).",
)
@click.option(
    "--schedule", default="linear", show_default=True, help="Masking schedule: linear, loglinear or polynomial:K."
)
@click.option(
    "--batch",
    "-B",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Batch size B for the whole-batch idle ratio (the paper's numbers are B = 1).",
)
@click.option(
    "--runs",
    "-R",
    default=10,
    show_default=True,
    type=click.IntRange(min=0),
    help="Runs of the real ancestral sampler per ell for the measured column, one sequence each "
    "(the paper averaged 10; 0 skips it). Cost grows with runs * T * L * ell: at L = T = 1024 "
    "the six default ells take ~40 s with 10 runs on 2 idle CPU cores, several times that on "
    "a loaded machine (then use e.g. --runs 3).",
)
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the measured runs.")
@out_option()
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON instead of the table.")
def idle_cmd(length, steps, ells, schedule, batch, runs, seed, out, as_json):
    """Idle-step ratio (ISR) of T-step ancestral sampling for each ell: analytic, whole-batch, expected
    NFE with caching, and measured through the real sampler (MDM-Prime Table 1 / Fig. 2)."""
    from harness.audit.idle_measure import idle_audit
    from harness.cli.emit import emit_record
    from harness.logging import console
    from harness.views import render_idle

    audit = idle_audit(
        length=length,
        steps=steps,
        ells=ells,
        schedule=schedule,
        batch=batch,
        runs=runs,
        seed=seed,
        log=lambda message: console().log(message),
    )
    emit_record(audit.to_record(), out=out, as_json=as_json, render=render_idle)


COMMANDS = [idle_cmd]
