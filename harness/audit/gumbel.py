"""What a finite-precision Gumbel-max draw actually samples (Zheng et al. 2409.02908, Sec. 5.2-5.3).

``torch.rand`` returns U on a grid of spacing 2^-b (b = 24 for float32, 53 for float64) whose largest
value is 1 - 2^-b, so the Gumbel noise G = -log(-log U) never exceeds

    M = -log(-log(1 - 2^-b))      (16.6355 for float32, 36.7368 for float64; Zheng Table 1).

Two models of the resulting distribution over classes:

* :func:`truncated_gumbel_probs`: Zheng's Prop. 5.2, the exact law of argmax(log pi + G) when every
  G is a *continuous* Gumbel truncated to (-inf, M] (what "64-bit + truncation",
  ``torch.rand(float64) * 0.9999999404``, samples).
* :func:`grid_gumbel_probs`: the law when U is uniform on the 2^-b grid, which is what
  ``torch.rand`` does. Near the cap the grid is a staircase, P(-log U <= x) = floor(x / c) c with
  c = e^{-M} ~ 2^-b, which lies between the untruncated law (x) and the continuous truncated one
  (x - c). So a float32 draw distorts *less* than Prop. 5.2 at M predicts: a class with
  probability pi >> 2^-b loses about 2^-(b+1) of absolute mass, half of Prop. 5.2's 2^-b (for
  pi ~ 2^-b the ratio is x/(e^x - 1) vs e^{-x}, x = 2^-b / pi). Zheng's own Table 2 agrees in
  direction: "64-bit + truncation" is more distorted than real 32-bit (Gen PPL 28.6 vs 31.2).

Both are O(2^-b) effects per class and draw, so they matter only where classes with probability near
2^-b carry real mass: the early steps of MDLM's ancestral sampler, where a masked position stays
masked with probability s/t ~ 1 and each token gets (1 - s/t) p(token) (:func:`mdlm_step_distribution`).
All probabilities here are float64; ``kl`` and ``entropy`` are in nats.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import torch

from harness.errors import PrimebenchError
from harness.sampling.categorical import DTypeLike, check_probs, parse_dtype, sample_categorical
from harness.schedules import Schedule, get_schedule

_BITS = {torch.float32: 24, torch.float64: 53}


def uniform_bits(dtype: DTypeLike) -> int:
    """b such that ``torch.rand(dtype)`` returns multiples of 2^-b in [0, 1): 24 (float32), 53 (float64)."""
    return _BITS[parse_dtype(dtype)]


def truncation_level_for_bits(bits: int) -> float:
    """M = -log(-log(1 - 2^-bits)): the largest Gumbel value a 2^-bits uniform grid can produce."""
    if isinstance(bits, bool) or not isinstance(bits, int) or bits < 1:
        raise PrimebenchError(f"bits must be a positive integer, got {bits!r}")
    return -math.log(-math.log1p(-(2.0**-bits)))


def truncation_level(dtype: DTypeLike) -> float:
    """M for ``torch.rand`` in ``dtype``: ~16.6355 (float32, eps = 2^-24), ~36.7368 (float64, 2^-53)."""
    return truncation_level_for_bits(uniform_bits(dtype))


def _normalised64(probs: torch.Tensor) -> torch.Tensor:
    check_probs(probs)
    p = probs.to(torch.float64)
    return p / p.sum(-1, keepdim=True)


def truncated_gumbel_probs(
    probs: torch.Tensor, dtype: DTypeLike | None = None, *, M: float | None = None
) -> torch.Tensor:
    """Zheng et al. Prop. 5.2: the law of argmax_n(log pi_n + G_n), G_n iid Gumbel truncated at M.

    ``probs`` (..., K) >= 0 (normalised here); M defaults to ``truncation_level(dtype)``. Returns
    float64 (..., K). With pi sorted ascending, pi_0 = 0, S_i = sum_{k>=i} pi_k and c = e^{-M}:

        pi'_n = pi_n sum_{i=1}^{n} beta(i),
        beta(i) = [exp((K+1-i - S_i/pi_i) c) - exp((K+1-i - S_i/pi_{i-1}) c)] / S_i,

    the second exponential being 0 for i = 1. We evaluate beta(i) as
    exp(a_i c) * (-expm1(-d_i c)) / S_i with a_i = K+1-i - S_i/pi_i and d_i = S_i (1/pi_{i-1} - 1/pi_i)
    >= 0, which never subtracts two numbers near 1: with M = 36.7 (float64) the result equals pi to
    ~1e-15. Zero-probability classes are left out of K and stay 0; tied classes give d_i = 0.
    """
    if M is None:
        if dtype is None:
            raise PrimebenchError("truncated_gumbel_probs needs dtype= or M=")
        M = truncation_level(dtype)
    if not math.isfinite(M):
        raise PrimebenchError(f"truncation level M must be finite, got {M!r}")
    pi = _normalised64(probs)
    c = math.exp(-M)
    K = pi.shape[-1]
    pi_s, order = torch.sort(pi, dim=-1)  # ascending; zero classes come first
    i = torch.arange(1, K + 1, dtype=torch.float64, device=pi.device)
    S = torch.flip(torch.cumsum(torch.flip(pi_s, (-1,)), -1), (-1,))  # S_i = sum_{k>=i} pi_k
    prev = torch.cat([torch.zeros_like(pi_s[..., :1]), pi_s[..., :-1]], dim=-1)  # pi_{i-1}
    pos = pi_s > 0
    inv = torch.where(pos, 1.0 / torch.where(pos, pi_s, torch.ones_like(pi_s)), torch.zeros_like(pi_s))
    inv_prev = torch.where(
        prev > 0, 1.0 / torch.where(prev > 0, prev, torch.ones_like(prev)), torch.full_like(prev, float("inf"))
    )
    a = (K + 1 - i) - S * inv
    d = (S * (inv_prev - inv)).clamp_min(0.0)
    log_beta = a * c + torch.log(-torch.expm1(-d * c)) - torch.log(S)
    beta = torch.where(pos, torch.exp(log_beta), torch.zeros_like(log_beta))
    out_s = pi_s * torch.cumsum(beta, dim=-1)
    return torch.zeros_like(out_s).scatter(-1, order, out_s)


def grid_gumbel_probs(probs: torch.Tensor, dtype: DTypeLike | None = None, *, bits: int | None = None) -> torch.Tensor:
    """Law of Gumbel-max when each U is uniform on the grid {k 2^-b : k = 0..2^b-1} (``torch.rand``).

    Class n with normalised pi_n wins with probability E[U_n^{a_n}], a_n = 1/pi_n - 1, when its rivals'
    noise is treated as continuous: P(n) = 2^-b sum_{k=1}^{2^b-1} (k 2^-b)^{a_n} (the k = 0 cell
    cannot win). We sum the 64 top cells exactly and the rest by the midpoint rule. The largest class
    takes the remaining mass. Accurate to O(K 2^-b) relative for the smaller classes (the rivals'
    own grid and argmax's tie-break toward lower indices are not modelled), which is what matters:
    the distortion sits in classes with pi near 2^-b. ``bits`` overrides ``uniform_bits(dtype)``.
    """
    if bits is None:
        if dtype is None:
            raise PrimebenchError("grid_gumbel_probs needs dtype= or bits=")
        bits = uniform_bits(dtype)
    if isinstance(bits, bool) or not isinstance(bits, int) or bits < 8:
        raise PrimebenchError(f"bits must be an integer >= 8, got {bits!r}")
    pi = _normalised64(probs)
    return _largest_takes_rest(pi, _grid_win(pi, bits))


def _largest_takes_rest(pi: torch.Tensor, win: torch.Tensor) -> torch.Tensor:
    top = pi.argmax(-1, keepdim=True)
    win = win.scatter(-1, top, torch.zeros_like(top, dtype=win.dtype))
    return win.scatter(-1, top, 1.0 - win.sum(-1, keepdim=True))


def _grid_win(pi: torch.Tensor, bits: int) -> torch.Tensor:
    """P(class wins) = 2^-b sum_k (k 2^-b)^(1/pi - 1) for normalised pi (0 where pi = 0): the 64 top
    cells exactly, the rest by the midpoint rule (see :func:`grid_gumbel_probs`)."""
    N = 2.0**bits
    cells = 64
    pos = pi > 0
    inv = torch.where(pos, 1.0 / torch.where(pos, pi, torch.ones_like(pi)), torch.ones_like(pi))  # a+1
    j = torch.arange(1, cells + 1, dtype=torch.float64, device=pi.device)
    head = torch.exp((inv - 1.0).unsqueeze(-1) * torch.log1p(-j / N)).sum(-1) / N
    log_hi = math.log1p(-(cells + 0.5) / N)  # midpoint-rule limits for k = 1 .. 2^b - cells - 1
    log_lo = math.log(0.5 / N)
    tail = (torch.exp(inv * log_hi) - torch.exp(inv * log_lo)) / inv
    return torch.where(pos, head + tail, torch.zeros_like(pi))


_TABLE_POINTS = 1 << 17
_TABLE_BELOW = 8.0  # nats below log 2^-b where the table starts; under it a class wins with ~exp(-e^8)


@functools.lru_cache(maxsize=4)
def _grid_win_table(bits: int) -> tuple[float, float, torch.Tensor]:
    """(x0, dx, log(win / pi) at x0 + i dx) on a uniform grid of x = log pi from log 2^-b - 8 to 0."""
    x0 = -bits * math.log(2.0) - _TABLE_BELOW
    x = torch.linspace(x0, 0.0, _TABLE_POINTS, dtype=torch.float64)
    win = _grid_win(torch.exp(x), bits)
    return x0, -x0 / (_TABLE_POINTS - 1), torch.log(win.clamp_min(1e-300)) - x


def _grid_win_fast(pi: torch.Tensor, bits: int) -> torch.Tensor:
    """:func:`_grid_win` by linear interpolation of log(win / pi) in log pi (relative error below 1e-5
    where the win probability is above 1e-300; tested against the direct sum)."""
    x0, dx, table = _grid_win_table(bits)
    x = torch.log(pi)
    pos = x >= x0
    u = (x.clamp(min=x0, max=0.0) - x0) / dx
    i = u.floor().clamp(max=_TABLE_POINTS - 2)
    w = u - i
    i = i.long()
    log_ratio = table[i] * (1.0 - w) + table[i + 1] * w
    return torch.where(pos, torch.exp(x + log_ratio), torch.zeros_like(pi))


def grid_inverse_cdf_probs(probs: torch.Tensor, dtype: DTypeLike) -> torch.Tensor:
    """Law of :func:`harness.sampling.categorical.sample_inverse_cdf` in ``dtype``, float64 (..., C).

    The CDF is summed in ``dtype`` as the sampler sums it, and U = k 2^-b (k = 0 .. 2^b - 1) picks
    class n when cdf_{n-1} <= U total < cdf_n, so P(n) = (ceil(N cdf_n / total) - ceil(N cdf_{n-1} /
    total)) / N with N = 2^b (up to the rounding of U x total). Each class is off by less than one
    cell 2^-b, in either direction: there is no cap, so the rare classes keep their mass on average.
    """
    check_probs(probs)
    dtype = parse_dtype(dtype)
    N = 2.0 ** uniform_bits(dtype)
    cdf = torch.cumsum(probs.to(dtype), dim=-1).to(torch.float64)
    total = cdf[..., -1:]
    cells = torch.ceil(cdf / total * N)
    cells = torch.cat([torch.zeros_like(cells[..., :1]), cells], dim=-1)
    return torch.diff(cells, dim=-1) / N


def mdlm_step_distribution(
    token_probs: torch.Tensor, *, step: int, steps: int, schedule: str | Schedule = "linear"
) -> torch.Tensor:
    """The categorical that MDLM's ancestral step draws from at one masked position, float64 (..., V+1).

    Grid t_k = 1 - k/T; step k (1..T) goes from t = t_{k-1} to s = t_k. A masked position stays
    masked with probability (1 - alpha_s)/(1 - alpha_t) (s/t for linear) -- the **last** entry, index
    V -- and becomes token c with probability (alpha_s - alpha_t)/(1 - alpha_t) * p(c) (MDLM's
    ``_ddpm_update`` builds this vector, unnormalised, and draws from it with ``_sample_categorical``).
    ``token_probs`` (..., V) is the denoiser's p(x_0 | x_t) (normalised here).
    """
    if not (isinstance(step, int) and isinstance(steps, int) and 1 <= step <= steps):
        raise PrimebenchError(f"need integers 1 <= step <= steps, got step={step!r}, steps={steps!r}")
    sched = get_schedule(schedule)
    p = _normalised64(token_probs)
    t = torch.tensor(1.0 - (step - 1) / steps, dtype=torch.float64)
    s = torch.tensor(1.0 - step / steps, dtype=torch.float64)
    masked_t = sched.mask_prob(t)
    unmask = (sched.alpha(s) - sched.alpha(t)) / masked_t
    stay = sched.mask_prob(s) / masked_t
    return torch.cat([unmask * p, stay.expand(p.shape[:-1] + (1,))], dim=-1)


def mdlm_joint_draw_law(
    token_probs: torch.Tensor, *, steps: int, dtype: DTypeLike, schedule: str | Schedule = "linear"
) -> torch.Tensor:
    """The token a position ends with under T steps of MDLM's joint draw in ``dtype``, float64 (V,).

    For a context-free denoiser (the same ``token_probs`` at a masked position whatever is revealed),
    step k draws from :func:`mdlm_step_distribution` with the grid law of ``torch.rand`` in ``dtype``
    (:func:`grid_gumbel_probs`; MDLM's race with offsets has the same law up to O(1e-10)). A position
    still masked after step k-1 (probability S_{k-1}) takes token v at step k with the grid-law mass
    P_k(v), so the final law is sum_k S_{k-1} P_k(v), with S_k = S_{k-1} P_k(stay). With t_end = 0
    the last step has no stay mass, so every position ends with a token (S_T = 0). In float32 a
    token whose share (1 - s/t) p(v) of a step is near 2^-24 loses most of its mass: its probability
    falls, and the entropy with it, as T grows (Zheng et al. Sec. 5.3).
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise PrimebenchError(f"steps must be a positive integer, got {steps!r}")
    p = _normalised64(token_probs)
    if p.dim() != 1:
        raise PrimebenchError(f"token_probs must be one distribution (V,), got shape {tuple(p.shape)}")
    bits = uniform_bits(dtype)
    alive = torch.ones((), dtype=torch.float64)
    law = torch.zeros_like(p)
    for k in range(1, steps + 1):
        pi = _normalised64(mdlm_step_distribution(p, step=k, steps=steps, schedule=schedule))
        step = _largest_takes_rest(pi, _grid_win_fast(pi, bits))
        law += alive * step[:-1]
        alive = alive * step[-1]
    return law / law.sum()


class TokenDistributions(NamedTuple):
    """A peaked (Zipf) and a flat (uniform) distribution over the same vocabulary, float64 (V,)."""

    peaked: torch.Tensor
    flat: torch.Tensor


def peaked_and_flat(
    vocab: int, generator: torch.Generator | None = None, *, zipf_exponent: float = 1.0
) -> TokenDistributions:
    """Zipf-like p(rank r) ∝ r^-zipf_exponent with ranks assigned to tokens by a random permutation
    (``generator``), and the uniform distribution. Typical shapes of a confident and an unsure denoiser."""
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 2:
        raise PrimebenchError(f"vocab must be an integer >= 2, got {vocab!r}")
    ranks = torch.arange(1, vocab + 1, dtype=torch.float64)
    zipf = ranks ** -float(zipf_exponent)
    perm = torch.randperm(vocab, generator=generator)
    peaked = torch.empty_like(zipf).scatter(0, perm, zipf / zipf.sum())
    return TokenDistributions(peaked=peaked, flat=torch.full((vocab,), 1.0 / vocab, dtype=torch.float64))


def entropy(p: torch.Tensor) -> torch.Tensor:
    """Shannon entropy over the last dim, in nats, float64 (0 log 0 = 0)."""
    p = p.to(torch.float64)
    return -torch.special.xlogy(p, p).sum(-1)


def kl(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """KL(p || q) over the last dim, in nats, float64; +inf where q = 0 < p."""
    p = p.to(torch.float64)
    q = q.to(torch.float64)
    return (torch.special.xlogy(p, p) - torch.special.xlogy(p, q)).sum(-1)


def empirical_frequencies(
    probs: torch.Tensor,
    *,
    method: str = "gumbel",
    dtype: DTypeLike = torch.float64,
    draws: int,
    generator: torch.Generator | None = None,
    chunk_elements: int = 1 << 22,
) -> torch.Tensor:
    """Frequencies (float64, same shape as ``probs`` (..., K)) of ``draws`` independent draws per row
    through :func:`sample_categorical`, in chunks of about ``chunk_elements`` scores."""
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 1:
        raise PrimebenchError(f"draws must be a positive integer, got {draws!r}")
    K = probs.shape[-1]
    rows = probs.reshape(-1, K)
    R = rows.shape[0]
    counts = torch.zeros(R, K, dtype=torch.float64, device=probs.device)
    per_chunk = max(1, chunk_elements // (R * K))
    done = 0
    while done < draws:
        n = min(per_chunk, draws - done)
        idx = sample_categorical(rows.expand(n, R, K), method=method, dtype=dtype, generator=generator)
        counts.scatter_add_(1, idx.T, torch.ones(R, n, dtype=torch.float64, device=probs.device))
        done += n
    return (counts / draws).reshape(probs.shape)


__all__ = [
    "uniform_bits",
    "truncation_level",
    "truncation_level_for_bits",
    "truncated_gumbel_probs",
    "grid_gumbel_probs",
    "grid_inverse_cdf_probs",
    "mdlm_step_distribution",
    "TokenDistributions",
    "peaked_and_flat",
    "entropy",
    "kl",
    "empirical_frequencies",
]
