"""Small model helpers shared by the tests (random weights so that outputs depend on inputs)."""

from __future__ import annotations

import torch

from harness.models import build_model


def randomize(model, seed: int, std: float = 0.2):
    """Overwrite every parameter with N(0, std^2) draws from a seeded generator; eval mode."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(std * torch.randn(p.shape, generator=g))
    return model.eval()


def tiny(family: str, *, C: int, L: int, seed: int = 0, std: float = 0.3, **kwargs):
    """A tiny model (d_model 16, one layer) re-initialised with N(0, std^2) weights."""
    model = build_model(family, vocab_size=C, seq_len=L, d_model=16, n_layers=1, n_heads=2, **kwargs)
    return randomize(model, seed, std)
