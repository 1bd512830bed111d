"""``primebench train``."""

from __future__ import annotations

import json
from pathlib import Path

import click

from harness.cli.options import device_option, json_option, out_option


@click.command("train", context_settings={"ignore_unknown_options": False})
@click.argument("config")
@click.argument("overrides", nargs=-1)
@out_option("The checkpoint folder [default: results/runs/NAME].")
@click.option("--resume", is_flag=True, help="Continue the run saved in --out exactly where it stopped.")
@click.option("--restart", is_flag=True, help="Discard the run saved in --out (weights, state, log) and start over.")
@click.option(
    "--stop-after",
    type=click.IntRange(min=1),
    default=None,
    help="Stop (with a checkpoint) after this many steps in this invocation.",
)
@device_option(default=None, detail="[default: cuda when available].")
@json_option()
@click.option("--quiet", is_flag=True, help="No progress bar.")
def train_cmd(config, overrides, out, resume, restart, stop_after, device, as_json, quiet):
    """Train CONFIG (a preset such as tiny/arm, or a YAML path) with dotted OVERRIDES (train.steps=200).

    SIGINT or SIGTERM stops within seconds (inside a step too), saves the last finished step for --resume
    and exits with 130 / 143."""
    from harness import distributed
    from harness.config import load_config
    from harness.training import train

    cfg = load_config(config, overrides)
    out = out or Path("results/runs") / cfg.name
    result = train(cfg, out, resume=resume, restart=restart, stop_after=stop_after, device=device, quiet=quiet)
    summary = {
        "out": str(result.out),
        "family": cfg.model.family,
        "step": result.step,
        "train_loss": result.train_loss,
        "val_loss_ema": result.val_loss,
        "unigram_ref": result.unigram_ref,
        "tokens_seen": result.tokens_seen,
        "wall_s": round(result.wall_s, 2),
    }
    if not distributed.is_main():
        return
    if as_json:
        click.echo(json.dumps(summary))
    else:
        for key, value in summary.items():
            click.echo(f"{key:>14}: {value}")


COMMANDS = [train_cmd]
