"""``primebench audit idle``: the idle-step ratio of the ancestral sampler, analytic and measured
(logic in :mod:`harness.audit.idle` and :mod:`harness.audit.idle_measure`, view in
:mod:`harness.views.idle`)."""

from __future__ import annotations

import click

from harness.cli.options import command, json_option, option, out_option, seed_option
from harness.cli.parsing import int_list


def _parse_ells(ctx, param, value: str) -> list[int]:
    """Click callback: "1,2,3" -> [1, 2, 3], every entry a positive integer (ell = 1 is MDLM)."""
    return int_list(value, example="1,2,3,4,6,8")


@command(
    "idle",
    aliases={
        "--length": "--seq-len",
        "-L": "--seq-len",
        "--batch": "--batch-size",
        "-B": "--batch-size",
        "--runs": "--samples",
        "-R": "--samples",
    },
)
@option("--seq-len", default=1024, show_default=True, type=click.IntRange(min=1, max=1 << 20))
@option(
    "--steps", "Of the ancestral sampler.", default=1024, show_default=True, type=click.IntRange(min=1, max=1 << 20)
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
@option(
    "--batch-size",
    "B of the whole-batch idle ratio (the paper's numbers are B = 1).",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
)
@option(
    "--samples",
    "Runs of the real ancestral sampler per ell for the measured column, one sequence each (the paper "
    "averaged 10; 0 skips it). Cost grows with samples * T * L * ell: at L = T = 1024 the six default ells "
    "take ~40 s with 10 on 2 idle CPU cores, several times that on a loaded machine (then use e.g. --samples 3).",
    default=10,
    show_default=True,
    type=click.IntRange(min=0),
)
@seed_option("Of the measured runs.")
@out_option()
@json_option()
def idle_cmd(seq_len, steps, ells, schedule, batch_size, samples, seed, out, as_json):
    """Idle-step ratio (ISR) of T-step ancestral sampling for each ell: analytic, whole-batch, expected
    NFE with caching, and measured through the real sampler (MDM-Prime Table 1 / Fig. 2)."""
    from harness.audit.idle_measure import idle_audit
    from harness.cli.emit import emit_record
    from harness.logging import console
    from harness.views import render_idle

    work = samples * steps * seq_len * sum(ells)  # unit-steps of the measured runs
    if work > WORK_LIMIT:
        raise click.BadParameter(
            f"the measured runs would take {work:.2e} unit-steps (--samples x --steps x --seq-len x sum of --ell), "
            f"hours on a CPU; the limit is {WORK_LIMIT:.0e}. Use --samples 0 for the analytic columns alone, or "
            "fewer --samples, --steps or --seq-len",
            param_hint="--samples",
        )
    audit = idle_audit(
        length=seq_len,
        steps=steps,
        ells=ells,
        schedule=schedule,
        batch=batch_size,
        runs=samples,
        seed=seed,
        log=lambda message: console().log(message),
    )
    emit_record(audit.to_record(), out=out, as_json=as_json, render=render_idle)


#: the most unit-steps (samples x T x L x sum of ell) the measured runs may take: the defaults
#: (10 x 1024 x 1024 x 24 = 2.5e8) run in about 40 s on 2 cores
WORK_LIMIT = 1e10

COMMANDS = [idle_cmd]
