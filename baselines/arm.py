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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

import torch
import torch.nn.functional as F

from harness.backbone import Backbone, BackboneConfig
from harness.diffusion import Generators
from harness.errors import ConfigError
from harness.models import MODELS
from harness.models.base import Estimator, ModelConfig, ModelFamily
from harness.nll import NLL
from harness.positions import build_positions

EXACT = Estimator("exact", "exact", "", "exact -sum log p(x^i | x^{<i}) over the scored targets")


@dataclass(frozen=True)
class ARMConfig(ModelConfig):
    """The ARM adds ``start_token``: an input-only start id C so that all L tokens are scored."""

    start_token: bool = False


class ARM(ModelFamily):
    """Autoregressive transformer (causal attention, next-token loss); exact NLL over L - 1 targets."""

    family = "arm"
    config_class = ARMConfig
    table_order = 0
    default_sampler = "autoregressive"
    token_by_token_sampler = "autoregressive"
    autoregressive = True
    samplers = ("autoregressive",)
    forward_process = "none"
    release_formats = ("ar-ckpt:", "hf:")
    estimators = (EXACT,)
    token_convention = (
        "exact NLL of the L-1 shifted targets of each row (the first token is given), as MDLM's AR baseline"
    )

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
        positions: str = "rope",
        image_shape: str = "",
        start_token: bool = False,
        mixer_width: int = 0,
        mixer_placement: str = "input",
    ):

        hparams = dict(d_model=d_model, n_layers=n_layers, n_heads=n_heads, mlp_ratio=mlp_ratio, dropout=dropout)
        if mixer_width:  # recorded only when on, so the plain network's hyper-parameters are unchanged
            hparams.update(mixer_width=int(mixer_width), mixer_placement=mixer_placement)
        super().__init__(
            vocab_size=vocab_size,
            seq_len=seq_len,
            hparams=dict(hparams, positions=positions, image_shape=image_shape, start_token=start_token),
        )
        self.start_token = bool(start_token)
        self.start_id = vocab_size if self.start_token else None
        extra = 1 if self.start_token else 0
        self.backbone = Backbone(
            BackboneConfig(
                vocab_in=vocab_size + extra, vocab_out=vocab_size, seq_len=seq_len + extra, causal=True, **hparams
            ),
            positions=build_positions(positions, image_shape, d_model=d_model, seq_len=seq_len, offset=extra),
        )

    # -- facts --------------------------------------------------------------------------------
    def scored_positions(self, x0: torch.Tensor, attention_mask=None, corruptible=None) -> torch.Tensor:
        """The L - 1 shifted targets (the first token is given), or all L with a start token."""
        scored = self.scored_tokens(x0, attention_mask, corruptible)
        if not self.start_token:
            scored = scored.clone()
            scored[:, 0] = False
        return scored

    @property
    def row_capacity(self) -> int:
        """L + 1 without a start token: the input is the row minus its last token."""
        return self.seq_len if self.start_token else self.seq_len + 1

    @classmethod
    def check_image_config(cls, cfg: ARMConfig) -> None:
        if not cfg.start_token:
            raise ConfigError(
                "an ARM on images needs model.start_token=true so that every pixel is scored",
                fix="set model.start_token=true (the tiny-digits/arm preset does)",
            )

    image_token_note = " (the ARM conditions the first pixel on its start token)"

    @property
    def image_unscored_first_pixel(self) -> str | None:
        if self.start_token:
            return None
        return "this ARM has no start token: its first pixel is unscored, so bits/dim would not be exact"

    # -- the network ----------------------------------------------------------------------------
    def _with_start(self, x: torch.Tensor) -> torch.Tensor:
        """(B, P) -> (B, 1 + P) with the start id C in front (start-token models only)."""
        start = torch.full((x.shape[0], 1), self.start_id, dtype=x.dtype, device=x.device)
        return torch.cat([start, x], dim=1)

    def log_probs(
        self, z_t: torch.Tensor, t: torch.Tensor | None = None, attention_mask=None, x0: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, P) ids -> (B, P, C): position i holds log p(x^{i+1} = c | x^{<=i}) (``t`` and ``x0`` unused).

        With a start token: (B, P) -> (B, P + 1, C), position i holds log p(x^i = c | x^{<i})."""
        if self.start_token:
            z_t = self._with_start(z_t)
            if attention_mask is not None:
                attention_mask = self._with_start(attention_mask.long()).clamp_max(1)
        return torch.log_softmax(self.backbone(z_t, None, attention_mask), dim=-1)

    def _targets(self, x0: torch.Tensor, attention_mask, corruptible, max_len: int | None = None):
        """Inputs, targets, input mask, (B, T) target weights: T = L - 1 shifted targets, or all L
        with a start token; a target counts if it is a real token and ``corruptible`` marks it."""
        self.check_tokens(x0, max_len)
        scored = (
            None
            if attention_mask is None and corruptible is None
            else self.scored_tokens(x0, attention_mask, corruptible)
        )
        if self.start_token:
            inputs, targets = self._with_start(x0)[:, :-1], x0
            in_mask = None if attention_mask is None else self._with_start(attention_mask.long()).clamp_max(1)[:, :-1]
            out_mask = scored
        else:
            inputs, targets = x0[:, :-1], x0[:, 1:]
            in_mask = None if attention_mask is None else attention_mask[:, :-1]
            out_mask = None if scored is None else scored[:, 1:]
        return inputs, targets, in_mask, out_mask

    def _target_nll(self, x0: torch.Tensor, attention_mask, corruptible=None, max_len: int | None = None):
        """(B, T) per-target nats (zero where not scored), weights, and the logits."""
        inputs, targets, in_mask, out_mask = self._targets(x0, attention_mask, corruptible, max_len)
        logits = self.backbone(inputs, None, in_mask)
        nll = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T)
        weight = torch.ones_like(nll) if out_mask is None else out_mask.to(nll.dtype)
        return nll * weight, weight, logits, targets

    def loss(self, x0: torch.Tensor, *, generator: torch.Generator | None = None, attention_mask=None) -> torch.Tensor:
        """Mean next-token cross-entropy over the scored targets (nats per token)."""
        nll, weight, _, _ = self._target_nll(x0, attention_mask)
        return nll.sum() / weight.sum().clamp_min(1)

    @overload
    def nll(
        self,
        x0: torch.Tensor,
        *,
        estimators: None = None,
        num_samples: int = 1,
        generator: Generators = None,
        attention_mask: torch.Tensor | None = None,
        corruptible: torch.Tensor | None = None,
        time_sampler: str | None = None,
    ) -> NLL: ...

    @overload
    def nll(
        self,
        x0: torch.Tensor,
        *,
        estimators: Sequence[str],
        num_samples: int = 1,
        generator: Generators = None,
        attention_mask: torch.Tensor | None = None,
        corruptible: torch.Tensor | None = None,
        time_sampler: str | None = None,
    ) -> list[NLL]: ...

    @torch.no_grad()
    def nll(
        self,
        x0: torch.Tensor,
        *,
        estimators: Sequence[str] | None = None,
        num_samples: int = 1,
        generator: Generators = None,
        attention_mask: torch.Tensor | None = None,
        corruptible: torch.Tensor | None = None,
        time_sampler: str | None = None,
    ) -> NLL | list[NLL]:
        """Exact NLL per sequence of ``x0`` (B, L): nats (B,) over the scored targets (the L - 1
        shifted ones, all L with a start token, only ``corruptible`` (B, L) ones if given).

        ``estimators``: a list of names (only ``exact``), one NLL each; None: one NLL.
        ``num_samples``, ``generator`` and ``time_sampler`` do not apply and are ignored."""
        names = [None] if estimators is None else list(estimators)
        for name in names:
            self.estimator(name)
        out = self._exact(x0, attention_mask, corruptible, None)[0]
        return out if estimators is None else [out for _ in names]

    def _exact(self, x0: torch.Tensor, attention_mask, corruptible, max_len: int | None):
        """The exact :class:`NLL` of ``x0`` (B, L) and, for the greedy check, the logits (B, T, C), the
        targets (B, T) and their weights (B, T) (1 where scored)."""
        nll, weight, logits, targets = self._target_nll(x0, attention_mask, corruptible, max_len)
        nats = nll.double().sum(-1)
        out = NLL(nats=nats, tokens=weight.double().sum(-1), kind="exact", stderr=torch.zeros_like(nats), num_samples=1)
        return out, logits, targets, weight

    @torch.no_grad()
    def greedy_matches(self, x0: torch.Tensor, *, attention_mask=None, corruptible: torch.Tensor) -> torch.Tensor:
        """(B,) bool: the argmax of p(x^i | x^{<i}) is x^i at every scored target."""
        inputs, targets, in_mask, out_mask = self._targets(x0, attention_mask, corruptible, self.row_capacity)
        logits = self.backbone(inputs, None, in_mask)
        return ((logits.argmax(-1) == targets) | ~out_mask).all(-1)

    @torch.no_grad()
    def score(
        self,
        x0: torch.Tensor,
        *,
        corruptible: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        greedy: bool = False,
        num_samples: int = 1,
        generator: Generators = None,
        time_sampler: str | None = None,
    ) -> tuple[NLL, torch.Tensor | None]:
        """The exact NLL and the greedy check (B,) from one forward pass; rows ``x0`` (B, L) may hold
        ``row_capacity`` tokens. ``num_samples``, ``generator`` and ``time_sampler`` are ignored."""
        out, logits, targets, weight = self._exact(x0, attention_mask, corruptible, self.row_capacity)
        return out, (((logits.argmax(-1) == targets) | (weight == 0)).all(-1) if greedy else None)


MODELS.register("arm", ARM)
