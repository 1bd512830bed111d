"""The samplers' view of a masked diffusion model: L token positions of ``ell`` units each.

MDLM and the time-agnostic masked model mask whole tokens (ell = 1, unit mask id C); MDM-Prime
masks sub-tokens (ell digits in base b, unit mask id b). Every diffusion sampler works on a state
``y`` of shape (B, L, ell) and asks :class:`UnitModel` for the token distribution
log p_theta(x^i = c | y), shape (B, L, C) (for Prime the joint restricted to V(y^i), the model's
own carry-over setting). So one sampler serves every family, and the denoiser stays the model's.
"""

from __future__ import annotations

import torch

from harness.sampling.categorical import apply_temperature, nucleus_filter
from harness.sampling.settings import SamplerSettings
from prime.subtokens import decode


class UnitModel:
    """Adapter from a masked-diffusion family to (B, L, ell) unit states; holds no state of its own."""

    def __init__(self, model):
        self.model = model
        #: sub-token units (MDM-Prime): the network takes (B, L, ell) and codes decode from digits
        self.subtokens = bool(model.subtokens)
        self.ell = int(model.units_per_token)
        self.mask_id = int(model.mask_id)  # C for MDLM/masked, base for Prime
        self.vocab_size = int(model.vocab_size)
        self.seq_len = int(model.seq_len)
        self.base = int(model.unit_base)
        self.carry_over = bool(getattr(model, "carry_over", True))
        self.time_conditioning = bool(model.time_conditioning)

    @property
    def device(self) -> torch.device:
        return self.model.device

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """(..., ) token ids -> (..., ell) units."""
        units = self.model.units(x)
        return units if self.subtokens else units[..., None]

    def decode(self, y: torch.Tensor) -> torch.Tensor:
        """(B, L, ell) fully revealed units -> (B, L) codes (Prime codes may be >= C without carry-over)."""
        return decode(y, self.base) if self.subtokens else y[..., 0]

    def initial_state(self, rows: int, prefix: torch.Tensor | None) -> torch.Tensor:
        """(rows, L, ell) all masked, except the leading ``prefix`` (rows, P) tokens, fixed context."""
        y = torch.full((rows, self.seq_len, self.ell), self.mask_id, dtype=torch.long, device=self.device)
        if prefix is not None and prefix.shape[1]:
            y[:, : prefix.shape[1]] = self.encode(prefix.to(self.device))
        return y

    def log_probs(self, y: torch.Tensor, t: float | torch.Tensor) -> torch.Tensor:
        """(B, L, ell) units at time t -> (B, L, C) log p_theta(x^i = c | y), float32.

        ``t`` only reaches time-conditioned networks; the others ignore it (their output is exact
        to reuse across steps, which is what makes caching exact).
        """
        rows = y.shape[0]
        tt = torch.as_tensor(t, dtype=torch.float32, device=y.device).expand(rows).contiguous()
        return self.model.log_probs(y if self.subtokens else y[..., 0], tt)


def shaped_log_probs(log_p: torch.Tensor, settings: SamplerSettings) -> torch.Tensor:
    """Apply temperature, then nucleus (top-p) filtering, to the token distribution (…, C).

    Returns log-probabilities in the input dtype (classes cut by the nucleus are -inf). Rows that
    are one-hot (carried-over tokens) stay one-hot. No precision conversion happens here.
    """
    if settings.temperature != 1.0:
        log_p = apply_temperature(log_p, settings.temperature)
    if settings.nucleus_p < 1.0:
        log_p = torch.log(nucleus_filter(torch.exp(log_p), settings.nucleus_p, settings.nucleus_rule))
    return log_p


__all__ = ["UnitModel", "shaped_log_probs"]
