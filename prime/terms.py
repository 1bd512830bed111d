"""What MDM-Prime scores for one corruption: the restricted joint, sub-token marginals and the two NLL terms.

The building blocks that :mod:`prime.bounds` (by enumeration and Monte Carlo) and the Prime family
(:class:`prime.model.Prime`, on a real network) share, so that both compute the same numbers. A
state y_t (B, L, ell) holds ell digits per token in base ``base``, the mask id being ``base``;
logits (B, L, C) are the network's raw output over the C classes. With carry-over the joint over a
token's digits is the softmax of the logits restricted to V(y_t^i), the valid codes consistent with
its revealed digits (MDM-Prime's parameterization). ``prime.bounds`` re-exports every name here.
"""

from __future__ import annotations

import torch

from harness.errors import PrimebenchError
from harness.graph import tracked
from prime.subtokens import digit_table, mask_id


def restricted_log_probs(
    logits: torch.Tensor, y_t: torch.Tensor, *, C: int, base: int, ell: int, carry_over: bool = True
) -> torch.Tensor:
    """(B, L, C) logits, (B, L, ell) y_t -> (B, L, C) log p_theta(x^i = c | y_t), same dtype.

    carry_over=True (MDM-Prime's parameterization): logits outside V(y_t^i) are set to -inf before
    log_softmax, so unmasked sub-tokens are copied and invalid codes get nothing; a token with all
    sub-tokens unmasked has log-prob exactly 0 on its code. carry_over=False: plain log_softmax over
    all C classes (the paper's ablation).
    """
    if logits.shape[-1] != C or logits.shape[:-1] != y_t.shape[:-1]:
        raise PrimebenchError(
            f"logits {tuple(logits.shape)} and y_t {tuple(y_t.shape)} do not match (B, L, C={C}) and (B, L, ell={ell})",
            fix="the denoiser must return one logit per class per token",
        )
    if not carry_over:
        return torch.log_softmax(logits, dim=-1)
    return torch.log_softmax(restricted_padded_logits(logits, y_t, C=C, base=base, ell=ell)[..., :C], dim=-1)


def _check_nonempty(y_t: torch.Tensor, C: int, base: int, ell: int) -> None:
    """V(y_t^i) is empty exactly when the smallest consistent code (masked digits 0) is >= C."""
    weights = base ** torch.arange(ell - 1, -1, -1, device=y_t.device)
    smallest = (torch.where(y_t == mask_id(base), torch.zeros_like(y_t), y_t) * weights).sum(-1)
    if bool((smallest >= C).any()):
        raise PrimebenchError(
            "some token's unmasked sub-tokens match no valid code (< C), so V(y_t^i) is empty",
            fix="y_t must come from masking a valid encoding; check C, base and ell",
        )


def carry_over_bias(y_t: torch.Tensor, *, base: int, ell: int, dtype=torch.float32) -> torch.Tensor:
    """(..., ell) sub-tokens -> (..., base**ell) additive 0 / -inf over all codes in digit order:
    0 where every unmasked digit of the code equals y_t's (V(y_t^i) before the C cut). Built as an
    outer sum of ell per-digit vectors, so no (..., C, ell) comparison is ever materialised."""
    values = torch.arange(base, device=y_t.device)
    masked = y_t == mask_id(base)  # (..., ell)
    ok = masked[..., None] | (y_t[..., None] == values)  # (..., ell, base)
    per_digit = torch.zeros(ok.shape, dtype=dtype, device=y_t.device).masked_fill_(~ok, float("-inf"))
    bias = per_digit[..., 0, :]
    for j in range(1, ell):
        bias = (bias[..., :, None] + per_digit[..., j, None, :]).flatten(-2)
    return bias


def restricted_padded_logits(
    logits: torch.Tensor, y_t: torch.Tensor, *, C: int, base: int, ell: int, carry_over: bool = True
) -> torch.Tensor:
    """(..., C) logits -> (..., base**ell): codes >= C at -inf and, with carry-over, the codes outside
    V(y_t^i) too. Viewed as (..., base, ..., base) its axes are the ell digits, most significant first."""
    pad = base**ell - C
    x = torch.nn.functional.pad(logits, (0, pad), value=float("-inf")) if pad else logits.clone()
    if carry_over:
        _check_nonempty(y_t, C, base, ell)
        x += carry_over_bias(y_t, base=base, ell=ell, dtype=x.dtype)
    return x


def digit_sums(e: torch.Tensor, *, base: int, ell: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(..., base**ell) non-negative masses -> (per-digit sums (..., ell, base), total (..., 1)).

    sums[..., j, v] is the mass of the codes whose digit j is v. Computed by reshapes and sums
    only: the sums over the trailing digits are shared, so the work is about two passes over e."""
    lead = e.shape[:-1]
    sums = [None] * ell
    rest = e  # the mass summed over digits k + 1 .. ell - 1: (..., base**(k + 1))
    for k in range(ell - 1, -1, -1):
        grid = rest.reshape(*lead, base**k, base)
        sums[k] = grid.sum(-2)
        rest = grid.sum(-1)
    return torch.stack(sums, dim=-2), rest


def fused_prime_terms(
    logits: torch.Tensor,
    y_t: torch.Tensor,
    x0: torch.Tensor,
    y0: torch.Tensor,
    masked: torch.Tensor,
    *,
    C: int,
    base: int,
    ell: int,
    carry_over: bool,
    estimators,
    joint_scored: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """Both Prime NLL terms from one set of logits, (B, L) nats each, in ``estimators`` order.

    ``subtoken``: the sum over masked sub-tokens of -log of the restricted joint's marginal (as
    :func:`subtoken_nll_terms`); ``token_joint``: -log p(x_0^i | y_t) where ``joint_scored`` (B, L)
    (default: tokens with a masked sub-token), as :func:`token_joint_nll_terms`. One exp over
    (B, L, base**ell) and reshaped sums replace the log-softmax and the scatters; a marginal that
    underflows float32 (< e^-87 of the largest allowed code) is recomputed exactly with logsumexp.
    Differentiable: training minimises these terms (the ``bound`` objective), and no gradient is NaN.
    """
    x = restricted_padded_logits(logits, y_t, C=C, base=base, ell=ell, carry_over=carry_over)
    # finite: V(y_t^i) is never empty; detached, as the terms do not depend on it (training's backward)
    top = x.detach().amax(-1, keepdim=True)
    e = x - top
    e = torch.exp(e) if tracked(e) else e.exp_()  # evaluation: no second copy
    sums, total = digit_sums(e, base=base, ell=ell) if "subtoken" in estimators else (None, e.sum(-1, keepdim=True))
    out = []
    for name in estimators:
        if name == "token_joint":
            true = (x.gather(-1, x0[..., None]) - top - torch.log(total)).squeeze(-1)
            scored = masked.any(-1) if joint_scored is None else joint_scored
            out.append(torch.where(scored, -true, torch.zeros_like(true)))
        elif name == "subtoken":
            true = sums.gather(-1, y0[..., None]).squeeze(-1)  # (B, L, ell)
            tiny = torch.finfo(true.dtype).tiny
            # a mass below the smallest normal number has lost precision (or is 0): recomputed below;
            # the floor keeps log and its gradient finite there
            log_marg = torch.log(true.clamp_min(tiny)) - torch.log(total)
            under = masked & (true < tiny)
            if bool(under.any()):
                rows = under.any(-1)
                log_marg = log_marg.index_put((rows,), true_digit_log_marginals(x[rows], y0[rows], base=base, ell=ell))
            out.append(torch.where(masked, -log_marg, torch.zeros_like(log_marg)).sum(-1))
        else:
            raise ValueError(f"unknown estimator {name!r}: use 'subtoken' (bound) or 'token_joint' (paper objective)")
    return out


def true_digit_log_marginals(x: torch.Tensor, y0: torch.Tensor, *, base: int, ell: int) -> torch.Tensor:
    """(N, base**ell) padded restricted logits, (N, ell) true digits -> (N, ell) log p(y^j = y0^j | y_t),
    by logsumexp over the codes whose digit j is y0^j, in log space (no underflow).

    Only the true digit's marginal is formed: its codes include x_0 itself, which is finite, so the
    logsumexp and its gradient are finite, where the marginals of values no code in V(y_t) spells
    (all -inf) would give NaN gradients (:func:`subtoken_log_marginals` forms those too)."""
    digits = digit_table(base**ell, base, ell, device=x.device)  # (base**ell, ell), cached
    keep = digits[None] == y0[:, None, :]  # (N, base**ell, ell)
    picked = x[..., None].masked_fill(~keep, float("-inf"))
    return torch.logsumexp(picked, dim=1) - torch.logsumexp(x, dim=-1, keepdim=True)


def subtoken_log_marginals(log_probs: torch.Tensor, *, base: int, ell: int) -> torch.Tensor:
    """(B, L, C) token log-probs -> (B, L, ell, base) log p(y^{i,j} = v | y_t).

    log p(y^{i,j} = v) = logsumexp over classes c with digit_j(c) = v of log_probs[..., c]. The C
    values are padded with -inf to base**ell codes and viewed as (..., base, ..., base), one axis per
    digit (most significant first); the marginal of digit j is a logsumexp over the other axes, so
    no scatter and nothing larger than (..., base**ell) is formed. No value underflows to -inf
    unless all its classes are -inf; values that no class takes (a high leading digit) get -inf.
    Input of size base**ell (already padded) is accepted as is.
    """
    C = log_probs.shape[-1]
    pad = base**ell - C
    x = torch.nn.functional.pad(log_probs, (0, pad), value=float("-inf")) if pad else log_probs
    grid = x.reshape(*x.shape[:-1], *([base] * ell))
    lead = x.dim() - 1
    axes = list(range(lead, lead + ell))
    out = [torch.logsumexp(grid, dim=[a for a in axes if a != lead + j]) if ell > 1 else grid for j in range(ell)]
    return torch.stack(out, dim=-2)


def subtoken_nll_terms(
    log_probs: torch.Tensor, y0: torch.Tensor, masked: torch.Tensor, base: int, ell: int
) -> torch.Tensor:
    """(B, L) nats: sum over masked sub-tokens (i, j) of -log p(y_0^{i,j} | y_t) (marginals).

    ``y0`` (B, L, ell) are the true digits, ``masked`` (B, L, ell) bool marks the masked units.
    Unmasked units contribute exactly 0.
    """
    log_marg = subtoken_log_marginals(log_probs, base=base, ell=ell)  # (B, L, ell, base)
    true = log_marg.gather(-1, y0[..., None]).squeeze(-1)  # (B, L, ell)
    return torch.where(masked, -true, torch.zeros_like(true)).sum(-1)


def token_joint_nll_terms(log_probs: torch.Tensor, x0: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """(B, L) nats: -log p(x_0^i | y_t) for tokens with >= 1 masked sub-token, 0 otherwise."""
    true = log_probs.gather(-1, x0[..., None]).squeeze(-1)  # (B, L)
    return torch.where(masked.any(-1), -true, torch.zeros_like(true))


__all__ = [
    "carry_over_bias",
    "digit_sums",
    "fused_prime_terms",
    "restricted_log_probs",
    "restricted_padded_logits",
    "subtoken_log_marginals",
    "subtoken_nll_terms",
    "token_joint_nll_terms",
    "true_digit_log_marginals",
]
