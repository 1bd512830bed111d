"""``primebench import`` and ``primebench export``."""

from __future__ import annotations

import click

from harness.cli.options import out_option


@click.command("import")
@click.argument("source")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["mdlm-hf", "mdlm-ckpt", "prime-ckpt", "ar-ckpt", "hf-causal"]),
    default=None,
    help="Layout of SOURCE [default: from its prefix, e.g. mdlm-ckpt:FILE].",
)
@out_option("Folder to write (new or empty): safetensors weights, config.json, tokenizer.", required=True)
@click.option("--ema/--no-ema", default=True, show_default=True, help="Keep a .ckpt's EMA weights or its raw ones.")
@click.option(
    "--tokenizer",
    "tokenizer",
    default=None,
    metavar="SPEC",
    help="Tokenizer of a release checkpoint with no tokenizer files beside it (any --tokenizer spec) "
    "[default: the files beside it, else gpt2 for C = 50257].",
)
def import_cmd(source, fmt, out, ema, tokenizer):
    """Convert a published checkpoint into a folder every command takes as a plain path."""
    from harness.models.transfer import import_checkpoint, source_for

    path = import_checkpoint(source_for(fmt, source), out, ema=ema, tokenizer=tokenizer)
    click.echo(str(path))


@click.command("export")
@click.argument("checkpoint")
@out_option("Folder to write (new or empty): model.safetensors, config.json, tokenizer.", required=True)
@click.option("--ema/--no-ema", default=True, show_default=True, help="Export the EMA weights or the raw ones.")
def export_cmd(checkpoint, out, ema):
    """Write a checkpoint trained here as an HF-style folder (safetensors + config.json)."""
    from harness.models.transfer import export_checkpoint

    click.echo(str(export_checkpoint(checkpoint, out, ema=ema)))


COMMANDS = [import_cmd, export_cmd]
