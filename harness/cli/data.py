"""``primebench data``."""

from __future__ import annotations

import json

import click

from harness.cli.options import json_option, option


@click.group("data")
def data_group():
    """Inspect corpora, tokenizers and image datasets."""


@data_group.command("info")
@click.argument("corpus")
@option("--tokenizer", "Also count tokens with it.", default=None)
@json_option()
def info_cmd(corpus, tokenizer, as_json):
    """Documents, characters, tokens and vocabulary statistics of CORPUS (e.g. wiki-embedded)."""
    from harness.data import corpus_info, get_corpus, get_tokenizer

    c = get_corpus(corpus)
    tok = get_tokenizer(tokenizer, corpus=c) if tokenizer else None
    info = corpus_info(c, tok)
    if as_json:
        click.echo(json.dumps(info, default=str))
        return
    from harness.views import render_corpus_info

    render_corpus_info(info)


COMMANDS = [data_group]
