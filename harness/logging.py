"""Progress and logs go to stderr with rich; results go to stdout."""

from __future__ import annotations

import contextlib
import functools

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


@functools.lru_cache(maxsize=1)
def console() -> Console:
    """The stderr console used for progress bars and log lines."""
    return Console(stderr=True)


@contextlib.contextmanager
def progress(disable: bool = False):
    """A rich progress display on stderr with loss and tokens/s fields."""
    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.4f}"),
        TextColumn("{task.fields[tps]:,.0f} tok/s"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console(),
        disable=disable,
        transient=False,
    )
    with bar:
        yield bar


def stdout_console() -> Console:
    """Console for results on stdout; wide when piped so tables are not wrapped mid-label."""
    import sys

    return Console(width=None if sys.stdout.isatty() else 200)
