"""primebench harness: everything shared by the model families (CLI, config, data, backbone, ...)."""

from __future__ import annotations

__version__ = "0.1.0"


def load(path, *, ema: bool = True, device: str = "cpu"):
    """Load ``(model, tokenizer, config)`` from a checkpoint folder written by ``primebench train``."""
    from harness.checkpoint import load_checkpoint

    return load_checkpoint(path, ema=ema, device=device)
