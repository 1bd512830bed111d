"""Progress without a terminal: plain lines a log file keeps (harness.logging.PlainProgress)."""

import io

from rich.console import Console

from harness.logging import PlainProgress, progress


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _plain(interval=30.0):
    out = io.StringIO()
    clock = _Clock()
    return PlainProgress(Console(file=out, width=200, color_system=None), interval=interval, clock=clock), out, clock


def test_a_long_task_prints_when_it_starts_every_interval_and_when_it_is_done():
    bar, out, clock = _plain()
    task = bar.add_task("train quickstart-mdlm", total=800, completed=0, loss=float("nan"), tps=0.0)
    for step in range(1, 801):
        clock.now = step * 0.5  # 2 steps per second: a line every 60 steps
        bar.update(task, completed=step, loss=5.0 - step / 1000, tps=4096.0)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("train quickstart-mdlm: 0/800") and "started" in lines[0]
    assert "loss" not in lines[0]  # NaN loss before the first step is not printed
    assert lines[1].startswith("train quickstart-mdlm: 60/800, loss 4.9400, 4,096 tok/s, 0:00:30 elapsed, ETA 0:06:10")
    assert lines[-1].startswith("train quickstart-mdlm: 800/800") and lines[-1].endswith("done")
    assert len(lines) == 1 + 800 // 60 + 1


def test_a_job_of_stages_prints_every_stage():
    bar, out, clock = _plain()
    task = bar.add_task("reproduce quickstart", total=3, loss=float("nan"), tps=0.0)
    for _ in range(3):
        clock.now += 1
        bar.advance(task)
    lines = out.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == [f"reproduce quickstart: {i}/3" for i in range(4)]


def test_progress_is_plain_when_stderr_is_not_a_terminal():
    with progress() as bar:  # pytest captures stderr: not a terminal
        assert isinstance(bar, PlainProgress)
    with progress(disable=True) as bar:
        assert not isinstance(bar, PlainProgress)
