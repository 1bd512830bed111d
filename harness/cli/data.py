"""``primebench data``."""

from __future__ import annotations

import json

import click


@click.group("data")
def data_group():
    """Inspect corpora, tokenizers and image datasets."""


@data_group.command("info")
@click.argument("corpus")
@click.option("--tokenizer", default=None, help="Also count tokens with this tokenizer (bytes, bpe:V, gpt2, hf:NAME).")
@click.option("--json", "as_json", is_flag=True)
def info_cmd(corpus, tokenizer, as_json):
    """Documents, characters, tokens and vocabulary statistics of CORPUS (e.g. wiki-embedded)."""
    from harness.data import corpus_info, get_corpus, get_tokenizer

    c = get_corpus(corpus)
    tok = get_tokenizer(tokenizer, corpus=c) if tokenizer else None
    info = corpus_info(c, tok)
    if as_json:
        click.echo(json.dumps(info, default=str))
        return
    from harness.logging import stdout_console
    from rich.table import Table

    table = Table(title=f"{info['spec']}  (sha256 {info['sha256'][:12]})")
    cols = ["split", "documents", "characters"] + (["tokens", "chars/token"] if tok else [])
    for col in cols:
        table.add_column(col, justify="right" if col != "split" else "left")
    for split, row in info["splits"].items():
        cells = [split, f"{row['documents']:,}", f"{row['characters']:,}"]
        if tok:
            cells += [f"{row['tokens']:,}", f"{row['characters_per_token']:.2f}"]
        table.add_row(*cells)
    console = stdout_console()
    console.print(table)
    if tok:
        top = ", ".join(f"{t['text']!r}:{t['count']}" for t in info.get("top_tokens", [])[:8])
        console.print(f"tokenizer {info['tokenizer']}: vocabulary {info['vocab_size']:,}; most frequent: {top}")


COMMANDS = [data_group]
