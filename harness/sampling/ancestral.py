"""Ancestral (T-step) sampler of masked diffusion: MDLM's ``ddpm``/``ddpm_cache`` and MDM-Prime's update.

Grid. t_k = 1 - k (1 - t_end) / T, k = 0..T (t_0 = 1, t_T = t_end; default t_end = 0), float64,
with the model's own schedule alpha_t. Step k goes from t = t_{k-1} to s = t_k. With t_end = 0 the
last step reveals every unit that is still masked (alpha_0 = 1), so noise removal has nothing to
do; this is the grid of :mod:`harness.audit.idle` (ISR = (1 - 1/T)^(L ell) for the linear
schedule). MDLM's code stops at t_end = 1e-5 and fills what is left by argmax with one more
network call: pass ``t_end=1e-5, noise_removal="argmax"`` for that.

Per step (MDLM Sec. 3.2 eq. 7; Zheng et al. Sec. 4.1): a masked unit unmasks in (s, t] with
probability q = (m_t - m_s) / m_t, m = 1 - alpha, whatever the network says; its value comes from
the denoiser. Unmasked units are carried over. Two draws of this same law (``settings.draw``):

* ``two-stage`` (the default): first whether each masked unit is revealed, one float64 Bernoulli(q)
  per masked unit (so the reveal decision is never truncated); then, only at the revealed
  positions, the token from the denoiser's distribution by inverse CDF with one uniform in
  ``dtype`` (:func:`sample_inverse_cdf`). For Prime the token x_hat of a position is drawn once
  from the restricted joint when any of its masked sub-tokens is revealed, and the revealed
  sub-tokens take its digits. The denoiser is needed only at steps that reveal something.
* ``joint`` (the reference): the family's ``joint_draw`` at every position with a masked unit, with
  ``method`` in ``dtype`` (:func:`sample_categorical`). MDLM's ``_ddpm_caching_update``: one
  categorical over C + 1 outcomes, token c with mass p(c) (m_t - m_s) and "stay masked" with mass
  m_s, so ``method="mdlm-legacy", dtype="float32"`` is MDLM's sampler and shows the float32 Gumbel
  truncation that Zheng et al. analyse. Prime, MDM-Prime's ``_mdm_prime_update``: x_hat from the
  restricted joint, and a two-class (stay m_s, reveal m_t - m_s) draw per masked sub-token. Draws
  are made only at masked positions (MDLM's code draws everywhere and discards the draws at
  unmasked positions: same tokens for the same uniforms).

Caching (``cache=True``). Joint draw: the denoiser is called only for samples that changed in the
previous step (and still have a masked unit); the others reuse their previous output. For
time-independent networks this is exact: the same seed gives the same tokens as ``cache=False``,
with fewer NFE. For time-conditioned networks the reused output was computed at an earlier t
(stale time), as in no reference implementation (MDLM disables its cache for them), so
:func:`generate` turns caching off for them unless asked and records ``cache_exact=False`` when it
is on. Two-stage draw: the denoiser is called for a sample only at a step that reveals one of its
units, at that step's t. Every reveal changes the sample, so no output is ever reused and caching
is exact for every network: NFE is the number of non-idle steps, T (1 - ISR) in expectation, and
wall time follows NFE. Without caching the denoiser is called at every step (NFE = T), and the
samples are the same. A sample with no masked unit left is never sent to the denoiser.
"""

from __future__ import annotations

import torch

from harness.sampling.categorical import sample_inverse_cdf
from harness.sampling.leftovers import INVALID_RESOLUTION, fill_masked, resolve_invalid
from harness.sampling.settings import BatchResult, SamplerSettings
from harness.sampling.units import UnitModel, shaped_log_probs


def time_grid(steps: int, t_end: float = 0.0) -> torch.Tensor:
    """(T + 1,) float64 grid t_k = 1 - k (1 - t_end) / T, with t_T = t_end exactly."""
    t = 1.0 - torch.arange(steps + 1, dtype=torch.float64) * ((1.0 - t_end) / steps)
    t[-1] = t_end
    return t


def _reveal(masked: torch.Tensor, q: float, generator: torch.Generator | None) -> torch.Tensor:
    """Stage one of the two-stage draw: each masked unit revealed with probability q (float64)."""
    u = torch.rand(masked.shape, dtype=torch.float64, device=masked.device, generator=generator)
    return masked & (u < q)


def _step(
    units: UnitModel,
    y: torch.Tensor,
    masked: torch.Tensor,
    probs: torch.Tensor,
    reveal: torch.Tensor | None,
    m_t: float,
    m_s: float,
    settings: SamplerSettings,
    generator: torch.Generator | None,
    revealing: bool = True,
) -> torch.Tensor:
    """One ancestral step from y (B, L, ell) given the denoiser's probs (B, L, C): the next state.

    ``reveal`` (two-stage draw) says which masked units are revealed, ``revealing`` whether any is (read
    once by the caller); None means the joint draw."""
    y_next = y.clone()
    if reveal is not None:
        at = reveal.any(-1)  # (B, L): positions that need a token
        if revealing:
            x_hat = sample_inverse_cdf(probs[at], dtype=settings.dtype, generator=generator)
            y_next[at] = torch.where(reveal[at], units.encode(x_hat), y[at])
        return y_next
    at = masked.any(-1)
    if bool(at.any()):
        y_next[at] = units.model.joint_draw(
            probs[at],
            y[at],
            masked[at],
            m_t,
            m_s,
            method=settings.method,
            dtype=settings.dtype,
            generator=generator,
        )
    return y_next


def run_ancestral(
    units: UnitModel,
    rows: int,
    settings: SamplerSettings,
    generator: torch.Generator | None,
    prefix: torch.Tensor | None,
) -> BatchResult:
    """Draw ``rows`` samples with T = ``settings.steps`` ancestral steps (see the module docstring).

    ``prefix`` (rows, P) tokens are fixed context. Returns the tokens (rows, L), per-sample NFE,
    idle steps and steps, and the counts of units filled by noise removal and, for a family whose
    units can spell an invalid code, of the codes redrawn."""
    steps = int(settings.steps)
    schedule = units.model.schedule
    grid = time_grid(steps, settings.t_end)
    mask_prob = schedule.mask_prob(grid)  # m_k = 1 - alpha_{t_k}, float64 without cancellation
    two_stage = settings.draw == "two-stage"

    y = units.initial_state(rows, prefix)
    nfe = torch.zeros(rows, dtype=torch.long, device=y.device)
    idle = torch.zeros(rows, dtype=torch.long, device=y.device)
    probs = None  # (B, L, C): the shaped denoiser output, reused by caching (a call on every row replaces it)
    stale = torch.ones(rows, dtype=torch.bool, device=y.device)  # rows whose output must be recomputed

    times, masses = grid.tolist(), mask_prob.tolist()  # Python floats: no tensor read inside the loop
    for k in range(1, steps + 1):
        t = times[k - 1]
        m_t, m_s = masses[k - 1], masses[k]
        masked = units.process.unrevealed(y)
        call = masked.flatten(1).any(-1)
        reveal = _reveal(masked, (m_t - m_s) / m_t, generator) if two_stage else None
        revealing = reveal.flatten(1).any(-1) if two_stage else None
        if settings.cache:
            call &= revealing if two_stage else stale
        # what the step does, read from the device at once: one synchronisation per step on a GPU
        first = revealing.any() if two_stage else call.any()
        any_reveal, any_call, all_call = torch.stack((first, call.any(), call.all())).tolist()
        if two_stage and settings.cache and not any_reveal:  # an idle step for every sample: nothing to do
            idle += 1
            continue
        if any_call:
            out = shaped_log_probs(units.log_probs(y[call], t, call), settings).exp_()  # a fresh tensor: in place
            if all_call:
                probs = out  # every row recomputed: no copy into the buffer
            else:
                if probs is None:
                    probs = torch.ones(rows, units.seq_len, units.vocab_size, dtype=out.dtype, device=y.device)
                probs[call] = out
            nfe[call] += 1
        if probs is None:  # nothing revealed (two-stage) or nothing masked anywhere (a full prefix)
            idle += 1
            continue
        y_next = _step(units, y, masked, probs, reveal, m_t, m_s, settings, generator, bool(any_reveal))
        changed = (y_next != y).flatten(1).any(-1)
        idle += ~changed
        stale = changed
        y = y_next

    y, filled = fill_masked(units, y, settings.t_end, settings, generator, nfe)
    y, invalid = resolve_invalid(units, y, settings.t_end, settings, generator, nfe)
    counts = {"noise_removal_filled": filled}
    if invalid is not None:
        counts["invalid_codes"] = invalid
    return BatchResult(
        tokens=units.decode(y),
        nfe=nfe,
        idle_steps=idle,
        steps=torch.full((rows,), steps, dtype=torch.long, device=y.device),
        counts=counts,
    )


NOTES = {"invalid_resolution": INVALID_RESOLUTION}

__all__ = ["run_ancestral", "time_grid", "NOTES"]
