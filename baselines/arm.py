"""Autoregressive model (ARM): a causal backbone trained by next-token prediction.

Its likelihood is exact: -log p(x) = -sum_{i>=1} log p(x^i | x^{<i}). Following MDLM's AR baseline,
a block of L tokens scores its L - 1 shifted targets (the first token, BOS in wrapped data, is
given), so the per-token NLL divides by L - 1 (minus padding) rather than L.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from harness.backbone import Backbone, BackboneConfig
from harness.models import MODELS, ModelFamily
from harness.results import NLL


class ARM(ModelFamily):
    """Autoregressive transformer (causal attention, next-token loss); exact NLL over L - 1 targets."""

    family = "arm"
    nll_kind = "exact"
    mask_id = None

    def __init__(
        self,
        *,
        vocab_size: int,
        seq_len: int,
        d_model: int = 128,
        n_layers: int = 2,
        n_heads: int = 4,
        mlp_ratio: int = 4,
        dropout: float = 0.0,
        time_conditioning: bool = False,
        cond_dim: int = 64,
        schedule: str = "loglinear",
        ell: int = 1,
        carry_over: bool = True,
    ):
        if time_conditioning:
            raise ValueError("the autoregressive model has no time input: set model.time_conditioning=false")
        if ell != 1:
            raise ValueError("model.ell only applies to the prime family; the ARM works on whole tokens (ell=1)")
        hparams = dict(d_model=d_model, n_layers=n_layers, n_heads=n_heads, mlp_ratio=mlp_ratio, dropout=dropout)
        super().__init__(vocab_size=vocab_size, seq_len=seq_len, hparams=hparams)
        self.backbone = Backbone(
            BackboneConfig(vocab_in=vocab_size, vocab_out=vocab_size, seq_len=seq_len, causal=True, **hparams)
        )

    def log_probs(self, z_t: torch.Tensor, t: torch.Tensor | None = None, attention_mask=None) -> torch.Tensor:
        """(B, L) ids -> (B, L, C): position i holds log p(x^{i+1} = c | x^{<=i})."""
        return torch.log_softmax(self.backbone(z_t, None, attention_mask), dim=-1)

    def _target_nll(self, x0: torch.Tensor, attention_mask) -> tuple[torch.Tensor, torch.Tensor]:
        self.check_tokens(x0)
        logits = self.backbone(x0[:, :-1], None, None if attention_mask is None else attention_mask[:, :-1])
        nll = F.cross_entropy(logits.transpose(1, 2), x0[:, 1:], reduction="none")  # (B, L-1)
        weight = torch.ones_like(nll) if attention_mask is None else attention_mask[:, 1:].to(nll.dtype)
        return nll * weight, weight

    def loss(self, x0: torch.Tensor, *, generator: torch.Generator | None = None, attention_mask=None) -> torch.Tensor:
        """Mean next-token cross-entropy over the scored targets (nats per token)."""
        nll, weight = self._target_nll(x0, attention_mask)
        return nll.sum() / weight.sum().clamp_min(1)

    @torch.no_grad()
    def nll(self, x0: torch.Tensor, *, num_samples: int = 1, generator=None, attention_mask=None) -> NLL:
        """Exact NLL per sequence in nats over the L - 1 shifted targets (``num_samples`` is ignored)."""
        nll, weight = self._target_nll(x0, attention_mask)
        nats = nll.double().sum(-1)
        return NLL(nats=nats, tokens=weight.double().sum(-1), kind="exact", stderr=torch.zeros_like(nats), num_samples=1)


MODELS.register("arm", ARM)
