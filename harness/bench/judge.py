"""Bench stage 7: the Gen-PPL judge's scoring throughput and the peak memory of loading and scoring."""

from __future__ import annotations

import time

import torch

from harness.bench.measure import Figure, PeakRSS
from harness.judges import load_judge
from harness.metrics.genppl import score_ids


def judge_figures(*, samples=8, length=256, device="cpu"):
    """Stage 7: the smollm2 judge's scoring throughput on ``samples`` random sequences of ``length``
    tokens, and the peak resident memory of loading it and of scoring. Returns three :class:`Figure`."""

    with PeakRSS() as load_mem:
        judge = load_judge("smollm2", device=device)
    g = torch.Generator().manual_seed(0)
    ids = [torch.randint(100, 20000, (length,), generator=g).tolist() for _ in range(samples)]
    with PeakRSS() as score_mem:
        began = time.perf_counter()
        score_ids(judge, ids, max_length=length, batch_size=samples)
        wall = time.perf_counter() - began
    return [
        Figure(
            "judge: smollm2 scoring throughput",
            samples * length / wall,
            "tokens/s",
            None,
            None,
            {"samples": samples, "length": length, "seconds": wall},
        ),
        Figure("memory: peak RSS loading the judge", load_mem.peak / 2**20, "MiB"),
        Figure("memory: peak RSS scoring with the judge", score_mem.peak / 2**20, "MiB"),
    ]
