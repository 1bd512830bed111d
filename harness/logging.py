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


_CAPTURE: list[Console] = []  # consoles of open capture_stdout() blocks, innermost last


def stdout_console() -> Console:
    """Console for results on stdout; wide when piped so tables are not wrapped mid-label. Inside
    :func:`capture_stdout` it is that block's recording console instead."""
    import sys

    if _CAPTURE:
        return _CAPTURE[-1]
    return Console(width=None if sys.stdout.isatty() else 200)


@contextlib.contextmanager
def capture_stdout(width: int = 200):
    """Record what the views print (``stdout_console()``) instead of printing it; yields the recording
    console, whose ``export_text()`` is the plain text (for Markdown reports)."""
    import io

    recorder = Console(file=io.StringIO(), record=True, width=width, color_system=None)
    _CAPTURE.append(recorder)
    try:
        yield recorder
    finally:
        _CAPTURE.remove(recorder)
