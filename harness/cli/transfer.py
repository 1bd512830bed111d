"""``primebench import`` and ``primebench export``."""

from __future__ import annotations

import click

from harness.cli.options import command, ema_option, option, out_option
from harness.cli.parsing import LazyChoice


def release_format_names() -> list[str]:
    from harness.models.releases import release_format_names as names

    return names()


@command("import", aliases={"--format": "--source-format"})
@click.argument("source")
@click.option(
    "--source-format",
    "fmt",
    type=LazyChoice(release_format_names),
    default=None,
    help="Layout of SOURCE [default: from its prefix, e.g. mdlm-ckpt:FILE].",
)
@out_option("New or empty; safetensors weights, config.json and the tokenizer are written into it.", required=True)
@ema_option("Of a .ckpt (the weights kept).")
@option(
    "--tokenizer",
    "Of a release checkpoint with no tokenizer files beside it [default: the files beside it, else gpt2 for "
    "C = 50257].",
    default=None,
    metavar="SPEC",
)
def import_cmd(source, fmt, out, ema, tokenizer):
    """Convert a published checkpoint into a folder every command takes as a plain path."""
    from harness.models.transfer import import_checkpoint, source_for

    path = import_checkpoint(source_for(fmt, source), out, ema=ema, tokenizer=tokenizer)
    click.echo(str(path))


@click.command("export")
@click.argument("checkpoint")
@out_option("New or empty; model.safetensors, config.json and the tokenizer are written into it.", required=True)
@ema_option()
def export_cmd(checkpoint, out, ema):
    """Write a checkpoint trained here as an HF-style folder (safetensors + config.json)."""
    from harness.models.transfer import export_checkpoint

    click.echo(str(export_checkpoint(checkpoint, out, ema=ema)))


COMMANDS = [import_cmd, export_cmd]
