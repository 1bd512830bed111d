"""The measuring tools every bench stage uses: :class:`Figure` (a value beside its target),
:class:`PeakRSS`, :func:`median_time`, and the GEMM ceiling (stage 1) the throughput figures are
fractions of."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

C_GPT2 = 50257


@dataclass
class Figure:
    """One measured figure beside its target (``target`` None: reported, no target)."""

    name: str
    value: float
    units: str
    target: str | None = None
    ok: bool | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "units": self.units,
            "target": self.target,
            "mark": None if self.ok is None else ("pass" if self.ok else "short"),
            "detail": self.detail,
        }


class PeakRSS:
    """Peak resident memory of this process while a stage runs (sampled from /proc every 10 ms)."""

    def __init__(self):
        self.peak = 0
        self._stop = threading.Event()

    @staticmethod
    def current() -> int:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4096
        except OSError:  # not Linux: the lifetime peak instead
            # deferred: POSIX-only, read only off Linux
            import resource

            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.current())
            self._stop.wait(0.01)

    def __enter__(self):
        self.peak = self.current()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.current())


def median_time(
    fn: Callable[[], Any], repeats: int, *, warmup: int = 1, sync: Callable[[], None] = lambda: None
) -> float:
    """Median wall seconds of ``fn()`` over ``repeats`` runs after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def minor_faults(fn: Callable[[], Any]) -> int | None:
    """Minor page faults of this process during one ``fn()`` (memory the allocator handed back
    fresh, which the kernel maps in page by page); None where ``resource`` is missing (Windows)."""
    try:
        import resource  # deferred: POSIX only
    except ImportError:
        return None
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    fn()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def block_matmuls(tokens: int, d: int, mlp: int = 4) -> list[tuple[int, int, int]]:
    """(M, K, N) of one transformer block's GEMMs: fused QKV, output projection, MLP up and down."""
    return [(tokens, d, 3 * d), (tokens, d, d), (tokens, d, mlp * d), (tokens, mlp * d, d)]


def gemm_throughput(shapes, *, repeats: int, dtype=torch.float32, device="cpu") -> float:
    """FLOP/s of the given matmuls run back to back (2 M K N each)."""
    mats = [
        (torch.randn(m, k, dtype=dtype, device=device), torch.randn(k, n, dtype=dtype, device=device))
        for m, k, n in shapes
    ]
    flops = sum(2 * m * k * n for m, k, n in shapes)

    def run():
        for a, b in mats:
            torch.mm(a, b)

    return flops / median_time(run, repeats, sync=sync_for(device))


def sync_for(device) -> Callable[[], None]:
    """A callable that waits for the device's queued work (CUDA), or does nothing (CPU), so timings
    cover the work itself."""
    if str(device).startswith("cuda"):
        return lambda: torch.cuda.synchronize()
    return lambda: None


#: tensor methods that read a value back to the host: each is a device synchronisation on a GPU
HOST_READS = frozenset(
    {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "cpu", "numpy", "nonzero", "masked_select"}
)


class HostReads(TorchFunctionMode):
    """Counts calls that read a tensor's value back to the host (:data:`HOST_READS`) while active:
    on a GPU each is a synchronisation, so a sampling loop can be checked for them on any device.
    Boolean-mask indexing (``x[mask]``) is not seen here; on a GPU it synchronises too."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", None) in HOST_READS:
            self.count += 1
        return func(*args, **(kwargs or {}))


def host_reads_per_step(run: Callable[[int], Any], steps: tuple[int, int]) -> float:
    """Host reads per step of ``run(T)``: the difference of two runs' counts over the difference of
    their T, so the reads made once per run (set-up, the final copy) cancel."""
    counts = []
    for T in steps:
        with HostReads() as reads:
            run(T)
        counts.append(reads.count)
    return (counts[1] - counts[0]) / (steps[1] - steps[0])
