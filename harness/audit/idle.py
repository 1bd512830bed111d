"""Idle steps of the T-step ancestral sampler: the idle-step ratio (ISR) of MDM-Prime, analytically.

An idle step is a reverse step in which no unit (token for MDLM, sub-token for Prime) changes, so a
time-independent network would see the same input again (MDM-Prime Sec. 1, Fig. 2, Table 1). ISR is
the fraction of the T steps that are idle. Whether a masked unit unmasks does not depend on the
network (Zheng et al. Sec. 4.1), so ISR follows from the schedule alone:

* grid t_k = 1 - k/T, k = 0..T; step k (k = 1..T) goes from t_{k-1} to t_k;
* the sampler starts fully masked, and a unit masked at t unmasks before s with probability
  (alpha_s - alpha_t) / (1 - alpha_t); so a unit's reveal step is k with probability
  Delta_k = (alpha_{t_k} - alpha_{t_{k-1}}) / (1 - alpha_1)  (first-hitting distribution; the
  denominator is 1 for the linear schedule and makes loglinear's alpha_1 = eps start fully masked);
* the N = batch * length * ell units are independent, so P(step k idle) = (1 - Delta_k)^N
  (Zheng et al. App. E eqs. 72-73 with B*L replaced by B*L*ell), computed as exp(N log1p(-Delta_k));
* ISR = (1/T) sum_k P(step k idle)  (Prime's definition: idle steps over all T sampling steps).

For the linear schedule Delta_k = 1/T and ISR = (1 - 1/T)^{B L ell}; with T = L = 1024, B = 1 this
reproduces Prime's Table 1 (36.77%, 13.52%, 4.97%, 1.83%, 0.25%, 0.03% for ell = 1, 2, 3, 4, 6, 8).
The grid ends at t = 0 (the Prime/MDLM code stops at 1e-5 and then runs a noise-removal step; that
moves ISR in the 4th significant digit).

``batch`` matters because the caching sampler reuses the network output only when the *whole batch*
is unchanged (Prime/MDLM ``torch.allclose`` over the batch). The paper's numbers are batch = 1.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from harness.errors import PrimebenchError
from harness.schedules import Schedule, get_schedule


def _check_counts(**counts: int) -> None:
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PrimebenchError(f"{name} must be a positive integer, got {value!r}")


def reveal_step_probs(steps: int, schedule: str | Schedule = "linear") -> torch.Tensor:
    """Delta_k, k = 1..T, shape (T,), float64: probability that a unit starting masked at t = 1 is
    revealed in step k of the uniform grid. Sums to 1."""
    _check_counts(steps=steps)
    sched = get_schedule(schedule)
    t = 1.0 - torch.arange(steps + 1, dtype=torch.float64) / steps  # t_0 = 1 ... t_T = 0
    t[-1] = 0.0
    alpha = sched.alpha(t)
    start_masked = sched.mask_prob(torch.ones((), dtype=torch.float64))  # 1 - alpha_1
    return (alpha[1:] - alpha[:-1]) / start_masked


def step_idle_probs(
    length: int, steps: int, ell: int, schedule: str | Schedule = "linear", batch: int = 1
) -> torch.Tensor:
    """P(step k is idle) = (1 - Delta_k)^(batch * length * ell), k = 1..T, shape (T,), float64."""
    _check_counts(length=length, steps=steps, ell=ell, batch=batch)
    delta = reveal_step_probs(steps, schedule).clamp(0.0, 1.0)
    units = batch * length * ell
    return torch.exp(units * torch.log1p(-delta))


def idle_step_ratio(length: int, steps: int, ell: int, schedule: str | Schedule = "linear", batch: int = 1) -> float:
    """Expected fraction of the T steps in which no unit of the batch changes (a fraction, not %)."""
    return float(step_idle_probs(length, steps, ell, schedule, batch).mean())


def expected_nfe(length: int, steps: int, ell: int, schedule: str | Schedule = "linear", batch: int = 1) -> float:
    """Expected network calls of the caching ancestral sampler over the T grid steps.

    Convention (that of the MDLM/Prime ``ddpm_cache`` loop): step 1 always calls the network; step
    k > 1 calls it iff step k-1 changed the batch. The idleness of the last step saves nothing, so

        E[NFE] = T - sum_{k=1}^{T-1} P(step k idle) = T (1 - ISR) + P(step T idle).

    Zheng et al. App. E write N (1 - (1 - 1/N)^{BL}) = T (1 - ISR), i.e. they count one call per
    non-idle step; the two differ by P(step T idle) < 1 call (0.37 at T = L = 1024, ell = 1; 0.78 at
    T = 4096). The final noise-removal call of the MDLM/Prime code is not counted.
    """
    idle = step_idle_probs(length, steps, ell, schedule, batch)
    return float(steps - idle[:-1].sum())


class IdleSimulation(NamedTuple):
    """Monte-Carlo ISR: ``mean`` over runs and its standard error (fractions, not %)."""

    mean: float
    stderr: float


def simulate_idle(
    length: int,
    steps: int,
    ell: int,
    *,
    schedule: str | Schedule = "linear",
    batch: int = 1,
    runs: int = 10,
    generator: torch.Generator | None = None,
) -> IdleSimulation:
    """Reference simulation of the unmasking decisions only (no network, no tokens).

    Each of the batch*length*ell units draws its reveal step from Delta_k (inverse CDF on float64
    uniforms; this is a check of the schedule arithmetic, not a sampler, so it does not go through
    :func:`harness.sampling.sample_categorical`). A step is idle when no unit is revealed in it; each
    run gives one ISR, and we return the mean and standard error over ``runs``. Measurement through
    the real sampler lives elsewhere.
    """
    _check_counts(length=length, steps=steps, ell=ell, batch=batch, runs=runs)
    if runs < 2:
        raise PrimebenchError("simulate_idle needs runs >= 2 to report a standard error")
    cdf = torch.cumsum(reveal_step_probs(steps, schedule), 0)
    cdf[-1] = 1.0  # guard against rounding: every unit is revealed by t = 0
    units = batch * length * ell
    ratios = torch.empty(runs, dtype=torch.float64)
    for r in range(runs):
        u = torch.rand(units, dtype=torch.float64, generator=generator)
        step = torch.searchsorted(cdf, u, right=True).clamp_max(steps - 1)  # 0-based reveal step
        revealed = torch.bincount(step, minlength=steps)
        ratios[r] = (revealed == 0).sum() / steps
    return IdleSimulation(mean=float(ratios.mean()), stderr=float(ratios.std() / math.sqrt(runs)))


__all__ = ["idle_step_ratio", "expected_nfe", "simulate_idle", "IdleSimulation", "reveal_step_probs", "step_idle_probs"]
