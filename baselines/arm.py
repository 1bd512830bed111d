"""Autoregressive model (ARM): a causal backbone trained by next-token prediction.

Its likelihood is exact: -log p(x) = -sum_{i>=1} log p(x^i | x^{<i}). Following MDLM's AR baseline,
a block of L tokens scores its L - 1 shifted targets (the first token, BOS in wrapped data, is
given), so the per-token NLL divides by L - 1 (minus padding) rather than L.

With ``start_token=True`` (images, where there is no BOS in the data) the network gets one extra
input-only id, the start id C (vocab_in C + 1, vocab_out C), prepended to every row: all L tokens
are scored, so -log p(x) is exact over every dimension. ``log_probs`` then prepends it too, and
``log_probs(x[:, :i])[:, -1]`` is p(x^i | x^{<i}) for every i >= 0 (sampling needs no prefix).
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
        positions: str = "rope",
        image_shape: str = "",
        start_token: bool = False,
    ):
        from harness.positions import build_positions

        if time_conditioning:
            raise ValueError("the autoregressive model has no time input: set model.time_conditioning=false")
        if ell != 1:
            raise ValueError("model.ell only applies to the prime family; the ARM works on whole tokens (ell=1)")
        hparams = dict(d_model=d_model, n_layers=n_layers, n_heads=n_heads, mlp_ratio=mlp_ratio, dropout=dropout)
        super().__init__(
            vocab_size=vocab_size, seq_len=seq_len,
            hparams=dict(hparams, positions=positions, image_shape=image_shape, start_token=start_token),
        )
        self.start_token = bool(start_token)
        self.start_id = vocab_size if self.start_token else None
        extra = 1 if self.start_token else 0
        self.backbone = Backbone(
            BackboneConfig(vocab_in=vocab_size + extra, vocab_out=vocab_size, seq_len=seq_len + extra, causal=True, **hparams),
            positions=build_positions(positions, image_shape, d_model=d_model, seq_len=seq_len, offset=extra),
        )

    def _with_start(self, x: torch.Tensor) -> torch.Tensor:
        """(B, P) -> (B, 1 + P) with the start id C in front (start-token models only)."""
        start = torch.full((x.shape[0], 1), self.start_id, dtype=x.dtype, device=x.device)
        return torch.cat([start, x], dim=1)

    def log_probs(self, z_t: torch.Tensor, t: torch.Tensor | None = None, attention_mask=None) -> torch.Tensor:
        """(B, P) ids -> (B, P, C): position i holds log p(x^{i+1} = c | x^{<=i}).

        With a start token: (B, P) -> (B, P + 1, C), position i holds log p(x^i = c | x^{<i})."""
        if self.start_token:
            z_t = self._with_start(z_t)
            if attention_mask is not None:
                attention_mask = self._with_start(attention_mask.long()).clamp_max(1)
        return torch.log_softmax(self.backbone(z_t, None, attention_mask), dim=-1)

    def _target_nll(self, x0: torch.Tensor, attention_mask) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T) per-target nats and weights: T = L - 1 shifted targets, or all L with a start token."""
        self.check_tokens(x0)
        if self.start_token:
            inputs, targets = self._with_start(x0)[:, :-1], x0
            in_mask = None if attention_mask is None else self._with_start(attention_mask.long()).clamp_max(1)[:, :-1]
            out_mask = attention_mask
        else:
            inputs, targets = x0[:, :-1], x0[:, 1:]
            in_mask = None if attention_mask is None else attention_mask[:, :-1]
            out_mask = None if attention_mask is None else attention_mask[:, 1:]
        logits = self.backbone(inputs, None, in_mask)
        nll = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T)
        weight = torch.ones_like(nll) if out_mask is None else out_mask.to(nll.dtype)
        return nll * weight, weight

    def loss(self, x0: torch.Tensor, *, generator: torch.Generator | None = None, attention_mask=None) -> torch.Tensor:
        """Mean next-token cross-entropy over the scored targets (nats per token)."""
        nll, weight = self._target_nll(x0, attention_mask)
        return nll.sum() / weight.sum().clamp_min(1)

    @torch.no_grad()
    def nll(self, x0: torch.Tensor, *, num_samples: int = 1, generator=None, attention_mask=None) -> NLL:
        """Exact NLL per sequence in nats over the L - 1 shifted targets (all L with a start token); ``num_samples`` is ignored."""
        nll, weight = self._target_nll(x0, attention_mask)
        nats = nll.double().sum(-1)
        return NLL(nats=nats, tokens=weight.double().sum(-1), kind="exact", stderr=torch.zeros_like(nats), num_samples=1)


MODELS.register("arm", ARM)
