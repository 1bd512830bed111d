"""Whether autograd records a tensor's operations: the one test every evaluation fast path asks.

Several computations have two forms that give the same numbers bit for bit: the training form,
out of place so that backward finds what it saved, and the evaluation form, which overwrites its
own intermediates. :func:`tracked` picks between them."""

from __future__ import annotations

import torch


def tracked(t: torch.Tensor) -> bool:
    """True when grad mode is on and ``t`` requires grad, so that operations on ``t`` join a graph
    and must stay out of place; False in evaluation and sampling, where a computation may overwrite
    the tensors it made itself."""
    return torch.is_grad_enabled() and t.requires_grad


__all__ = ["tracked"]
