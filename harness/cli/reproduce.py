"""``primebench reproduce`` and ``primebench bench``: presets with committed results, benchmarks."""

from __future__ import annotations

import click


@click.group("reproduce")
def reproduce_group():
    """Re-run a paper-table preset end to end (presets are added as they are committed)."""


@click.group("bench")
def bench_group():
    """Speed and memory benchmarks of the harness (benchmarks are added as they are written)."""


COMMANDS = [reproduce_group, bench_group]
