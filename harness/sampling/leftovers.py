"""Units left masked or invalid after the last sampler step: noise removal and invalid Prime codes.

* :func:`fill_masked` (noise removal): units still masked when the grid stops at ``t_end > 0``
  are filled from one more denoiser call, by the argmax of the token distribution (MDLM's
  ``noise_removal``) or by a draw from it (MDM-Prime's code samples).
* :func:`resolve_invalid`: without carry-over (``carry_over=False``, the Prime paper's ablation)
  the sub-tokens of one token can come from different token draws and spell a code >= C, which
  is no token at all (no guard exists in the official code). We re-mask every sub-token of such a
  token and draw the whole token again from the denoiser given the rest of the sequence; that
  distribution has C classes only, so the result is valid. The count is reported, never hidden.
"""

from __future__ import annotations

import torch

from harness.sampling.categorical import sample_categorical
from harness.sampling.settings import SamplerSettings
from harness.sampling.units import UnitModel, shaped_log_probs

INVALID_RESOLUTION = (
    "each token whose sub-tokens spell a code >= C had all its sub-tokens re-masked and was drawn "
    "again from the denoiser's token distribution (C valid classes) given the rest of the sequence; "
    "one extra denoiser call per affected sample"
)


def _draw_tokens(
    log_p: torch.Tensor, how: str, settings: SamplerSettings, generator: torch.Generator | None
) -> torch.Tensor:
    """(B, L, C) shaped log-probs -> (B, L) token ids by argmax or by a draw."""
    if how == "argmax":
        return log_p.argmax(-1)
    return sample_categorical(probs=torch.exp(log_p), method=settings.method, dtype=settings.dtype, generator=generator)


def fill_masked(
    units: UnitModel,
    y: torch.Tensor,
    t: float,
    settings: SamplerSettings,
    generator: torch.Generator | None,
    nfe: torch.Tensor,
) -> tuple[torch.Tensor, int]:
    """Fill every still-masked unit of y (B, L, ell) in place of a copy; returns (y, units filled).

    One denoiser call (at time ``t``) per sample that has a masked unit, added to ``nfe`` (B,).
    """
    masked = units.process.unrevealed(y)
    rows = masked.flatten(1).any(-1)
    if not bool(rows.any()):
        return y, 0
    y_rows = y[rows]
    log_p = shaped_log_probs(units.log_probs(y_rows, t, rows), settings)
    nfe[rows] += 1
    x_hat = _draw_tokens(log_p, settings.noise_removal, settings, generator)
    filled = torch.where(masked[rows], units.encode(x_hat), y_rows)
    y = y.clone()
    y[rows] = filled
    return y, int(masked.sum())


def resolve_invalid(
    units: UnitModel,
    y: torch.Tensor,
    t: float,
    settings: SamplerSettings,
    generator: torch.Generator | None,
    nfe: torch.Tensor,
) -> tuple[torch.Tensor, int | None]:
    """Redraw tokens whose fully revealed units y (B, L, ell) spell a code >= C (the family's
    ``invalid_codes``); returns (y, tokens redrawn), the count None for a family whose units never
    spell one. One denoiser call (at time ``t``) per affected sample, added to ``nfe`` (B,)."""
    invalid = units.model.invalid_codes(y)  # (B, L) or None
    if invalid is None:
        return y, None
    count = int(invalid.sum())
    if count == 0:
        return y, 0
    rows = invalid.any(-1)
    y_rows = y[rows].clone()
    bad = invalid[rows]
    y_rows = units.process.noise(y_rows, bad[..., None].expand_as(y_rows))  # every unit of a bad token back to noise
    log_p = shaped_log_probs(units.log_probs(y_rows, t, rows), settings)
    nfe[rows] += 1
    x_hat = sample_categorical(
        probs=torch.exp(log_p), method=settings.method, dtype=settings.dtype, generator=generator
    )
    y_rows = torch.where(bad[..., None], units.encode(x_hat), y_rows)
    y = y.clone()
    y[rows] = y_rows
    if bool(units.model.invalid_codes(y).any()):  # pragma: no cover - C classes only
        raise RuntimeError("a redrawn token is still an invalid code; the denoiser has more than C classes")
    return y, count


__all__ = ["INVALID_RESOLUTION", "fill_masked", "resolve_invalid"]
