"""Unigram entropy of generated samples (Zheng et al. 2409.02908 Sec. 6 / App. H; MDM-Prime's text metrics).

Per sample x of L token ids, with L_k the number of occurrences of id k,

    H(x) = - sum_k p_k log p_k,   p_k = L_k / L,

in nats (``base="e"``) or bits (``base=2``), over the **model's token ids** (GPT-2 BPE ids for the
paper's checkpoints; not characters, not a judge's retokenisation). A sample of L distinct tokens
has H = log L; a sample repeating one token has H = 0. Zheng et al. report the mean over samples
(about 5.6 nats for L = 1024 real text; 5.1 is a sign of fp32-truncated sampling). ``ignore_ids``
drops ids (e.g. padding) before counting and shrinks L accordingly.

:class:`MeanEntropy` accumulates per-sample entropies with float64 state (update / compute / reset,
the torchmetrics protocol through :class:`~harness.metrics.base.Accumulator`; ``state()`` is one
float64 tensor to all-reduce with a sum across ranks)
and reports the mean and its standard error.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from harness.errors import PrimebenchError
from harness.metrics.base import Accumulator

_BASES = {"e": 1.0, 2: math.log(2.0), "2": math.log(2.0)}


def log_base(base) -> float:
    if base not in _BASES:
        raise PrimebenchError(f"entropy base must be 'e' (nats) or 2 (bits), got {base!r}")
    return _BASES[base]


def units_of(base) -> str:
    """ "nats" for base e, "bits" for base 2."""
    return "nats" if log_base(base) == 1.0 else "bits"


def _as_ids(ids) -> torch.Tensor:
    t = torch.as_tensor(ids)
    if t.dim() != 1:
        raise PrimebenchError(
            f"unigram_entropy takes one sample of shape (L,), got shape {tuple(t.shape)}",
            fix="pass one row, or use MeanEntropy.update for a batch (B, L)",
        )
    if t.numel() and (t.is_floating_point() or t.is_complex()):
        raise PrimebenchError(f"token ids must be integers, got dtype {t.dtype}")
    return t.long()


def unigram_entropy(
    ids: torch.Tensor | Sequence[int], *, base: str | int = "e", ignore_ids: Iterable[int] = ()
) -> float:
    """Entropy of one sample's token-occurrence frequencies, in nats (base "e") or bits (base 2).

    ``ids``: LongTensor (L,) or list of token ids (the model's vocabulary). Ids in ``ignore_ids``
    are removed first. An empty sample (after ignoring) is an error, not 0.
    """
    scale = log_base(base)
    t = _as_ids(ids).cpu()
    ignore = torch.as_tensor(list(ignore_ids), dtype=torch.long)
    if ignore.numel():
        t = t[~torch.isin(t, ignore)]
    if t.numel() == 0:
        raise PrimebenchError(
            "unigram_entropy got a sample with no tokens (after ignore_ids)",
            fix="check the samples and the ignored ids",
        )
    counts = torch.unique(t, return_counts=True)[1].to(torch.float64)
    p = counts / counts.sum()
    return float(-(p * torch.log(p)).sum() / scale)


@dataclass(frozen=True)
class EntropyResult:
    """Mean per-sample unigram entropy, its standard error (std / sqrt(n), NaN for n < 2), the number
    of samples, and the units ("nats" or "bits")."""

    mean: float
    stderr: float
    count: int
    units: str


class MeanEntropy(Accumulator):
    """Mean per-sample unigram entropy over everything passed to ``update``; float64 state.

    ``update(tokens)`` takes (B, L) ids (or a list of id lists of any lengths). The states are the
    count, sum and sum of squares of the per-sample entropies (float64; ``state()`` is the vector
    [count, sum, sum of squares]), so the result does not depend on how samples are split into
    batches (up to float64 rounding) and every partial batch counts.
    """

    def __init__(self, *, base: str | int = "e", ignore_ids: Iterable[int] = ()):
        super().__init__()
        self.base = base
        self.units = units_of(base)
        self.ignore_ids = tuple(int(i) for i in ignore_ids)
        self.add_state("count", 0.0, dist_reduce_fx="sum")
        self.add_state("total", 0.0, dist_reduce_fx="sum")
        self.add_state("total_sq", 0.0, dist_reduce_fx="sum")

    def update(self, tokens) -> None:
        if isinstance(tokens, torch.Tensor) and tokens.dim() != 2:
            raise PrimebenchError(f"MeanEntropy.update takes samples (B, L), got shape {tuple(tokens.shape)}")
        values = torch.tensor(
            [unigram_entropy(r, base=self.base, ignore_ids=self.ignore_ids) for r in tokens], dtype=torch.float64
        )
        self.count += float(values.numel())
        self.total += values.sum()
        self.total_sq += (values * values).sum()

    def compute(self) -> EntropyResult:
        n = int(self.count)
        if n == 0:
            raise PrimebenchError("MeanEntropy.compute() before any update", fix="update with samples first")
        mean = float(self.total) / n
        if n < 2:
            return EntropyResult(mean=mean, stderr=float("nan"), count=n, units=self.units)
        var = max(float(self.total_sq) - n * mean * mean, 0.0) / (n - 1)
        return EntropyResult(mean=mean, stderr=math.sqrt(var / n), count=n, units=self.units)


__all__ = ["EntropyResult", "MeanEntropy", "unigram_entropy", "units_of"]
