"""``primebench eval``: evaluations of checkpoints."""

from __future__ import annotations

import click


@click.group("eval")
def eval_group():
    """Evaluate checkpoints: perplexity and bounds (ppl)."""


COMMANDS = [eval_group]
