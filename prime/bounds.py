"""Likelihood, the valid sub-token bound, and the paper's token-joint objective for MDM-Prime.

Why two objectives (``docs/bounds.md`` works an example): the paper's L_vb scores each token with the
*joint* p(y_0^i | y_t) of its ell sub-tokens, but the continuous-time sampler reveals one sub-token at
a time, each drawn from the *marginal* of that joint. The valid upper bound on -log p(x_0) therefore
uses sub-token marginals. This module computes, per sequence and in nats:

* :func:`exact_nll`: -log p(x_0) under the sampler, by enumeration (tiny L * ell only);
* :func:`subtoken_bound`: the valid continuous-time bound (marginals);
* :func:`token_joint_objective`: the paper's L_vb (joints); not a bound when sub-tokens depend.

The per-corruption building blocks (restricted joint, sub-token marginals, the two NLL terms) live in
:mod:`prime.terms`, shared with the Prime family, and are re-exported here.

Notation. N = L * ell sub-token "units"; unit u = i * ell + j (token i, digit j, as the official code
flattens). A mask pattern S is the set of masked units and y_0^S is y_0 with the units of S set to
the mask id ``base``. The denoiser maps y_t (B, L, ell) to raw logits (B, L, C) and ignores time, so
every quantity depends on y_t only. The restriction to V(y_t^i) (carry-over) is applied here.

Pattern weights. Each unit is masked independently with probability 1 - alpha_t, so
P(S | t) = (1 - alpha_t)^n alpha_t^(N - n) with n = |S|. The continuous-time bound is
int_0^1 (-alpha_t') / (1 - alpha_t) E_{S|t}[g(S)] dt; substituting a = alpha_t (any schedule):

    w(S) = int_0^1 (1 - a)^(n-1) a^(N-n) da = B(n, N - n + 1) = 1 / (n * binom(N, n)),   n >= 1,

so the bound is sum_S w(S) g(S). Equivalently: draw a uniformly random reveal order; while n units
are masked the masked set is a uniform n-subset and the revealed unit a uniform member of it, so
sum_S w(S) sum_{u in S} h(S, u) = E_order[sum over steps of h]. With h = -log marginal this is
the order-average of the sampler's log-loss, an upper bound on -log E_order[product of marginals]
(Jensen), and the latter is exactly -log p(x_0). With ell = 1 (base = C, mask id C) marginal and
joint coincide: both objectives are MDLM's NELBO and exact_nll is MDLM's any-order likelihood.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch

from harness.diffusion import check_time_sampler, monte_carlo_nelbo
from harness.errors import PrimebenchError
from harness.processes import Absorbing
from harness.schedules import get_schedule
from prime.subtokens import encode, mask_id, subtoken_base
from prime.terms import (  # noqa: F401 - re-exported: the building blocks' historical home
    carry_over_bias,
    digit_sums,
    fused_prime_terms,
    restricted_log_probs,
    restricted_padded_logits,
    subtoken_log_marginals,
    subtoken_nll_terms,
    token_joint_nll_terms,
)

Denoiser = Callable[[torch.Tensor], torch.Tensor]  # y_t (B, L, ell) -> logits (B, L, C)

MAX_ENUMERATED_UNITS = 16  # exact enumeration evaluates the denoiser on 2^(L*ell) states


class MonteCarloEstimate(NamedTuple):
    """A Monte-Carlo estimate per sequence: ``value`` (B,) nats and its standard error ``stderr``."""

    value: torch.Tensor
    stderr: torch.Tensor


# --------------------------------------------------------------------------------------------
# Scoring a batch of mask patterns.
# --------------------------------------------------------------------------------------------


class _Scores(NamedTuple):
    subtoken: torch.Tensor  # (B, S) sum over tokens of subtoken_nll_terms
    token_joint: torch.Tensor  # (B, S) sum over tokens of token_joint_nll_terms
    unit_log_marg: torch.Tensor  # (B, S, N) log marginal of the true digit of every unit


def _check_x0(x0: torch.Tensor, C: int, ell: int) -> int:
    """Validate x0 (B, L) ids in [0, C) and return the base."""
    base = subtoken_base(C, ell)
    if x0.dim() != 2 or x0.dtype != torch.long:
        raise PrimebenchError(
            f"x0 must be an int64 tensor (B, L), got {x0.dtype} {tuple(x0.shape)}", fix="pass token ids of shape (B, L)"
        )
    if x0.numel() and (int(x0.min()) < 0 or int(x0.max()) >= C):
        raise PrimebenchError(
            f"x0 ids must lie in [0, C={C}), got [{int(x0.min())}, {int(x0.max())}]",
            fix="check C against the tokenizer's vocabulary size",
        )
    return base


def _score_masks(
    denoiser: Denoiser, x0: torch.Tensor, masked: torch.Tensor, *, C: int, ell: int, states_per_call: int
) -> _Scores:
    """Score mask patterns ``masked`` (B or 1, S, L, ell) of every sequence of x0 (B, L)."""
    base = subtoken_base(C, ell)
    B, L = x0.shape
    S = masked.shape[1]
    masked = masked.expand(B, S, L, ell)
    y0 = encode(x0, base, ell)  # (B, L, ell)
    chunk = max(1, states_per_call // max(B, 1))
    parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    for start in range(0, S, chunk):
        m = masked[:, start : start + chunk].reshape(-1, L, ell)  # (B * s, L, ell)
        s = m.shape[0] // B
        y0_rep = y0.repeat_interleave(s, dim=0)
        x0_rep = x0.repeat_interleave(s, dim=0)
        y_t = torch.where(m, torch.full_like(y0_rep, mask_id(base)), y0_rep)
        log_probs = restricted_log_probs(denoiser(y_t), y_t, C=C, base=base, ell=ell)
        sub = subtoken_nll_terms(log_probs, y0_rep, m, base, ell).sum(-1)
        tok = token_joint_nll_terms(log_probs, x0_rep, m).sum(-1)
        marg = subtoken_log_marginals(log_probs, base=base, ell=ell)
        unit = marg.gather(-1, y0_rep[..., None]).reshape(B, s, L * ell)
        parts.append((sub.reshape(B, s), tok.reshape(B, s), unit))
    return _Scores(*(torch.cat(p, dim=1) for p in zip(*parts)))


def _all_patterns(L: int, ell: int, device: torch.device, what: str) -> torch.Tensor:
    """(1, 2^N, L, ell) bool: pattern number m masks unit u iff bit u of m is set."""
    N = L * ell
    if N > MAX_ENUMERATED_UNITS:
        raise PrimebenchError(
            f"{what} enumerates 2^(L*ell) mask patterns; L*ell = {L}*{ell} = {N} exceeds the limit "
            f"of {MAX_ENUMERATED_UNITS} units",
            fix="use a shorter sequence or exact=False (Monte Carlo)",
        )
    m = torch.arange(2**N, device=device)
    bits = (m[:, None] >> torch.arange(N, device=device)) & 1
    return bits.bool().reshape(1, 2**N, L, ell)


def pattern_weights(N: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(2^N,) w(S) = 1 / (n * binom(N, n)) for n = |S| >= 1, and 0 for the empty pattern."""
    per_n = [0.0] + [1.0 / (n * math.comb(N, n)) for n in range(1, N + 1)]
    sizes = ((torch.arange(2**N)[:, None] >> torch.arange(N)) & 1).sum(-1)
    return torch.tensor(per_n, dtype=dtype)[sizes].to(device)


# --------------------------------------------------------------------------------------------
# Public objectives.
# --------------------------------------------------------------------------------------------


def exact_nll(denoiser: Denoiser, x0: torch.Tensor, *, C: int, ell: int, states_per_call: int = 4096) -> torch.Tensor:
    """(B,) exact -log p(x_0) in nats per sequence under the continuous-time Prime sampler.

    The sampler reveals one sub-token at a time in uniformly random order, drawing it from the
    marginal of the restricted joint given the current state, so p(y_0) is the average over the
    N! orders of the product of marginals. With f(R) the probability of having revealed the units
    of R with their true values, summed over orders and divided as below:

        f(empty) = 1,   f(R) = sum_{u in R} f(R \\ u) * marg(y_0^u | y_0 revealed on R \\ u) / (N - |R| + 1)

    (the next unit is uniform over the N - |R| + 1 masked ones), and p(y_0) = f(all units). Runs
    in log space over all 2^N states, evaluating the denoiser on them in batches of
    ``states_per_call`` rows; N = L * ell <= 16.
    """
    _check_x0(x0, C, ell)
    B, L = x0.shape
    N = L * ell
    patterns = _all_patterns(L, ell, x0.device, "exact_nll")
    unit = _score_masks(
        denoiser, x0, patterns, C=C, ell=ell, states_per_call=states_per_call
    ).unit_log_marg  # (B, 2^N, N)
    full = 2**N - 1
    revealed = torch.arange(2**N, device=x0.device)
    size = ((revealed[:, None] >> torch.arange(N, device=x0.device)) & 1).sum(-1)
    log_f = torch.full((B, 2**N), float("-inf"), dtype=unit.dtype, device=x0.device)
    log_f[:, 0] = 0.0
    for k in range(1, N + 1):
        R = revealed[size == k]  # revealed sets with k units
        terms = []
        for u in range(N):
            has_u = ((R >> u) & 1).bool()
            prev = R & ~(1 << u)
            term = log_f[:, prev] + unit[:, full ^ prev, u]  # state before u: masked = full ^ prev
            terms.append(torch.where(has_u, term, torch.full_like(term, float("-inf"))))
        log_f[:, R] = torch.logsumexp(torch.stack(terms, -1), dim=-1) - math.log(N - k + 1)
    return -log_f[:, full]


def subtoken_bound(
    denoiser: Denoiser,
    x0: torch.Tensor,
    *,
    C: int,
    ell: int,
    exact: bool = True,
    num_samples: int | None = None,
    generator: torch.Generator | None = None,
    time_sampler: str = "n",
    states_per_call: int = 4096,
):
    """Valid upper bound on -log p(x_0), nats per sequence, using sub-token marginals.

    exact=True: (B,) sum_S w(S) sum_{u in S} -log marg(y_0^u | y_0^S), w(S) = 1/(n binom(N, n)),
    over all 2^N patterns (N = L * ell <= 16). exact=False: a :class:`MonteCarloEstimate`
    (value, stderr), see :func:`_monte_carlo` for the two time samplers.
    """
    return _objective(
        "subtoken",
        denoiser,
        x0,
        C=C,
        ell=ell,
        exact=exact,
        num_samples=num_samples,
        generator=generator,
        time_sampler=time_sampler,
        states_per_call=states_per_call,
    )


def token_joint_objective(
    denoiser: Denoiser,
    x0: torch.Tensor,
    *,
    C: int,
    ell: int,
    exact: bool = True,
    num_samples: int | None = None,
    generator: torch.Generator | None = None,
    time_sampler: str = "n",
    states_per_call: int = 4096,
):
    """The paper's L_vb in nats per sequence: NOT a bound when sub-tokens are dependent.

    exact=True: (B,) sum_S w(S) sum_{tokens i with a masked sub-token in S} -log p(x_0^i | y_0^S).
    For the ideal model with ell = 2 it falls short of the entropy by I(Y^1; Y^2) / 2 per token.
    exact=False: a :class:`MonteCarloEstimate` (value, stderr).
    """
    return _objective(
        "token_joint",
        denoiser,
        x0,
        C=C,
        ell=ell,
        exact=exact,
        num_samples=num_samples,
        generator=generator,
        time_sampler=time_sampler,
        states_per_call=states_per_call,
    )


def _objective(
    which: str,
    denoiser: Denoiser,
    x0: torch.Tensor,
    *,
    C: int,
    ell: int,
    exact: bool,
    num_samples: int | None,
    generator: torch.Generator | None,
    time_sampler: str,
    states_per_call: int,
):
    _check_x0(x0, C, ell)
    if exact:
        if num_samples is not None:
            raise PrimebenchError(
                f"num_samples={num_samples} was given with exact=True",
                fix="pass exact=False for a Monte-Carlo estimate",
            )
        B, L = x0.shape
        patterns = _all_patterns(L, ell, x0.device, f"exact {which} objective")
        scores = _score_masks(denoiser, x0, patterns, C=C, ell=ell, states_per_call=states_per_call)
        g = scores.subtoken if which == "subtoken" else scores.token_joint  # (B, 2^N)
        return (g * pattern_weights(L * ell, g.dtype, g.device)).sum(-1)
    return _monte_carlo(
        which,
        denoiser,
        x0,
        C=C,
        ell=ell,
        num_samples=num_samples,
        generator=generator,
        time_sampler=time_sampler,
        states_per_call=states_per_call,
    )


def _monte_carlo(
    which: str,
    denoiser: Denoiser,
    x0: torch.Tensor,
    *,
    C: int,
    ell: int,
    num_samples: int | None,
    generator: torch.Generator | None,
    time_sampler: str,
    states_per_call: int,
) -> MonteCarloEstimate:
    """Estimate sum_S w(S) g(S) per sequence with the families' estimator
    (:func:`harness.diffusion.monte_carlo_nelbo`), K draws stratified over K.

    "n": n ~ U{1..N} units masked exactly, estimate N g(S) / n; with P(S) = 1 / (N binom(N, n)) its
    expectation is sum_S g(S) / (n binom(N, n)) = sum_S w(S) g(S): unbiased, no truncation.
    "t": MDLM's protocol with the linear schedule: t in [eps, 1], each unit masked with probability
    t, estimate g(S) / t; since int_0^1 t^(n-1) (1 - t)^(N-n) dt = w(S) it is unbiased for eps = 0,
    and the truncation at eps = 1e-3 biases it by O(eps), as in MDLM.
    ``states_per_call`` is unused: each draw scores the B sequences in one denoiser call.
    """

    if num_samples is None or num_samples < 2:
        raise PrimebenchError(
            f"Monte Carlo needs num_samples >= 2, got {num_samples!r}",
            fix="pass num_samples=K with K >= 2 (standard error needs 2 draws)",
        )
    try:
        check_time_sampler(time_sampler)
    except ValueError as exc:
        raise PrimebenchError(
            f"unknown time_sampler {time_sampler!r}", fix='use "n" (unbiased, masked-count) or "t" (MDLM protocol)'
        ) from exc
    base = subtoken_base(C, ell)
    y0 = encode(x0, base, ell)  # (B, L, ell)

    def terms(y_t: torch.Tensor, t: torch.Tensor | None, masked: torch.Tensor) -> list[torch.Tensor]:
        log_probs = restricted_log_probs(denoiser(y_t), y_t, C=C, base=base, ell=ell)
        if which == "subtoken":
            return [subtoken_nll_terms(log_probs, y0, masked, base, ell)]
        return [token_joint_nll_terms(log_probs, x0, masked)]

    value, stderr = monte_carlo_nelbo(
        y0,
        torch.ones_like(y0, dtype=torch.bool),
        terms,
        schedule=get_schedule("linear"),
        process=Absorbing(base),
        sampler=time_sampler,
        num_samples=num_samples,
        generator=generator,
    )
    return MonteCarloEstimate(value[..., 0], stderr[..., 0])
