"""Shared click option parsing."""

from __future__ import annotations

import click


def int_list(value: str, *, example: str = "64,256,1024", minimum: int = 1) -> list[int]:
    """"1,2,3" -> [1, 2, 3]; every entry an integer >= ``minimum``, else click.BadParameter."""
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of integers (e.g. {example})") from None
    if not out or min(out) < minimum:
        raise click.BadParameter(f"{value!r}: every entry must be an integer >= {minimum}, e.g. {example}")
    return out
