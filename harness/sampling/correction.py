"""GIDD's self-correction (von Ruette et al. 2025, ``gidd/eval/self_correction.py``): after the
posterior sampler has produced a clean sequence, fix the tokens the model disagrees with most, one
(or a few) at a time, at a fixed small time t0.

Each correction step, for every row not yet stopped:

    p = softmax(log x_theta(y, t0) / temperature)         (the mask has no mass)
    y' ~ p at every position;  score_i = p_i(y'_i) if y'_i != y_i else 0
    y  <- y with the ``tokens_per_step`` positions of highest score set to y'

and ``agreement`` = the fraction of positions where the new y equals x_theta's argmax at the old y.
A row stops when a step changes nothing (converged), or when the agreement has not risen above its
best for more than ``patience`` steps (then that last proposal is dropped, as GIDD's loop does), or
after ``steps`` steps. Each step is one denoiser call for the rows still running; NFE counts them.
Positions of a prefix are never changed. GIDD runs this on each sample alone (batch 1); here the
rows of a batch run together and stop one by one, which gives every row the same law as GIDD's.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from harness.errors import PrimebenchError
from harness.sampling.categorical import sample_categorical
from harness.sampling.posterior import run_posterior
from harness.sampling.settings import BatchResult, SamplerSettings
from harness.sampling.units import UnitModel


@dataclass(frozen=True)
class CorrectionSettings:
    """GIDD's self-correction settings (its ``self_correction.yaml``: 128 steps, temperature 0.1,
    t0 = 0.01, patience 32, one token per step)."""

    steps: int = 128
    temperature: float = 0.1
    t0: float = 0.01
    patience: int = 32
    tokens_per_step: int = 1

    def checked(self) -> CorrectionSettings:
        """These settings, or a :class:`PrimebenchError` naming the bad one."""
        fix = "see docs/gidd.md (self-correction) for the settings and their ranges"
        for name in ("steps", "patience", "tokens_per_step"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "patience" else 1):
                raise PrimebenchError(f"self-correction {name} must be a positive integer, got {value!r}", fix=fix)
        if not (
            isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature) and self.temperature > 0
        ):
            raise PrimebenchError(f"self-correction temperature must be > 0, got {self.temperature!r}", fix=fix)
        if not (isinstance(self.t0, (int, float)) and 0.0 < self.t0 < 1.0):
            raise PrimebenchError(f"self-correction t0 must lie in (0, 1), got {self.t0!r}", fix=fix)
        return self

    def protocol(self) -> dict:
        return asdict(self)


def correct(
    units: UnitModel,
    y: torch.Tensor,
    fixed: torch.Tensor,
    settings: SamplerSettings,
    correction: CorrectionSettings,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Run the correction loop on (B, L) tokens ``y`` (``fixed`` positions kept): returns the corrected
    tokens, the denoiser calls per row (B,) and per-row outcomes (``changed`` tokens, ``converged``)."""
    rows = y.shape[0]
    start = y.clone()
    running = torch.ones(rows, dtype=torch.bool, device=y.device)
    converged = torch.zeros_like(running)
    best = torch.zeros(rows, dtype=torch.float64, device=y.device)
    waited = torch.zeros(rows, dtype=torch.long, device=y.device)
    calls = torch.zeros(rows, dtype=torch.long, device=y.device)
    k = min(correction.tokens_per_step, y.shape[1])
    for _ in range(correction.steps):
        if not bool(running.any()):
            break
        idx = torch.nonzero(running)[:, 0]
        cur = y[idx]
        log_p = units.log_probs(cur[..., None], correction.t0).to(settings.dtype)  # (b, L, C)
        calls[idx] += 1
        tempered = torch.log_softmax(log_p / correction.temperature, dim=-1)
        proposal = sample_categorical(
            logits=tempered, method=settings.method, dtype=settings.dtype, generator=generator
        )
        score = torch.where(proposal != cur, tempered.gather(-1, proposal[..., None])[..., 0].exp(), 0.0)
        score = score.masked_fill(fixed[idx], -1.0)
        top = torch.topk(score, k, dim=-1).indices
        new = cur.scatter(-1, top, proposal.gather(-1, top))
        agreement = (new == log_p.argmax(-1)).double().mean(-1)
        better = agreement > best[idx]
        best[idx] = torch.where(better, agreement, best[idx])
        waited[idx] = torch.where(better, 0, waited[idx] + 1)
        patience_out = waited[idx] > correction.patience
        same = (new == cur).all(-1)
        accept = ~patience_out & ~same
        y[idx] = torch.where(accept[:, None], new, cur)
        converged[idx] = same & ~patience_out
        running[idx] = accept
    changed = (y != start).sum(-1)
    return y, calls, {"corrected_tokens": changed, "correction_converged": converged.long()}


def run_self_correction(
    units: UnitModel,
    rows: int,
    settings: SamplerSettings,
    generator: torch.Generator | None,
    prefix: torch.Tensor | None,
) -> BatchResult:
    """The posterior sampler's T steps, then :func:`correct` (module docstring)."""
    first = run_posterior(units, rows, settings, generator, prefix)
    fixed = torch.zeros_like(first.tokens, dtype=torch.bool)
    if prefix is not None:
        fixed[:, : prefix.shape[1]] = True
    tokens, calls, per_row = correct(units, first.tokens.clone(), fixed, settings, settings.correction, generator)
    return BatchResult(
        tokens=tokens,
        nfe=first.nfe + calls,
        idle_steps=first.idle_steps,
        steps=first.steps,
        counts=dict(first.counts, corrected_tokens=int(per_row["corrected_tokens"].sum())),
        per_sample=dict(first.per_sample, correction_steps=calls),
    )


__all__ = ["CorrectionSettings", "correct", "run_self_correction"]
