"""First-hitting sampler (Zheng et al. 2409.02908, Alg. 1 and Prop. 4.1): one unit per denoiser call.

Whether a masked unit unmasks does not depend on the network, and the n masked units' reveal
times are i.i.d. with CDF P(tau <= s) = (1 - alpha_s) / (1 - alpha_t). So the next reveal time is
the largest of n such times, drawn by inversion (Prop. 4.1):

    tau' = alpha^{-1}(1 - u^{1/n} (1 - alpha_tau)),   u ~ U(0, 1)      (linear: tau' = tau u^{1/n})

starting from tau = 1. Then one masked unit, uniform among the n, is revealed with a value drawn
from the law of that unit's value under the denoiser called at tau', which the family gives
(its ``unit_log_marginals``):

* MDLM / masked: the token distribution at that position;
* Prime: the sub-token's marginal of the restricted joint, the distribution under which
  MDM-Prime's valid continuous-time bound is computed.

Cost: exactly one denoiser call per masked unit (NFE = number of masked units; no idle steps).
The reveal times are continuous uniforms drawn with ``torch.rand`` in float64 (not a categorical
draw); the choice of the unit and its value go through :func:`sample_categorical`. The times are
returned per sample in ``stats["reveal_times"]`` (n0 columns, decreasing), in case a
time-conditioned network or a test needs them.
"""

from __future__ import annotations

import torch

from harness.errors import PrimebenchError
from harness.sampling.categorical import sample_categorical
from harness.sampling.leftovers import INVALID_RESOLUTION, resolve_invalid
from harness.sampling.settings import BatchResult, SamplerSettings
from harness.sampling.units import UnitModel, shaped_log_probs


def next_reveal_time(schedule, tau: torch.Tensor, n: int, u: torch.Tensor) -> torch.Tensor:
    """Prop. 4.1: tau' = alpha^{-1}(1 - u^{1/n} (1 - alpha_tau)), float64 (B,)."""
    return schedule.t_from_alpha(1.0 - u ** (1.0 / n) * schedule.mask_prob(tau))


def run_first_hitting(
    units: UnitModel,
    rows: int,
    settings: SamplerSettings,
    generator: torch.Generator | None,
    prefix: torch.Tensor | None,
) -> BatchResult:
    """Draw ``rows`` samples revealing one unit per step in uniformly random order.

    ``prefix`` (rows, P) tokens are fixed context. Returns the tokens (rows, L), NFE = steps = the
    number of masked units per sample, no idle steps, the reveal times (rows, n0) in ``per_sample``
    and, for a family whose units can spell an invalid code, the count of codes redrawn."""
    schedule = units.model.schedule
    y = units.initial_state(rows, prefix)
    device = y.device
    flat = y.view(rows, -1)  # (B, L * ell), shares storage with y
    n0 = int(units.process.unrevealed(flat[0]).sum())
    if bool((units.process.unrevealed(flat).sum(-1) != n0).any()):  # pragma: no cover - prefix is rectangular
        raise PrimebenchError("first-hitting needs the same number of masked units in every sample")
    tau = torch.ones(rows, dtype=torch.float64, device=device)
    times = torch.empty(rows, n0, dtype=torch.float64, device=device)
    arange = torch.arange(rows, device=device)
    for k in range(n0):
        n = n0 - k
        u = torch.rand(rows, dtype=torch.float64, device=device, generator=generator)
        tau = next_reveal_time(schedule, tau, n, u).clamp(0.0, 1.0)
        times[:, k] = tau
        masked = units.process.unrevealed(flat).to(torch.float32)
        unit = sample_categorical(probs=masked, method=settings.method, dtype=settings.dtype, generator=generator)
        position, digit = unit // units.ell, unit % units.ell
        log_p = units.log_probs(y, tau.to(torch.float32))  # (B, L, C)
        log_p = shaped_log_probs(log_p[arange, position], settings)  # (B, C) at the chosen token
        log_p = units.model.unit_log_marginals(log_p, digit)  # (B, values of the unit)
        value = sample_categorical(
            probs=torch.exp(log_p), method=settings.method, dtype=settings.dtype, generator=generator
        )
        flat[arange, unit] = value
    nfe = torch.full((rows,), n0, dtype=torch.long, device=device)
    y, invalid = resolve_invalid(units, y, 0.0, settings, generator, nfe)
    counts = {} if invalid is None else {"invalid_codes": invalid}
    return BatchResult(
        tokens=units.decode(y),
        nfe=nfe,
        idle_steps=torch.zeros(rows, dtype=torch.long, device=device),
        steps=torch.full((rows,), n0, dtype=torch.long, device=device),
        counts=counts,
        per_sample={"reveal_times": times.cpu()},
    )


NOTES = {"invalid_resolution": INVALID_RESOLUTION}

__all__ = ["run_first_hitting", "next_reveal_time", "NOTES"]
