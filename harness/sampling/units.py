"""The samplers' view of a masked diffusion model: L token positions of ``ell`` units each.

MDLM and the time-agnostic masked model mask whole tokens (ell = 1, unit mask id C); MDM-Prime
masks sub-tokens (ell digits in base b, unit mask id b). Every diffusion sampler works on a state
``y`` of shape (B, L, ell) and asks the family for whatever depends on what a unit is: the units of
a token and the codes they spell, the token distribution log p_theta(x^i = c | y) of shape
(B, L, C) (for Prime the joint restricted to V(y^i), the model's own carry-over setting), the joint
ancestral draw, the law of one unit's value and the codes that are no token (the family methods
listed in :mod:`harness.models.masked_diffusion`). So one sampler serves every family, it never
asks which family it drives, and the denoiser stays the model's.
"""

from __future__ import annotations

import torch

from harness.sampling.categorical import filter_nucleus, temper
from harness.sampling.settings import SamplerSettings


class UnitModel:
    """A masked-diffusion family seen as (B, L, ell) unit states; holds no state of its own.

    ``model`` is the family, ``seq_len`` the samples' length (default the model's); the samplers
    call its sampler methods (``joint_draw``, ``unit_log_marginals``, ``invalid_codes``) directly and
    reach the rest through this adapter."""

    def __init__(self, model, seq_len: int | None = None):
        self.model = model
        self.ell = int(model.units_per_token)
        self.process = model.process  # the family's forward process: what a still-noisy unit is
        self.vocab_size = int(model.vocab_size)
        self.seq_len = int(seq_len or model.seq_len)  # the canvas: at most the model's length
        self.time_conditioning = bool(model.time_conditioning)

    @property
    def device(self) -> torch.device:
        return self.model.device

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """(...) token ids -> (..., ell) units."""
        return self.model.sampler_units(x)

    def decode(self, y: torch.Tensor) -> torch.Tensor:
        """(B, L, ell) fully revealed units -> (B, L) codes (Prime codes may be >= C without carry-over)."""
        return self.model.sampler_tokens(y)

    def initial_state(self, rows: int, prefix: torch.Tensor | None, *, generator=None) -> torch.Tensor:
        """(rows, L, ell) all noise (the process's prior: all masked for the absorbing process, which
        draws nothing), except the leading ``prefix`` (rows, P) tokens, fixed context."""
        y = self.process.initial_state((rows, self.seq_len, self.ell), device=self.device, generator=generator)
        if prefix is not None and prefix.shape[1]:
            y[:, : prefix.shape[1]] = self.encode(prefix.to(self.device))
        return y

    def log_probs(self, y: torch.Tensor, t: float | torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """(B, L, ell) units at time t (a float, or (B,)) -> (B, L, C) log p_theta(x^i = c | y), float32.
        ``rows`` (bool, the batch's rows): which rows of the batch ``y`` holds, when only some are
        passed (a view with per-row state, :class:`harness.sampling.blocks.BlockUnits`, needs it).

        ``t`` only reaches time-conditioned networks; the others ignore it (their output is exact
        to reuse across steps, which is what makes caching exact).
        """
        return self.model.sampler_log_probs(y, _row_times(y, t))

    def log_scores(self, y: torch.Tensor, t: float | torch.Tensor) -> torch.Tensor:
        """(B, L, ell) units at time t -> (B, L, V) log concrete scores log p_t(v) / p_t(y) (the
        score samplers' call, :mod:`harness.sampling.scores`)."""
        return self.model.sampler_log_scores(y, _row_times(y, t))


def _row_times(y: torch.Tensor, t: float | torch.Tensor) -> torch.Tensor:
    """t (a float, or (B,)) as the (B,) float32 times of the batch ``y``."""
    return torch.as_tensor(t, dtype=torch.float32, device=y.device).expand(y.shape[0]).contiguous()


def shaped_log_probs(log_p: torch.Tensor, settings: SamplerSettings) -> torch.Tensor:
    """Apply temperature, then nucleus (top-p) filtering, to the token distribution (..., C).

    Returns log-probabilities (..., C) in the input dtype (classes cut by the nucleus are -inf). Rows
    that are one-hot (carried-over tokens) stay one-hot. No precision conversion happens here, and
    no check: ``settings`` were checked when they were built (:func:`harness.sampling.generate`).
    """
    if settings.temperature != 1.0:
        log_p = temper(log_p, settings.temperature)
    if settings.nucleus_p < 1.0:
        log_p = torch.log(filter_nucleus(torch.exp(log_p), settings.nucleus_p, settings.nucleus_rule))
    return log_p


__all__ = ["UnitModel", "shaped_log_probs"]
