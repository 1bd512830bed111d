"""The posterior sampler: T ancestral steps x_s ~ q(x_s | x_t, x_theta) for any forward process.

Where the absorbing samplers reveal masked units one way only, a process without an absorbing state
(uniform, interpolating; :mod:`harness.processes`) can change every position at every step, so each
step draws every position afresh from the process's posterior with the denoiser's x_theta put into
the marginal (UDLM's and DUO's reverse step), on the uniform grid t_k = 1 - k (1 - t_end) / T:

    y_{t_T} ~ pi;  y_{t_{k-1}} ~ q(. | y_{t_k}, x_theta(y_{t_k}, t_k)) for k = T .. 1,

and after the last grid step the positions left in a noise-only state (the interpolating process's
mask) are filled by ``noise_removal``. ``noise_removal="argmax"`` also replaces the draw of the last
step by the denoiser's argmax (DUO's greedy tail); ``"sample"`` keeps the draw. Each step is one
denoiser call for every sample (NFE = T).

Two draws of the same law (``settings.draw``, as for the ancestral sampler):

* ``two-stage`` (the default): the posterior is a mixture of three parts
  (:meth:`harness.processes.ForwardProcess.posterior_parts`): stay at y_t, a token from x_theta, a
  state from pi. One float64 uniform per position picks the part; the positions that pick x_theta
  get their token by :func:`harness.sampling.categorical.sample_inverse_cdf` in the settings'
  dtype, those that pick pi a draw from the prior. No (B, L, V) posterior is formed and no Gumbel
  noise is drawn: at C = 50257 the step costs a cumulative sum over the positions that need a token;
* ``joint`` (the reference, UDLM's and DUO's code): the (B, L, V) posterior formed in the settings'
  dtype and drawn with its ``method`` (:func:`harness.sampling.sample_categorical`), the draw the
  precision audit studies.

The two give different samples for a seed and the same distribution (tested).
"""

from __future__ import annotations

import torch

from harness.sampling.ancestral import time_grid
from harness.sampling.categorical import sample_categorical, sample_inverse_cdf
from harness.sampling.settings import BatchResult, SamplerSettings
from harness.sampling.units import UnitModel, shaped_log_probs

NOTES = {"posterior": "every position redrawn from q(x_s | x_t, x_theta) at each of the T steps"}


def _draw(process, y, log_p, alpha_t: float, alpha_s: float, settings: SamplerSettings, generator) -> torch.Tensor:
    """One reverse step's draw of every position: (B, L) states y_t, (B, L, C) log x_theta -> y_s."""
    if settings.draw == "joint":
        probs = torch.exp(log_p.to(settings.dtype))
        post = process.posterior(y, probs, alpha_t, alpha_s, dtype=settings.dtype)
        return sample_categorical(probs=post, method=settings.method, dtype=settings.dtype, generator=generator)
    C = log_p.shape[-1]
    token = y < C  # a noise-only state (a mask) has no x_theta mass
    log_at_z = log_p.gather(-1, y.clamp_max(C - 1)[..., None])[..., 0]
    at_z = torch.where(token, torch.exp(log_at_z.to(settings.dtype)), 0)
    stay, theta, prior = process.posterior_parts(y, at_z, alpha_t, alpha_s)
    u = torch.rand(y.shape, dtype=torch.float64, device=y.device, generator=generator) * (stay + theta + prior)
    from_theta = (u >= stay) & (u < stay + theta)
    y_next = process.noise(y, u >= stay + theta, generator=generator, alpha=alpha_s)  # pi_s where pi moves
    if bool(from_theta.any()):
        probs = torch.exp(log_p[from_theta].to(settings.dtype))  # only the rows that draw a token
        y_next[from_theta] = sample_inverse_cdf(probs, dtype=settings.dtype, generator=generator)
    return y_next


def run_posterior(
    units: UnitModel,
    rows: int,
    settings: SamplerSettings,
    generator: torch.Generator | None,
    prefix: torch.Tensor | None,
) -> BatchResult:
    """Draw ``rows`` samples with T = ``settings.steps`` posterior steps (module docstring); the
    ``prefix`` (rows, P) tokens are kept as they are at every step."""
    process = units.process
    steps = int(settings.steps)
    schedule = units.model.schedule
    grid = time_grid(steps, settings.t_end)
    alpha = schedule.alpha(grid)  # float64, alpha_{t_k}
    y = units.initial_state(rows, prefix, generator=generator)[..., 0]  # (B, L): ell = 1
    fixed = torch.zeros_like(y, dtype=torch.bool)
    if prefix is not None:
        fixed[:, : prefix.shape[1]] = True
    idle = torch.zeros(rows, dtype=torch.long, device=y.device)
    for k in range(1, steps + 1):
        log_p = shaped_log_probs(units.log_probs(y[..., None], float(grid[k - 1])), settings)
        last = k == steps
        if last and settings.noise_removal == "argmax" and settings.t_end == 0.0:
            y_next = log_p.argmax(-1)
        else:
            y_next = _draw(process, y, log_p, float(alpha[k - 1]), float(alpha[k]), settings, generator)
        y_next = torch.where(fixed, y, y_next)
        idle += (y_next == y).all(-1).long()
        y = y_next
    left = process.unrevealed(y) & (y >= units.vocab_size)  # noise-only states (a mask) left at t_end
    if bool(left.any()):
        log_p = shaped_log_probs(units.log_probs(y[..., None], float(grid[-1])), settings)
        fill = (
            log_p.argmax(-1)
            if settings.noise_removal == "argmax"
            else sample_categorical(
                probs=torch.exp(log_p), method=settings.method, dtype=settings.dtype, generator=generator
            )
        )
        y = torch.where(left, fill, y)
    nfe = steps + left.any(-1).long()
    return BatchResult(
        tokens=y,
        nfe=nfe,
        idle_steps=idle,
        steps=torch.full((rows,), steps, dtype=torch.long, device=y.device),
        counts={"noise_removed": int(left.sum())},
    )
