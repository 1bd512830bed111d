"""The typed NLL every model family returns: nats per sequence, tokens scored, and what the number
is (``KINDS``: exact, bound, paper objective, estimate, and exact-policy: the exact likelihood of a
masked model's sampler under a deterministic unmasking policy, :mod:`harness.evaluation.duel`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

Kind = Literal["exact", "bound", "paper-objective", "estimate", "exact-policy"]
KINDS: tuple[str, ...] = ("exact", "bound", "paper-objective", "estimate", "exact-policy")


@dataclass(frozen=True)
class NLL:
    """Negative log-likelihood of a batch of sequences, in nats.

    ``nats`` is per sequence, shape (B,). ``tokens`` (B,) is the number of scored tokens per sequence
    (the denominator of a per-token NLL; the ARM scores L - 1 targets per block, diffusion models L).
    ``stderr`` is the Monte-Carlo standard error of each entry of ``nats`` (zeros when exact or
    computed by enumeration). ``kind`` says whether the number is the exact likelihood, a valid
    upper bound on it, the published objective (not a bound in general), or an estimate.
    """

    nats: torch.Tensor
    tokens: torch.Tensor
    kind: Kind
    stderr: torch.Tensor
    num_samples: int = 1

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")

    @property
    def per_token(self) -> torch.Tensor:
        """Nats per scored token, per sequence, shape (B,)."""
        return self.nats / self.tokens
