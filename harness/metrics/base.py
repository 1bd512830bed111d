"""The one base of every metric: float64 states, update/compute/reset, one distributed reduce.

In the spirit of torchmetrics' ``add_state(name, default, dist_reduce_fx="sum")``: a metric
declares its states once; :meth:`Accumulator.reset` restores the defaults and
:meth:`Accumulator.all_reduce` sums every ``"sum"`` state over the torch.distributed ranks in a
single collective (one flat float64 tensor). ``"cat"`` states are Python lists of per-item values,
joined over ranks in rank order (for metrics that need every item, such as a ratio's standard
error). Float64 sums do not depend on how items are split into batches, up to float64 rounding.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from harness import distributed

REDUCTIONS = ("sum", "cat")


class Accumulator:
    """A metric's states; subclasses call ``add_state`` in ``__init__`` and define update/compute."""

    def __init__(self) -> None:
        self._defaults: dict[str, torch.Tensor | list] = {}
        self._reductions: dict[str, str] = {}

    def add_state(self, name: str, default: Any = 0.0, dist_reduce_fx: str = "sum") -> None:
        """Declare state ``name``: a float64 tensor summed over ranks (``"sum"``; a number or a
        tensor of any shape as default), or a list joined over ranks (``"cat"``; default ``[]``)."""
        if dist_reduce_fx not in REDUCTIONS:
            raise ValueError(f"dist_reduce_fx must be one of {REDUCTIONS}, got {dist_reduce_fx!r}")
        if dist_reduce_fx == "cat":
            if default != []:
                raise ValueError(f"a 'cat' state starts as an empty list, got {default!r}")
            self._defaults[name] = []
        else:
            self._defaults[name] = torch.as_tensor(default, dtype=torch.float64).detach().clone()
        self._reductions[name] = dist_reduce_fx
        setattr(self, name, self._fresh(name))

    def _fresh(self, name: str) -> torch.Tensor | list:
        default = self._defaults[name]
        return [] if isinstance(default, list) else default.clone()

    def reset(self) -> None:
        """Every state back to its default."""
        for name in self._defaults:
            setattr(self, name, self._fresh(name))

    def update(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError

    def compute(self) -> Any:
        raise NotImplementedError

    def _sum_states(self) -> list[str]:
        return [name for name, fx in self._reductions.items() if fx == "sum"]

    def state(self) -> torch.Tensor:
        """Every ``"sum"`` state flattened into one float64 vector, in declaration order."""
        parts = [getattr(self, name).reshape(-1) for name in self._sum_states()]
        return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)

    def load_state(self, flat: torch.Tensor) -> None:
        """Set the ``"sum"`` states from a vector laid out as :meth:`state` (e.g. a sum of them)."""
        flat = flat.detach().to(device="cpu", dtype=torch.float64)
        offset = 0
        for name in self._sum_states():
            shape = self._defaults[name].shape
            size = self._defaults[name].numel()
            setattr(self, name, flat[offset : offset + size].reshape(shape).clone())
            offset += size
        if offset != flat.numel():
            raise ValueError(f"state vector has {flat.numel()} entries, this metric has {offset}")

    def all_reduce(self) -> None:
        """Sum the ``"sum"`` states over torch.distributed ranks in one collective and join the
        ``"cat"`` states in rank order; a no-op in a single process. Call once, before ``compute``."""

        if not (dist.is_available() and dist.is_initialized()):
            return
        self.load_state(distributed.all_reduce_sum(self.state()))
        cats = [name for name, fx in self._reductions.items() if fx == "cat"]
        if cats:
            parts: list[Any] = [None] * distributed.world_size()
            dist.all_gather_object(parts, [getattr(self, name) for name in cats])
            for i, name in enumerate(cats):
                setattr(self, name, [item for part in parts for item in part[i]])
