"""DUEL: the exact likelihood of a masked model sampled under a deterministic unmasking policy.

A masked model and a policy together define a sampler: start from the all-masked row; at each step
the policy looks at the current state (the revealed tokens and the model's distributions at the
masked positions, never at the tokens still hidden) and picks the positions to reveal, and the
sampler draws each picked token from the model's conditional p_theta(x^i | state). Because the
picks depend on the state alone, a row x is reached along exactly one path (run the policy while
revealing x's own tokens), so the sampler's probability of x is the product of the conditionals
along that path:

    -log p_policy(x) = sum over steps s, over picked positions i: -log p_theta(x^i | x revealed before s)

This is an exact number (kind ``exact-policy``), and it sums to one over all rows, but it is the
likelihood of the policy's sampler, not of the model that the ELBO bounds; tables keep it in its
own column. Averaged over uniformly random orders (one token per step) it is the any-order
autoregressive form of the masked model's NELBO: for a network that does not read the time, that
average equals the continuous-time NELBO exactly (tested by enumeration). An "oracle" order, chosen
with the ground-truth tokens, is not a likelihood (its numbers do not sum to one) and is refused.

Policies (:data:`POLICIES`), each over the candidate positions (still masked, scored, inside the
current block): ``left-to-right`` (the leftmost), ``confidence`` (the largest max_c p(c)),
``margin`` (the largest gap between the two most probable tokens) and ``entropy`` (the smallest
entropy). :class:`Policy` adds ``tokens`` per step (fewer forward passes: a row of n scored tokens
costs ceil(n / tokens) of them per block) and ``block``: the candidates are the masked positions of
the leftmost block of that many tokens that still has one (the semi-autoregressive variant). A
family that samples block by block (BD3-LM) is always scored inside its own blocks. Time-
conditioned networks get t = the fraction of the row still masked, as the MaskGIT sampler does.
Ties go to the leftmost position.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from harness.errors import InputError
from harness.models.base import Estimator
from harness.nll import NLL

#: the estimator ``eval ppl --estimator duel`` adds to a masked family's own ones
DUEL = Estimator(
    "duel",
    "exact-policy",
    "_duel",
    "DUEL: exact -log p of the sampler that reveals tokens in the unmasking policy's order",
)

POLICIES = ("left-to-right", "confidence", "margin", "entropy")
#: policies that read the ground truth: not likelihoods, refused with this reason
REFUSED = {
    "oracle": "the oracle ordering picks positions with the ground-truth tokens, so its numbers do not sum to one "
    "over rows: it is not a likelihood of any sampler"
}


@dataclass(frozen=True)
class Policy:
    """A deterministic unmasking policy: its ``name`` (:data:`POLICIES`), ``tokens`` revealed per
    step and ``block`` (None: the whole row; k: the leftmost unfinished block of k tokens)."""

    name: str = "confidence"
    tokens: int = 1
    block: int | None = None

    def check(self) -> Policy:
        if self.name in REFUSED:
            raise InputError(f"--policy {self.name}: {REFUSED[self.name]}", fix=f"use one of {list(POLICIES)}")
        if self.name not in POLICIES:
            raise InputError(f"unknown unmasking policy {self.name!r}", fix=f"use one of {list(POLICIES)}")
        if self.tokens < 1:
            raise InputError(f"--policy-tokens must be >= 1, got {self.tokens}", fix="pass a positive count")
        if self.block is not None and self.block < 1:
            raise InputError(f"--policy-block must be >= 1, got {self.block}", fix="pass a positive block size")
        return self

    def protocol(self, model) -> dict:
        """What a record says about the policy (the block actually used included)."""
        return {"name": self.name, "tokens_per_step": self.tokens, "block": effective_block(model, self)}


def check_model(model) -> None:
    """DUEL applies to the masked families (absorbing forward process); a clear error otherwise."""
    if model.forward_process != "absorbing":
        what = "its NLL is already exact" if model.forward_process == "none" else "no position is ever masked"
        raise InputError(
            f"--estimator duel applies to masked-diffusion checkpoints (absorbing forward process); this "
            f"{model.family} model's process is {model.forward_process!r}: {what}",
            fix="use the family's own estimators (--estimator default or both)",
        )


def effective_block(model, policy: Policy) -> int | None:
    """The block the policy picks inside: the family's sampling block (BD3-LM), which a ``--policy-block``
    must divide, else the policy's own (None: the whole row)."""
    own = model.sampling_block_size
    if own is None:
        return policy.block
    if policy.block is not None and own % policy.block:
        raise InputError(
            f"--policy-block {policy.block} does not divide the model's block size {own}: this family samples "
            "block by block, and the policy's blocks must nest in its blocks",
            fix=f"pass a divisor of {own}, or leave --policy-block unset",
        )
    return policy.block or own


def policy_scores(name: str, log_p: torch.Tensor) -> torch.Tensor:
    """(B, L, C) log-probabilities -> (B, L) scores, highest first, for policy ``name``."""
    if name == "left-to-right":
        B, L = log_p.shape[:2]
        return -torch.arange(L, device=log_p.device, dtype=torch.float64).expand(B, L)
    if name == "confidence":
        return log_p.max(-1).values.double()
    if name == "margin":
        top = log_p.topk(2, dim=-1).values.exp().double()
        return top[..., 0] - top[..., 1]
    if name == "entropy":
        p = log_p.double().exp()
        return (p * log_p.double()).nan_to_num(0.0).sum(-1)  # -H: the smallest entropy first
    raise InputError(f"unknown unmasking policy {name!r}", fix=f"use one of {list(POLICIES)}")


def _pick(scores: torch.Tensor, candidates: torch.Tensor, tokens: int) -> torch.Tensor:
    """(B, L) bool: per row, the ``tokens`` candidates of highest score (ties: leftmost; fewer when
    fewer are left)."""
    L = scores.shape[1]
    # a stable sort on the score, with the position as the tie-break, keeps ties leftmost
    order = torch.sort(scores.masked_fill(~candidates, -math.inf), dim=-1, descending=True, stable=True).indices
    rank = torch.empty_like(order).scatter_(-1, order, torch.arange(L, device=order.device).expand_as(order))
    return candidates & (rank < tokens)


def _candidates(masked: torch.Tensor, block: int | None) -> torch.Tensor:
    """(B, L) bool: the masked positions inside each row's leftmost block that still has one."""
    if block is None:
        return masked
    L = masked.shape[1]
    pos = torch.arange(L, device=masked.device)
    first = torch.where(masked, pos, L).min(-1, keepdim=True).values  # (B, 1): L when none is left
    return masked & (pos // block == first // block)


@torch.no_grad()
def duel_nll(
    model,
    x0: torch.Tensor,
    policy: Policy,
    *,
    attention_mask: torch.Tensor | None = None,
    corruptible: torch.Tensor | None = None,
    order: torch.Tensor | None = None,
) -> tuple[NLL, torch.Tensor]:
    """DUEL's exact -log p (nats per row, (B,)) of the ``corruptible`` real tokens of ``x0`` (B, L)
    under the sampler that reveals them in ``policy``'s order; the other positions are context.

    ``order`` (B, L) (tests and the any-order identity): a fixed reveal rank per position, lowest
    first, instead of the policy's scores (one token per step). Returns the NLL and the forward
    passes each row needed (B,) (the batch runs until its slowest row is done).
    """
    check_model(model)
    model.check_tokens(x0)
    block = effective_block(model, policy.check())
    scored = model.scored_tokens(x0, attention_mask, corruptible)
    units = model.units(x0)
    masked = scored.clone()
    nats = torch.zeros(x0.shape[0], dtype=torch.float64, device=x0.device)
    L = x0.shape[1]
    passes = torch.zeros(x0.shape[0], dtype=torch.long, device=x0.device)
    while bool(masked.any()):
        z = torch.where(model.unit_mask(masked), model.mask_id, units)
        t = masked.sum(-1).to(torch.float32) / L
        log_p = model.log_probs(z, t, attention_mask, x0)
        passes += masked.any(-1)
        candidates = _candidates(masked, block)
        if order is not None:
            pick = _pick(-order.double(), candidates, 1)
        else:
            pick = _pick(policy_scores(policy.name, log_p), candidates, policy.tokens)
        true = log_p.gather(-1, x0[..., None]).squeeze(-1).double()
        nats -= torch.where(pick, true, torch.zeros_like(true)).sum(-1)
        masked &= ~pick
    nll = NLL(nats=nats, tokens=scored.sum(-1).double(), kind="exact-policy", stderr=torch.zeros_like(nats))
    return nll, passes


__all__ = ["DUEL", "POLICIES", "REFUSED", "Policy", "check_model", "duel_nll", "effective_block", "policy_scores"]
