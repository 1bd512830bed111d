"""Progress and logs go to stderr with rich; results go to stdout."""

from __future__ import annotations

import contextlib
import functools
import io
import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


@functools.lru_cache(maxsize=1)
def console() -> Console:
    """The stderr console used for progress bars and log lines."""
    return Console(stderr=True)


#: seconds between two plain progress lines of one task when stderr is not a terminal
PLAIN_INTERVAL_S = 30.0


class PlainProgress:
    """What :func:`progress` yields when stderr is not a terminal (``make quickstart > log``, CI,
    ``nohup``): the same ``add_task`` / ``update`` / ``advance`` calls, printed as plain lines. A task
    prints when it starts, at every ``advance`` (a job's stages, each seconds to minutes long), at most
    every ``interval`` seconds of ``update`` calls (training steps), and when it completes."""

    def __init__(self, out: Console, interval: float = PLAIN_INTERVAL_S, clock=None):

        self.out, self.interval, self.clock = out, interval, clock or time.monotonic
        self.tasks: dict[int, dict] = {}

    def add_task(self, description: str, total: float | None = None, completed: float = 0, **fields) -> int:
        task_id = len(self.tasks)
        now = self.clock()
        self.tasks[task_id] = dict(
            description=description,
            total=total,
            completed=completed,
            fields=dict(fields),
            started=now,
            start_completed=completed,
            printed=now,
        )
        self._print(task_id, "started")
        return task_id

    def update(
        self,
        task_id: int,
        *,
        completed: float | None = None,
        advance: float | None = None,
        every: bool = False,
        **fields,
    ) -> None:
        task = self.tasks[task_id]
        if completed is not None:
            task["completed"] = completed
        if advance is not None:
            task["completed"] += advance
        task["fields"].update(fields)
        total, now = task["total"], self.clock()
        finished = total is not None and task["completed"] >= total
        if finished or every or now - task["printed"] >= self.interval:
            task["printed"] = now
            self._print(task_id, "done" if finished else "")

    def advance(self, task_id: int, advance: float = 1) -> None:
        self.update(task_id, advance=advance, every=True)

    def _print(self, task_id: int, note: str) -> None:
        task = self.tasks[task_id]
        done, total = task["completed"], task["total"]
        parts = [
            f"{task['description']}: {done:g}/{total:g}" if total is not None else f"{task['description']}: {done:g}"
        ]
        loss, tps = task["fields"].get("loss"), task["fields"].get("tps")
        if loss is not None and loss == loss:
            parts.append(f"loss {loss:.4f}")
        if tps:
            parts.append(f"{tps:,.0f} tok/s")
        elapsed = self.clock() - task["started"]
        parts.append(f"{_clock(elapsed)} elapsed")
        rate = (done - task["start_completed"]) / elapsed if elapsed > 0 else 0.0
        if total is not None and rate > 0 and done < total:
            parts.append(f"ETA {_clock((total - done) / rate)}")
        if note:
            parts.append(note)
        self.out.print(", ".join(parts), markup=False, highlight=False, soft_wrap=True)


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


@contextlib.contextmanager
def progress(disable: bool = False):
    """A rich progress display on stderr with loss and tokens/s fields; plain lines
    (:class:`PlainProgress`) when stderr is not a terminal."""
    if not disable and not console().is_terminal:
        yield PlainProgress(console())
        return
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

    if _CAPTURE:
        return _CAPTURE[-1]
    return Console(width=None if sys.stdout.isatty() else 200)


@contextlib.contextmanager
def capture_stdout(width: int = 200):
    """Record what the views print (``stdout_console()``) instead of printing it; yields the recording
    console, whose ``export_text()`` is the plain text (for Markdown reports)."""

    recorder = Console(file=io.StringIO(), record=True, width=width, color_system=None)
    _CAPTURE.append(recorder)
    try:
        yield recorder
    finally:
        _CAPTURE.remove(recorder)
