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
from harness.sampling.output import SamplerSettings
from prime.subtokens import decode

DIFFUSION_FAMILIES = ("mdlm", "masked", "prime")


class UnitModel:
    """Adapter from a model family to (B, L, ell) unit states; holds no state of its own."""

    def __init__(self, model):
        self.model = model
        self.is_prime = model.family == "prime"
        self.ell = int(model.ell) if self.is_prime else 1
        self.mask_id = int(model.mask_id)  # C for MDLM/masked, base for Prime
        self.vocab_size = int(model.vocab_size)
        self.seq_len = int(model.seq_len)
        self.base = int(model.base) if self.is_prime else self.vocab_size
        self.carry_over = bool(getattr(model, "carry_over", True))
        self.time_conditioning = bool(getattr(model, "time_conditioning", False))

    @property
    def device(self) -> torch.device:
        return self.model.device

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """(..., ) token ids -> (..., ell) units."""
        return self.model.encode(x) if self.is_prime else x[..., None]

    def decode(self, y: torch.Tensor) -> torch.Tensor:
        """(B, L, ell) fully revealed units -> (B, L) codes (Prime codes may be >= C without carry-over)."""
        return decode(y, self.base) if self.is_prime else y[..., 0]

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
        z = y if self.is_prime else y[..., 0]
        return self.model.log_probs(z, tt)


def shaped_log_probs(log_p: torch.Tensor, settings: SamplerSettings) -> torch.Tensor:
    """Apply temperature, then nucleus (top-p) filtering, to the token distribution (…, C).

    Returns log-probabilities in the input dtype (classes cut by the nucleus are -inf). Rows that
    are one-hot (carried-over tokens) stay one-hot. No precision conversion happens here.
    """
    if settings.temperature != 1.0:
        log_p = apply_temperature(log_p, settings.temperature)
    if settings.nucleus_p < 1.0:
        log_p = torch.log(nucleus_filter(torch.exp(log_p), settings.nucleus_p))
    return log_p


__all__ = ["DIFFUSION_FAMILIES", "UnitModel", "shaped_log_probs"]
