"""Ancestral (T-step) sampler of masked diffusion: MDLM's ``ddpm``/``ddpm_cache`` and MDM-Prime's update.

Grid. t_k = 1 - k (1 - t_end) / T, k = 0..T (t_0 = 1, t_T = t_end; default t_end = 0), float64,
with the model's own schedule alpha_t. Step k goes from t = t_{k-1} to s = t_k. With t_end = 0 the
last step reveals every unit that is still masked (alpha_0 = 1), so noise removal has nothing to
do; this is the grid of :mod:`harness.audit.idle` (ISR = (1 - 1/T)^(L ell) for the linear
schedule). MDLM's code stops at t_end = 1e-5 and fills what is left by argmax with one more
network call: pass ``t_end=1e-5, noise_removal="argmax"`` for that.

Per step (MDLM Sec. 3.2 eq. 7; Zheng et al. Sec. 4.1): a masked unit unmasks in (s, t] with
probability (alpha_s - alpha_t) / (1 - alpha_t), whatever the network says; its value comes from
the denoiser. Unmasked units are carried over.

* MDLM / masked (units = tokens): one categorical over C + 1 outcomes per position, exactly as
  MDLM's ``_ddpm_caching_update``: token c has mass p(c) (m_t - m_s), "stay masked" has mass m_s,
  with m = 1 - alpha (the normaliser m_t is a per-row scale, which no method depends on). This is
  the distribution whose float32 Gumbel truncation Zheng et al. analyse, drawn with one
  :func:`sample_categorical` call, so ``method="mdlm-legacy", dtype="float32"`` is MDLM's sampler.
* Prime (units = sub-tokens, MDM-Prime ``_mdm_prime_update``): draw a full token x_hat from the
  restricted joint at every position, encode it, and reveal each still-masked sub-token with
  outcome mass (stay m_s, reveal m_t - m_s) in a two-class :func:`sample_categorical` draw.

Caching (``cache=True``): the denoiser is called only for samples that changed in the previous
step (and still have a masked unit); the others reuse their previous output. For time-independent
networks this is exact: the same seed gives the same tokens as ``cache=False``, with fewer NFE.
For time-conditioned networks the reused output was computed at an earlier t (stale time), as in
no reference implementation (MDLM disables its cache for them), so :func:`generate` turns caching
off for them unless asked and records ``cache_exact=False`` when it is on. A sample with no masked
unit left is never sent to the denoiser, with or without caching.

Every draw is made for every position of every sample (also those not masked), so the random
stream does not depend on the state and cached / uncached runs consume it identically.
"""

from __future__ import annotations

import torch

from harness.sampling.categorical import sample_categorical
from harness.sampling.leftovers import INVALID_RESOLUTION, fill_masked, resolve_invalid
from harness.sampling.settings import BatchResult, SamplerSettings
from harness.sampling.units import UnitModel, shaped_log_probs


def time_grid(steps: int, t_end: float = 0.0) -> torch.Tensor:
    """(T + 1,) float64 grid t_k = 1 - k (1 - t_end) / T, with t_T = t_end exactly."""
    t = 1.0 - torch.arange(steps + 1, dtype=torch.float64) * ((1.0 - t_end) / steps)
    t[-1] = t_end
    return t


def _mdlm_update(probs: torch.Tensor, m_t: float, m_s: float, settings: SamplerSettings,
                 generator: torch.Generator | None) -> torch.Tensor:
    """(B, L, C) token probs -> (B, L) outcomes in [0, C]; outcome C (the mask id) = stay masked."""
    stay = probs.new_full((*probs.shape[:-1], 1), m_s)
    mass = torch.cat([probs * (m_t - m_s), stay], dim=-1)  # (B, L, C + 1)
    return sample_categorical(probs=mass, method=settings.method, dtype=settings.dtype, generator=generator)


def _prime_update(units: UnitModel, probs: torch.Tensor, m_t: float, m_s: float,
                  settings: SamplerSettings, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, L, C) restricted-joint probs -> (proposal units (B, L, ell), reveal flags (B, L, ell))."""
    x_hat = sample_categorical(probs=probs, method=settings.method, dtype=settings.dtype, generator=generator)
    B, L = x_hat.shape
    outcome = probs.new_tensor([m_s, m_t - m_s]).expand(B, L, units.ell, 2)
    reveal = sample_categorical(probs=outcome, method=settings.method, dtype=settings.dtype, generator=generator)
    return units.encode(x_hat), reveal == 1


def run_ancestral(units: UnitModel, rows: int, settings: SamplerSettings, generator: torch.Generator | None,
                  prefix: torch.Tensor | None) -> BatchResult:
    """Draw ``rows`` samples with T = ``settings.steps`` ancestral steps (see the module docstring)."""
    steps = int(settings.steps)
    schedule = units.model.schedule
    grid = time_grid(steps, settings.t_end)
    mask_prob = schedule.mask_prob(grid)  # m_k = 1 - alpha_{t_k}, float64 without cancellation

    y = units.initial_state(rows, prefix)
    nfe = torch.zeros(rows, dtype=torch.long, device=y.device)
    idle = torch.zeros(rows, dtype=torch.long, device=y.device)
    probs = None  # (B, L, C): the shaped denoiser output, reused by caching
    stale = torch.ones(rows, dtype=torch.bool, device=y.device)  # rows whose output must be recomputed

    for k in range(1, steps + 1):
        t = float(grid[k - 1])
        m_t, m_s = float(mask_prob[k - 1]), float(mask_prob[k])
        masked = y == units.mask_id
        call = masked.flatten(1).any(-1)
        if settings.cache:
            call &= stale
        if bool(call.any()):
            out = torch.exp(shaped_log_probs(units.log_probs(y[call], t), settings))
            if probs is None:
                probs = torch.ones(rows, units.seq_len, units.vocab_size, dtype=out.dtype, device=y.device)
            probs[call] = out
            nfe[call] += 1
        if probs is None:  # nothing masked anywhere (a prefix covering every position)
            idle += 1
            continue
        if units.subtokens:
            proposal, reveal = _prime_update(units, probs, m_t, m_s, settings, generator)
            y_next = torch.where(masked & reveal, proposal, y)
        else:
            outcome = _mdlm_update(probs, m_t, m_s, settings, generator)[..., None]
            y_next = torch.where(masked, outcome, y)
        changed = (y_next != y).flatten(1).any(-1)
        idle += ~changed
        stale = changed
        y = y_next

    y, filled = fill_masked(units, y, settings.t_end, settings, generator, nfe)
    y, invalid = resolve_invalid(units, y, settings.t_end, settings, generator, nfe)
    counts = {"noise_removal_filled": filled}
    if units.subtokens:
        counts["invalid_codes"] = invalid
    return BatchResult(
        tokens=units.decode(y), nfe=nfe, idle_steps=idle,
        steps=torch.full((rows,), steps, dtype=torch.long, device=y.device), counts=counts,
    )


NOTES = {"invalid_resolution": INVALID_RESOLUTION}

__all__ = ["run_ancestral", "time_grid", "NOTES"]
