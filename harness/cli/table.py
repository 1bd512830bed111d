"""``primebench table``: paper-style tables rendered from result records."""

from __future__ import annotations

import click


@click.group("table", invoke_without_command=False)
def table_group():
    """Render paper-style tables from result records (layouts arrive with the evaluations)."""


COMMANDS = [table_group]
