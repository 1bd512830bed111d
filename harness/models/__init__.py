"""Model families and the registry that builds them.

A model family wraps a :class:`~harness.backbone.Backbone` and owns its forward process, training
loss and likelihood estimators. Families are registered by name (``arm``, ``mdlm``, ``masked``,
``prime``) and built with :func:`build_model`::

    from harness.models import build_model
    m = build_model("arm", vocab_size=257, seq_len=64, d_model=64, n_layers=2, n_heads=2)
    m.loss(x0)            # scalar training objective
    m.nll(x0)             # typed NLL: per-sequence nats, token count, kind, standard error

Every family implements:

* ``log_probs(z_t, t)`` -> (B, L, C) log p_theta(x_0^i = c | z_t);
* ``loss(x0, *, generator, attention_mask)`` -> scalar;
* ``nll(x0, *, num_samples, generator, attention_mask)`` -> :class:`harness.results.NLL`.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from harness.registry import Registry
from harness.results import NLL

MODELS: Registry[Callable[..., "ModelFamily"]] = Registry("model family")

_FAMILY_MODULES = ("baselines.arm", "baselines.mdlm", "baselines.masked", "prime.model")


def _ensure_registered() -> None:
    import importlib

    for name in _FAMILY_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:  # a family module not written yet must not hide the others
            if exc.name != name:
                raise


class ModelFamily(nn.Module):
    """Base class: holds the backbone, the vocabulary size C and the sequence length L."""

    family: str = ""
    #: what ``nll`` returns: "exact" or "bound" (Prime's token-joint estimator is "paper-objective")
    nll_kind: str = "exact"

    def __init__(self, *, vocab_size: int, seq_len: int, hparams: dict[str, Any]):
        super().__init__()
        self.vocab_size = int(vocab_size)
        self.seq_len = int(seq_len)
        self.hparams = dict(hparams)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def check_tokens(self, x0: torch.Tensor) -> None:
        """Fail loudly on ids outside [0, C) or sequences longer than the model's L."""
        if x0.dim() != 2:
            raise ValueError(f"expected token ids of shape (B, L), got {tuple(x0.shape)}")
        if x0.shape[1] > self.seq_len:
            raise ValueError(f"sequence length {x0.shape[1]} exceeds the model's seq_len={self.seq_len}")
        if x0.numel() and (int(x0.min()) < 0 or int(x0.max()) >= self.vocab_size):
            raise ValueError(
                f"token ids must lie in [0, {self.vocab_size}); got range [{int(x0.min())}, {int(x0.max())}]: "
                "the data was tokenized with a different vocabulary than the model's"
            )

    def forward(self, x0: torch.Tensor, *, generator: torch.Generator | None = None, attention_mask=None) -> torch.Tensor:
        """The training loss, so that DistributedDataParallel's forward hooks see it."""
        return self.loss(x0, generator=generator, attention_mask=attention_mask)

    def log_probs(self, z_t: torch.Tensor, t: torch.Tensor | None = None, attention_mask=None) -> torch.Tensor:
        raise NotImplementedError

    def loss(self, x0: torch.Tensor, *, generator: torch.Generator | None = None, attention_mask=None) -> torch.Tensor:
        raise NotImplementedError

    def nll(
        self,
        x0: torch.Tensor,
        *,
        num_samples: int = 1,
        generator: torch.Generator | None = None,
        attention_mask=None,
    ) -> NLL:
        raise NotImplementedError


def build_model(family: str, *, vocab_size: int, seq_len: int, **kwargs: Any) -> ModelFamily:
    """Build a registered family. Keyword arguments are the ``model.*`` config keys."""
    _ensure_registered()
    return MODELS.get(family)(vocab_size=vocab_size, seq_len=seq_len, **kwargs)


def model_from_config(model_cfg, *, vocab_size: int, seq_len: int) -> ModelFamily:
    """Build from a :class:`harness.config.ModelConfig`."""
    import dataclasses

    kwargs = dataclasses.asdict(model_cfg)
    family = kwargs.pop("family")
    return build_model(family, vocab_size=vocab_size, seq_len=seq_len, **kwargs)


def family_names() -> list[str]:
    _ensure_registered()
    return MODELS.names()


__all__ = ["MODELS", "ModelFamily", "build_model", "model_from_config", "family_names"]
