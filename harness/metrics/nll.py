"""Token-weighted NLL over a dataset, accumulated in float64 from per-batch :class:`harness.nll.NLL`.

The per-token NLL is total nats / total scored tokens over the whole set (MDLM's token-weighted
convention), never a mean of per-sequence perplexities. Its standard error combines the
per-sequence Monte-Carlo standard errors (zero when exact).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from harness.errors import InputError
from harness.metrics.base import Accumulator


@dataclass(frozen=True)
class PerplexityResult:
    """Token-weighted NLL over a dataset. ``nll`` in nats per token; ``kind`` as in :class:`harness.nll.NLL`.

    ``stderr_method``: "exact" (no Monte-Carlo error), "per-sequence" (from the K > 1 samples of
    each sequence) or "between-sequence" (K = 1: the spread of the per-sequence estimates, which
    also contains the variation between sequences and so overstates the Monte-Carlo error).
    """

    nll: float
    stderr: float
    tokens: float
    sequences: int
    kind: str
    num_samples: int
    stderr_method: str = "exact"

    @property
    def ppl(self) -> float:
        return math.exp(self.nll)

    @property
    def bits_per_token(self) -> float:
        return self.nll / math.log(2)


class NLLAccumulator(Accumulator):
    """update/compute/reset with float64 state; batch size does not change the result.

    States (float64, summed over ranks): ``nats``, ``var`` (sum of squared per-sequence standard
    errors), ``tokens``, ``sequences``, ``sum_x`` and ``sum_x2`` (of the per-sequence nats) and
    ``missing_se`` (batches without per-sequence standard errors). ``kind`` and ``num_samples``
    describe the estimator and are the same on every rank.
    """

    def __init__(self) -> None:
        super().__init__()
        for name in ("nats", "var", "tokens", "sequences", "sum_x", "sum_x2", "missing_se"):
            self.add_state(name, 0.0, dist_reduce_fx="sum")
        self.kind: str | None = None
        self.num_samples = 1

    def reset(self) -> None:
        super().reset()
        self.kind = None
        self.num_samples = 1

    @property
    def per_sequence_se(self) -> bool:
        """Whether every batch came with per-sequence standard errors (K > 1 samples)."""
        return bool(self.missing_se == 0)

    def all_reduce(self) -> None:
        """The base's reduction of the states, and ``kind`` and ``num_samples`` from a rank that
        scored a batch (a rank that scored none has neither)."""

        if dist.is_available() and dist.is_initialized():
            described: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(described, (self.kind, self.num_samples))
            self.kind, self.num_samples = next((d for d in described if d[0] is not None), described[0])
        super().all_reduce()

    def update(self, result) -> None:
        if self.kind is not None and result.kind != self.kind:
            raise ValueError(f"cannot accumulate {result.kind!r} with {self.kind!r}")
        self.kind = result.kind
        self.num_samples = result.num_samples
        self.nats += result.nats.detach().double().sum().cpu()
        se = result.stderr.detach().double().cpu()
        if torch.isnan(se).any():
            self.missing_se += 1
        else:
            self.var += (se**2).sum()
        x = result.nats.detach().double().cpu()
        self.sum_x += x.sum()
        self.sum_x2 += (x**2).sum()
        self.tokens += torch.as_tensor(result.tokens).double().sum().cpu()
        self.sequences += int(result.nats.numel())

    def compute(self) -> PerplexityResult:
        if self.tokens <= 0:
            raise InputError("no tokens were scored")
        n = int(self.sequences)
        if self.kind in ("exact", "exact-policy"):
            stderr, method = 0.0, "exact"
        elif self.per_sequence_se:
            stderr, method = float(self.var.sqrt() / self.tokens), "per-sequence"
        else:
            var = (self.sum_x2 - self.sum_x**2 / n) / max(n - 1, 1)
            stderr, method = float((n * var.clamp_min(0)).sqrt() / self.tokens), "between-sequence"
        return PerplexityResult(
            nll=float(self.nats / self.tokens),
            stderr=stderr,
            stderr_method=method,
            tokens=float(self.tokens),
            sequences=n,
            kind=self.kind or "exact",
            num_samples=self.num_samples,
        )
