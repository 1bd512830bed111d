"""Enumerable toy denoisers for checking the Prime bounds against known answers.

:class:`TableDenoiser` is an arbitrary time-independent denoiser: one random logit table entry per
whole partially masked state, so it has no structure the bounds could rely on. :func:`worked_example`
is the one-token case (``docs/bounds.md``) where the token-joint objective falls below the data
entropy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from harness.errors import PrimebenchError
from prime.subtokens import mask_id, subtoken_base

MAX_TABLE_ENTRIES = 2**22  # states * L * C logits (32 MiB in float64)


class TableDenoiser:
    """y_t (B, L, ell) -> logits (B, L, C) looked up from a random table over all states.

    The state is the whole partially masked sequence, one of (base + 1)^(L * ell) (each sub-token is
    a digit or the mask id ``base``); each state gets L * C independent N(0, scale^2) logits. The
    bounds restrict these to V(y_t^i) themselves.
    """

    def __init__(
        self,
        C: int,
        ell: int,
        L: int,
        *,
        generator: torch.Generator,
        scale: float = 1.0,
        dtype: torch.dtype = torch.float64,
    ):
        self.C, self.ell, self.L = C, ell, L
        self.base = subtoken_base(C, ell)
        symbols = self.base + 1
        num_states = symbols ** (L * ell)
        entries = num_states * L * C
        if entries > MAX_TABLE_ENTRIES:
            raise PrimebenchError(
                f"TableDenoiser(C={C}, ell={ell}, L={L}) needs (base+1)^(L*ell) = {symbols}^{L * ell}"
                f" = {num_states} states * L * C = {entries} logits, over the limit {MAX_TABLE_ENTRIES}",
                fix="use a smaller C, ell or L",
            )
        self.table = scale * torch.randn(
            num_states, L, C, generator=generator, dtype=dtype, device=generator.device
        )  # (states, L, C)
        self._place = symbols ** torch.arange(L * ell, device=generator.device)  # (L * ell,)

    def __call__(self, y_t: torch.Tensor) -> torch.Tensor:
        if tuple(y_t.shape[1:]) != (self.L, self.ell):
            raise PrimebenchError(
                f"y_t must have shape (B, {self.L}, {self.ell}), got {tuple(y_t.shape)}",
                fix="pass sub-tokens encoded with this denoiser's L and ell",
            )
        if y_t.numel() and (int(y_t.min()) < 0 or int(y_t.max()) > mask_id(self.base)):
            raise PrimebenchError(
                f"y_t values must lie in [0, {mask_id(self.base)}] (mask id included)",
                fix="encode with prime.subtokens.encode and mask with mask_id(base)",
            )
        flat = y_t.reshape(y_t.shape[0], -1).to(self._place.device)
        return self.table[(flat * self._place).sum(-1)].to(y_t.device)


class ConstantDenoiser:
    """y_t (B, L, ell) -> the same logits (C,) at every position, whatever the state.

    With logits = log p, the restriction to V(y_t^i) turns this into the exact conditional
    p(x | unmasked sub-tokens of y_t^i) of a data distribution p over single tokens.
    """

    def __init__(self, logits: torch.Tensor):
        self.logits = logits  # (C,)

    def __call__(self, y_t: torch.Tensor) -> torch.Tensor:
        B, L = y_t.shape[:2]
        return self.logits.to(y_t.device).expand(B, L, -1)


@dataclass(frozen=True)
class WorkedExample:
    """One token, C classes, ell sub-tokens in base ``base``, data ``p``, ideal ``denoiser``.

    ``x0`` (C, 1) lists every token once; weight per-sequence results by ``p`` to get expectations
    under the data. Reference values (nats): entropy 1.0182 = exact NLL = sub-token bound;
    token-joint objective 0.8342 = H - I(Y^1; Y^2) / 2.
    """

    C: int
    ell: int
    base: int
    p: torch.Tensor  # (C,) float64
    denoiser: ConstantDenoiser
    x0: torch.Tensor  # (C, 1) int64


def worked_example() -> WorkedExample:
    """The worked example of ``docs/bounds.md``: C = 4, ell = 2, b = 2, p = (.45, .05, .05, .45), true conditionals."""
    p = torch.tensor([0.45, 0.05, 0.05, 0.45], dtype=torch.float64)
    return WorkedExample(
        C=4, ell=2, base=subtoken_base(4, 2), p=p, denoiser=ConstantDenoiser(torch.log(p)), x0=torch.arange(4)[:, None]
    )


def data_entropy(p: torch.Tensor) -> float:
    """Entropy -sum p log p in nats of a probability vector (0 log 0 = 0)."""
    if (p < 0).any() or not math.isclose(float(p.sum()), 1.0, abs_tol=1e-9):
        raise PrimebenchError("p must be a probability vector (non-negative, summing to 1)", fix="normalise p")
    p = p.double()
    logs = torch.where(p > 0, torch.log(p), torch.zeros_like(p))
    return float(-(p * logs).sum())
