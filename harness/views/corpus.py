"""The view that ``primebench data info`` prints: a corpus's splits (documents, characters, and
tokens under a tokenizer) and its most frequent tokens."""

from __future__ import annotations

from rich.table import Table

from harness.logging import stdout_console


def render_corpus_info(info: dict) -> None:
    """``info`` (:func:`harness.data.corpus_info`) on stdout; token columns only when it has a tokenizer."""

    tok = info.get("tokenizer") is not None
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


__all__ = ["render_corpus_info"]
