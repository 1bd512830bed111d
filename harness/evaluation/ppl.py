"""Perplexity over a packed dataset, accumulated in float64.

The per-token NLL is total nats / total scored tokens over the whole set (MDLM's token-weighted
convention), never a mean of per-sequence perplexities; the last partial batch is scored too.
Its standard error combines the per-sequence Monte-Carlo standard errors (zero when exact).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PerplexityResult:
    """Token-weighted NLL over a dataset. ``nll`` in nats per token; ``kind`` as in :class:`harness.results.NLL`."""

    nll: float
    stderr: float
    tokens: float
    sequences: int
    kind: str
    num_samples: int

    @property
    def ppl(self) -> float:
        return math.exp(self.nll)

    @property
    def bits_per_token(self) -> float:
        return self.nll / math.log(2)


class NLLAccumulator:
    """update/compute/reset with float64 state; batch size does not change the result."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.nats = torch.zeros((), dtype=torch.float64)
        self.var = torch.zeros((), dtype=torch.float64)
        self.tokens = torch.zeros((), dtype=torch.float64)
        self.sequences = 0
        self.kind: str | None = None
        self.num_samples = 1

    def update(self, result) -> None:
        if self.kind is not None and result.kind != self.kind:
            raise ValueError(f"cannot accumulate {result.kind!r} with {self.kind!r}")
        self.kind = result.kind
        self.num_samples = result.num_samples
        self.nats += result.nats.detach().double().sum().cpu()
        self.var += (result.stderr.detach().double() ** 2).sum().cpu()
        self.tokens += torch.as_tensor(result.tokens).double().sum().cpu()
        self.sequences += int(result.nats.numel())

    def compute(self) -> PerplexityResult:
        if self.tokens <= 0:
            raise ValueError("no tokens were scored")
        return PerplexityResult(
            nll=float(self.nats / self.tokens),
            stderr=float(self.var.sqrt() / self.tokens),
            tokens=float(self.tokens),
            sequences=self.sequences,
            kind=self.kind or "exact",
            num_samples=self.num_samples,
        )


@torch.no_grad()
def evaluate_nll(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    batch_size: int = 16,
    num_samples: int = 1,
    seed: int = 0,
    nll_kwargs: dict | None = None,
) -> PerplexityResult:
    """Score every row of ``input_ids`` (N, L) with ``model.nll`` and reduce token-weighted."""
    model.eval()
    acc = NLLAccumulator()
    g = torch.Generator(device=model.device).manual_seed(seed)
    for start in range(0, input_ids.shape[0], batch_size):
        x = input_ids[start : start + batch_size].to(model.device)
        m = None if attention_mask is None else attention_mask[start : start + batch_size].to(model.device)
        acc.update(model.nll(x, num_samples=num_samples, generator=g, attention_mask=m, **(nll_kwargs or {})))
    return acc.compute()
