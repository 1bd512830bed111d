"""SIGINT / SIGTERM stop at once (harness.stopping): the regions' rules in process, then real signals
sent at seeded random moments to real commands and computations in child processes."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness import stopping
from harness.stopping import Stop
from tests.fixtures.processes import as_from_a_terminal

ROOT = Path(__file__).resolve().parents[2]


def _deliver(signum: int = signal.SIGTERM) -> None:
    """Send ``signum`` to this process and give the interpreter a few instructions to run its handler."""
    os.kill(os.getpid(), signum)
    for _ in range(1000):
        time.sleep(0.001)


def test_a_signal_raises_stop_with_its_exit_code_and_the_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Stop) as info, stopping.handling():
        _deliver(signal.SIGTERM)
    assert info.value.signum == signal.SIGTERM and info.value.exit_code == 143 and info.value.name == "SIGTERM"
    assert isinstance(info.value, KeyboardInterrupt)  # code that cleans up on Ctrl-C cleans up on SIGTERM too
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_critical_region_finishes_before_the_stop():
    done = []
    with pytest.raises(Stop), stopping.handling():
        with stopping.critical():
            _deliver()
            done.append("the write finished")
        done.append("after the region")  # never: the held signal is raised as the region ends
    assert done == ["the write finished"]


def test_a_critical_region_that_fails_raises_its_own_error():
    with pytest.raises(ValueError), stopping.handling(), stopping.critical():
        _deliver()
        raise ValueError("disk full")


def test_deferred_sets_the_flag_abortable_stops_and_a_second_signal_stops_anyway():
    with stopping.handling(), stopping.deferred():
        _deliver()
        assert stopping.requested() == signal.SIGTERM  # a flag, no exception
        with pytest.raises(Stop):
            with stopping.abortable():  # a signal that came before raises on entry
                pass
        with pytest.raises(Stop):
            _deliver(signal.SIGTERM)  # the second signal (SIGTERM: a background test run ignores SIGINT)
    assert stopping.requested() is None or stopping.requested() == signal.SIGTERM


def test_a_signal_the_process_was_started_ignoring_stays_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with stopping.handling():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_grace_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(stopping.GRACE_VARIABLE, "2.5")
    assert stopping.grace_seconds() == 2.5
    for bad in ("x", "-1", "nan", "0"):
        monkeypatch.setenv(stopping.GRACE_VARIABLE, bad)
        assert stopping.grace_seconds() == stopping.DEFAULT_GRACE


# ---- real signals at random moments, in child processes ----------------------------------------------

RNG = random.Random(20261206)  # the moments are random, and the same on every run


def _env(**extra) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _start(args: list[str], cwd: Path, **env) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(**env),
        preexec_fn=as_from_a_terminal,
    )


def _stop(proc: subprocess.Popen, signum: int, *, within: float) -> tuple[str, str, float]:
    """Send ``signum`` to a running ``proc``; return its output and the seconds it took to exit."""
    assert proc.poll() is None, "the work ended before the signal: make it longer"
    sent = time.monotonic()
    proc.send_signal(signum)
    try:
        out, err = proc.communicate(timeout=within + 60)
    finally:
        proc.kill()
    return out, err, time.monotonic() - sent


def _wait_for_line(proc: subprocess.Popen, marker: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if marker in line:
            return
        if not line and proc.poll() is not None:
            raise AssertionError(f"the child ended before {marker!r}: {proc.stderr.read()[-2000:]}")
    raise AssertionError(f"no {marker!r} within {timeout} s")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_inside_a_long_first_training_step_stops_within_seconds(tmp_path, signum):
    """A step of about twenty seconds (a wider model than tiny's): the signal, at a random moment in it,
    stops the run within seconds, with nothing to resume and a rerun that starts afresh."""
    out = tmp_path / "run"
    args = [
        "-m", "harness", "train", "tiny/mdlm", "model.d_model=512", "model.n_layers=8", "model.n_heads=8",
        "train.batch_size=16", "data.seq_len=256", "train.steps=3", "--out", str(out), "--quiet",
    ]  # fmt: skip
    proc = _start(args, tmp_path)
    deadline = time.monotonic() + 180
    while not (out / "train_log.jsonl").exists():  # written just before the first step starts
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "slow"
        time.sleep(0.05)
    time.sleep(RNG.uniform(0.1, 1.0))
    _, err, took = _stop(proc, signum, within=10)
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, err
    assert took < 10, f"{took:.1f} s to stop"
    assert "Traceback" not in err and not (out / ".pending").exists()
    if "before any checkpoint was saved" in err:  # the usual case: the signal came inside step 1
        assert f"{name} received: stopped in step 1 of 3, before any checkpoint was saved" in err
        assert not (out / "model.safetensors").exists()
    else:  # a fast machine finished step 1 first: the step in flight is abandoned, the last one saved
        assert f"{name} received: stopped at step " in err and "--resume" in err, err
        assert (out / "model.safetensors").exists() and (out / "trainer_state.pt").exists()


def test_a_signal_during_an_evaluation_stops_it_and_writes_nothing(trained, tmp_path):
    """``eval genppl`` (sampling, the judge's pass, the references, MAUVE), signalled at a random moment."""
    out = tmp_path / "rec"
    proc = _start(["-m", "harness", "eval", "genppl", str(trained("mdlm")), "-n", "48", "--out", str(out)], tmp_path)
    time.sleep(RNG.uniform(6.0, 20.0))
    _, err, took = _stop(proc, signal.SIGTERM, within=10)
    assert proc.returncode == 143, err
    assert took < 10 and "interrupted (SIGTERM)" in err and "Traceback" not in err
    assert not out.exists() or not [p for p in out.rglob("*") if p.is_file()]


_JUDGE = """
import sys
from harness.judges import load_judge
from harness.metrics.genppl import score_texts
from harness.stopping import Stop, handling

with handling():
    judge = load_judge("smollm2")
    texts = ["The committee met on Tuesday to discuss the budget for the coming year. " * 4] * 4000
    print("started", flush=True)
    try:
        score_texts(judge, texts, max_length=128, batch_size=8)
    except Stop as stop:
        print("stopped", flush=True)
        sys.exit(stop.exit_code)
sys.exit(0)
"""

_MAUVE = """
import sys
import torch
from harness.metrics.mauve_score import mauve_between
from harness.stopping import Stop, handling

with handling():
    g = torch.Generator().manual_seed(0)
    p, q = torch.randn(8000, 576, generator=g), torch.randn(8000, 576, generator=g) + 0.3
    print("started", flush=True)
    try:
        mauve_between(p, q, seed=0)
    except Stop as stop:
        sys.exit(stop.exit_code)
sys.exit(0)
"""


@pytest.mark.parametrize("script", [_JUDGE, _MAUVE], ids=["judge-pass", "mauve"])
def test_a_signal_inside_a_judge_pass_or_mauve_stops_within_seconds(tmp_path, script):
    path = tmp_path / "work.py"
    path.write_text(textwrap.dedent(script))
    proc = _start([str(path)], tmp_path)
    _wait_for_line(proc, "started")
    time.sleep(RNG.uniform(0.2, 2.0))
    _, err, took = _stop(proc, signal.SIGTERM, within=8)
    assert proc.returncode == 143, err
    assert took < 8, f"{took:.1f} s to stop"
    assert "Traceback" not in err


_NATIVE = """
import sys
import torch
from harness.stopping import handling

with handling():
    a = torch.ones(12000, 12000)
    print("started", flush=True)
    for _ in range(100):
        a @ a  # one native call of many seconds: no Python handler runs until it returns
sys.exit(0)
"""


def test_the_watchdog_ends_a_native_call_that_does_not_return(tmp_path):
    path = tmp_path / "native.py"
    path.write_text(textwrap.dedent(_NATIVE))
    proc = _start([str(path)], tmp_path, **{stopping.GRACE_VARIABLE: 1})
    _wait_for_line(proc, "started")
    time.sleep(RNG.uniform(0.2, 1.0))
    _, err, took = _stop(proc, signal.SIGTERM, within=6)
    assert proc.returncode == 143, err
    assert took < 6 and "did not return within 1 s" in err and "--resume" in err
