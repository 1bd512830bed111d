"""The score samplers: SEDD's reverse-chain steps for a model that outputs concrete scores.

A family whose network estimates the ratios s(y) = p_t(y) / p_t(z) (SEDD, :mod:`baselines.sedd`)
gives them through ``sampler_log_scores`` (the masked-diffusion base derives them from any
denoiser, :meth:`harness.processes.ForwardProcess.log_ratios`). Both samplers run SEDD's
``pc_sampler``: T steps on the grid t_k = 1 - k (1 - t_end) / T (SEDD's ``linspace(1, eps, T + 1)``,
``t_end`` = eps = 1e-5 by default), every position drawn afresh at each step, then SEDD's
denoising step from t_end to 0; NFE = T + 1.

* ``tweedie`` (SEDD's ``analytic`` predictor, the default of its ``run_sample.py``): Tweedie
  tau-leaping, p(x_s = y | x_t = z) proportional to q(z | y) times the staggered score
  (:meth:`~harness.processes.ForwardProcess.tweedie_probs`). For the scores of a denoiser it is the
  ``posterior`` sampler's step, exactly (tested);
* ``euler``: one Euler step of the reverse chain, dt sigma_t pi(z) s(y) to move to y, the rest to
  stay (:meth:`~harness.processes.ForwardProcess.euler_probs`), negative stay masses clipped to 0.

The denoising step is Tweedie's to alpha = 1 with the noise-only states (the mask) removed, as
SEDD's ``Denoiser`` does; it draws (``noise_removal="sample"``, SEDD's) or takes the argmax
(``"argmax"``). Every draw is :func:`harness.sampling.sample_categorical` over the V states in the
settings' dtype and method (SEDD's code uses the Gumbel-max of probs / (-log u) in float32). The
``prefix`` tokens stay fixed. Temperature and nucleus do not apply to a score (refused).
"""

from __future__ import annotations

import torch

from harness.errors import PrimebenchError
from harness.sampling.ancestral import time_grid
from harness.sampling.categorical import sample_categorical
from harness.sampling.settings import BatchResult, SamplerSettings
from harness.sampling.units import UnitModel

#: SEDD's sampling grid end (``get_pc_sampler``'s eps)
SEDD_T_END = 1e-5

NOTES = {
    "tweedie": "SEDD's analytic (Tweedie tau-leaping) step, then its denoising step",
    "euler": "SEDD's Euler step of the reverse rates, then its denoising step",
}


def _check(settings: SamplerSettings, name: str) -> None:
    if settings.temperature != 1.0 or settings.nucleus_p < 1.0:
        raise PrimebenchError(
            f"the {name} sampler draws from the reverse chain's rates; temperature and nucleus do not apply",
            fix="leave --temperature at 1 and --nucleus-p at 1",
        )
    if settings.t_end <= 0.0:
        raise PrimebenchError(
            f"the {name} sampler ends with SEDD's denoising step at t_end > 0 (the scores diverge at t = 0)",
            fix=f"leave t_end unset (SEDD's {SEDD_T_END}) or pass a small positive value",
        )


def _draw(probs: torch.Tensor, settings: SamplerSettings, generator) -> torch.Tensor:
    return sample_categorical(probs=probs, method=settings.method, dtype=settings.dtype, generator=generator)


def _run(units: UnitModel, rows: int, settings: SamplerSettings, generator, prefix, *, euler: bool) -> BatchResult:
    name = "euler" if euler else "tweedie"
    _check(settings, name)
    process, schedule = units.process, units.model.schedule
    steps = int(settings.steps)
    grid = time_grid(steps, settings.t_end)
    alpha = schedule.alpha(grid)
    y = units.initial_state(rows, prefix, generator=generator)[..., 0]
    fixed = torch.zeros_like(y, dtype=torch.bool)
    if prefix is not None:
        fixed[:, : prefix.shape[1]] = True
    idle = torch.zeros(rows, dtype=torch.long, device=y.device)
    for k in range(1, steps + 1):
        t = float(grid[k - 1])
        log_s = units.log_scores(y[..., None], t)
        if euler:
            dt = t - float(grid[k])
            probs = process.euler_probs(log_s, y, float(alpha[k - 1]), float(schedule.alpha_prime(t)), dt)
        else:
            probs = process.tweedie_probs(log_s, y, float(alpha[k - 1]), float(alpha[k]))
        y_next = torch.where(fixed, y, _draw(probs, settings, generator))
        idle += (y_next == y).all(-1).long()
        y = y_next
    # SEDD's Denoiser: Tweedie from t_end to alpha = 1, the noise-only states removed
    log_s = units.log_scores(y[..., None], float(grid[-1]))
    probs = process.tweedie_probs(log_s, y, float(alpha[-1]), 1.0)[..., : units.vocab_size]
    last = probs.argmax(-1) if settings.noise_removal == "argmax" else _draw(probs, settings, generator)
    y = torch.where(fixed, y, last)
    return BatchResult(
        tokens=y,
        nfe=torch.full((rows,), steps + 1, dtype=torch.long, device=y.device),
        idle_steps=idle,
        steps=torch.full((rows,), steps, dtype=torch.long, device=y.device),
    )


def run_tweedie(units: UnitModel, rows: int, settings: SamplerSettings, generator, prefix) -> BatchResult:
    """``rows`` samples with T = ``settings.steps`` Tweedie steps and SEDD's denoising step."""
    return _run(units, rows, settings, generator, prefix, euler=False)


def run_euler(units: UnitModel, rows: int, settings: SamplerSettings, generator, prefix) -> BatchResult:
    """``rows`` samples with T = ``settings.steps`` Euler steps and SEDD's denoising step."""
    return _run(units, rows, settings, generator, prefix, euler=True)


__all__ = ["NOTES", "SEDD_T_END", "run_euler", "run_tweedie"]
