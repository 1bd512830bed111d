"""MDLM (Sahoo et al. 2024): absorbing-mask diffusion with the SUBS parameterisation.

* mask id = C (one beyond the vocabulary); the network outputs C logits, i.e. the mask logit is
  -inf (SUBS "zero masking probabilities");
* unmasked positions are carried over: log p(x_0^i = z_t^i | z_t) = 0 (SUBS "carry-over");
* continuous-time NELBO: E_t[ -alpha'_t/(1 - alpha_t) * sum over masked i of -log p(x_0^i | z_t) ],
  with MDLM's log-linear schedule (weight 1/t) and one t per sequence from the stratified sampler
  t_i = (u_i + i)/B mapped into [eps, 1]; the training loss divides by the number of tokens.
* time conditioning off by default, as MDLM's OWT checkpoints (``model.time_conditioning``).

The likelihood it reports is a bound (an upper bound on the NLL of its any-order sampler).
"""

from __future__ import annotations

import torch

from harness.models import MODELS
from harness.models.masked_diffusion import MaskedDiffusion, MDLMConfig


def subs_log_probs(logits: torch.Tensor, z_t: torch.Tensor, mask_id: int) -> torch.Tensor:
    """SUBS: (B, L, C) logits, (B, L) z_t -> log-probabilities with unmasked tokens carried over."""
    log_p = torch.log_softmax(logits, dim=-1)
    visible = z_t != mask_id
    if log_p.requires_grad:  # training: out of place, so that backward can use log_p
        carried = torch.full_like(log_p, float("-inf")).scatter(-1, z_t.clamp_max(logits.shape[-1] - 1)[..., None], 0.0)
        return torch.where(visible[..., None], carried, log_p)
    if bool(visible.any()):  # evaluation and sampling: rewrite only the visible rows, in place
        ids = z_t[visible]
        rows = torch.full((ids.numel(), log_p.shape[-1]), float("-inf"), dtype=log_p.dtype, device=log_p.device)
        log_p[visible] = rows.scatter_(-1, ids[:, None], 0.0)
    return log_p


class MDLM(MaskedDiffusion):
    """Masked diffusion LM (SUBS parameterisation, continuous-time NELBO); NLL is an upper bound."""

    family = "mdlm"
    config_class = MDLMConfig
    table_order = 1
    release_formats = ("mdlm-hf:", "mdlm-ckpt:")

    def log_probs(
        self, z_t: torch.Tensor, t: torch.Tensor | None = None, attention_mask=None, x0: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, L) ids with mask id C -> (B, L, C) SUBS log-probabilities (float32)."""
        logits = self.backbone(z_t, t if self.time_conditioning else None, attention_mask)
        return subs_log_probs(logits, z_t, self.mask_id)


MODELS.register("mdlm", MDLM)
