"""Stopping on SIGINT and SIGTERM at once, wherever the process is, without losing what was written.

A cluster sends SIGTERM some seconds before it kills a job, and a user presses Ctrl-C; either way the
harness must stop within seconds, whatever it is doing (a long first training step, a sampler, a
judge pass, a MAUVE computation), keep every file it wrote whole, leave a resumable state where one
exists, and exit with 128 + the signal's number (130, 143).

:func:`handling` installs one handler for both signals (the command line wraps every command in it;
:func:`harness.training.train` does too, so the Python API behaves the same). The first signal raises
:class:`Stop` in the main thread at the next Python instruction, so a computation made of many
operations stops between two of them. Two kinds of region change that:

- :func:`critical` (a checkpoint save, an atomic file write): the signal is held until the region
  ends, then :class:`Stop` is raised, so a file is never left half-moved;
- :func:`deferred` (a training loop between the parts of a step it can abandon, see
  :func:`abortable`): the signal only sets a flag, which the loop reads with :func:`requested` and
  answers by saving and stopping at the end of the step.

A single operation that runs for minutes in C (a huge matrix product, a k-means in a native library)
holds the main thread, and no Python handler runs until it returns. A watchdog thread, woken at once
by the interpreter's C-level handler through a pipe, ends the process after a grace period
(:data:`GRACE_VARIABLE`, 5 seconds by default) when its handling has not ended by then and no
critical region is open (it waits for one that is), with a line on stderr and the same exit status.
(It needs the interpreter lock: a native call that holds it, unlike PyTorch's, numpy's and faiss's
long operations, delays it.) Files are written through temporary names and moved whole, so nothing a
reader sees is half-written even then. A second signal stops at once (after a critical region).

In a distributed run every rank must stop after the same step, so training stays deferred there (the
flag is all-reduced) and the watchdog is the backstop.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading

#: seconds the watchdog waits, after the first signal, before it ends a process still running
GRACE_VARIABLE = "PRIMEBENCH_STOP_GRACE"
DEFAULT_GRACE = 5.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stop(KeyboardInterrupt):
    """Raised in the main thread on SIGINT or SIGTERM; ``signum`` is the signal, ``exit_code`` is
    128 + it. A :class:`KeyboardInterrupt`, so code that cleans up on Ctrl-C cleans up on SIGTERM too."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class _State:
    def __init__(self):
        self.lock = threading.RLock()
        self.signum: int | None = None  # the first signal received, until the outermost handling() ends
        self.count = 0
        self.delivered = False  # Stop was raised for the first signal
        self.held = False  # a signal came during a critical region and is raised when it ends
        self.deferred = 0
        self.critical = 0
        self.installed = 0  # nesting depth of handling()
        self.previous: dict[int, object] = {}
        self.wakeup: tuple[int, int] | None = None  # the watchdog's pipe (write end, previous wake-up fd)
        self.done = threading.Event()  # set when the outermost handling() ends: the watchdog stands down


_state = _State()


def grace_seconds() -> float:
    """The watchdog's grace period: :data:`GRACE_VARIABLE` when set to a positive number, else 5 s."""
    raw = os.environ.get(GRACE_VARIABLE, "").strip()
    try:
        value = float(raw) if raw else DEFAULT_GRACE
    except ValueError:
        return DEFAULT_GRACE
    return value if 0 < value < 1e6 else DEFAULT_GRACE


def _watch(read_fd: int, grace: float, done: threading.Event) -> None:
    """The watchdog: blocks on the wake-up pipe, which the interpreter's C-level handler writes a
    signal's number into at once (even while the main thread is inside a native call), then gives the
    Python handler ``grace`` seconds to end the work before it ends the process."""
    try:
        signum = None
        while signum is None:
            data = os.read(read_fd, 64)
            if done.is_set() or not data:
                return
            signum = next((b for b in data if b in SIGNALS), None)
        if done.wait(grace):
            return
        while not done.is_set():
            with _state.lock:
                if _state.critical == 0 and not done.is_set():
                    name = signal.Signals(signum).name
                    with contextlib.suppress(Exception):
                        sys.stderr.write(
                            f"\nerror: {name} received; the computation under way did not return within "
                            f"{grace:g} s, so the process stops now\n  fix: run the command again (a training run: "
                            "with --resume, from its last checkpoint; every file written is whole)\n"
                        )
                        sys.stderr.flush()
                    os._exit(128 + signum)
            done.wait(0.05)
    finally:
        with contextlib.suppress(OSError):
            os.close(read_fd)


def _handle(signum, frame) -> None:
    with _state.lock:
        _state.count += 1
        first = _state.signum is None
        if first:
            _state.signum = int(signum)
        if first and _state.deferred and not _state.critical:  # the loop reads requested() at the end of its step
            return
        if _state.critical:  # raised when the region ends
            _state.held = True
            return
        _state.delivered = True
    raise Stop(signum)


@contextlib.contextmanager
def handling():
    """Install the handler for SIGINT and SIGTERM (main thread only; a signal the process was started
    ignoring, such as SIGINT in a background job, stays ignored), and restore the previous handlers
    when the outermost ``handling`` ends."""
    main = threading.current_thread() is threading.main_thread()
    with _state.lock:
        outermost = _state.installed == 0
        _state.installed += 1
        if outermost:
            _state.signum, _state.count, _state.deferred, _state.critical = None, 0, 0, 0
            _state.delivered = _state.held = False
            _state.done = threading.Event()
            _state.previous = {}
            if main:
                for sig in SIGNALS:
                    current = signal.getsignal(sig)
                    if current is signal.SIG_IGN:
                        continue
                    _state.previous[sig] = signal.signal(sig, _handle)
                if _state.previous:
                    _start_watchdog()
    try:
        yield
    finally:
        with _state.lock:
            _state.installed -= 1
            if _state.installed == 0:
                _state.done.set()
                _stop_watchdog()
                for sig, handler in _state.previous.items():
                    signal.signal(sig, handler)
                _state.previous = {}


def _start_watchdog() -> None:
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except (ValueError, OSError):  # not possible here: the grace period is then not enforced
        os.close(read_fd)
        os.close(write_fd)
        return
    _state.wakeup = (write_fd, previous)
    threading.Thread(
        target=_watch, args=(read_fd, grace_seconds(), _state.done), name="primebench-stop-watchdog", daemon=True
    ).start()


def _stop_watchdog() -> None:
    if _state.wakeup is None:
        return
    write_fd, previous = _state.wakeup
    _state.wakeup = None
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(previous)
    with contextlib.suppress(OSError):
        os.write(write_fd, b"\0")  # wakes the watchdog, which sees ``done`` and returns
    with contextlib.suppress(OSError):
        os.close(write_fd)


def requested() -> int | None:
    """The signal received so far (its number), or None."""
    return _state.signum


@contextlib.contextmanager
def deferred():
    """A region where the first signal only sets the flag (:func:`requested`); a second still stops."""
    with _state.lock:
        _state.deferred += 1
    try:
        yield
    finally:
        with _state.lock:
            _state.deferred -= 1


@contextlib.contextmanager
def abortable():
    """Inside a :func:`deferred` region, a part that may be abandoned: a signal raises :class:`Stop`
    here at once (and on entry, when one came before)."""
    with _state.lock:
        saved, _state.deferred = _state.deferred, 0
        pending = _state.signum if not _state.delivered and not _state.critical else None
        if pending is not None:
            _state.delivered = True
    try:
        if pending is not None:
            raise Stop(pending)
        yield
    finally:
        with _state.lock:
            _state.deferred = saved


@contextlib.contextmanager
def critical():
    """A region a signal must not cut (a checkpoint save, a file moved into place): the signal is held,
    the watchdog waits, and :class:`Stop` is raised when the region ends (unless deferred, or the
    region ended by an exception of its own)."""
    with _state.lock:
        _state.critical += 1
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        with _state.lock:
            _state.critical -= 1
            pending = None
            if _state.critical == 0 and _state.held and not failed:
                _state.held = False
                if _state.count > 1 or not (_state.deferred or _state.delivered):
                    pending, _state.delivered = _state.signum, True
        if pending is not None:
            raise Stop(pending)


def uncut(fn):
    """Decorate a function whose every call runs as a :func:`critical` region (a file writer)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with critical():
            return fn(*args, **kwargs)

    return wrapper


__all__ = [
    "DEFAULT_GRACE",
    "GRACE_VARIABLE",
    "Stop",
    "abortable",
    "critical",
    "deferred",
    "grace_seconds",
    "handling",
    "requested",
    "uncut",
]
