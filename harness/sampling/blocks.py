"""Block-by-block sampling (BD3-LM): each block of ``model.sampling_block_size`` tokens is drawn by a
registered in-block sampler (ancestral with its two-stage or joint draw, or first-hitting), given
the finished blocks before it, which sit in the network's key-value cache.

The in-block sampler runs unchanged on a view of the model whose sequence is the current block
(:class:`BlockUnits`): its grid of T steps, caching, draws, dtype and noise removal are those of
:mod:`harness.sampling.ancestral` and :mod:`harness.sampling.first_hitting`, per block. After a
block is finished, one forward pass over its clean tokens appends it to the cache
(``cache_fills`` in the stats), as the BD3-LM code's ``store_kv`` call does. Per sample, NFE and idle
steps are summed over the blocks and ``steps`` is T times the number of blocks drawn. A prefix
fills whole blocks directly (they are cached, never sampled) and fixes the leading positions of the
block it ends in.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from harness.sampling.settings import BatchResult, SamplerSettings
from harness.sampling.units import UnitModel


class BlockUnits(UnitModel):
    """The current block of a block-by-block sampled model as a sequence of its own: ``length``
    positions after the ``cache``'s finished ones."""

    def __init__(self, model, cache, length: int):
        super().__init__(model)
        self.cache = cache
        self.seq_len = int(length)

    def log_probs(self, y: torch.Tensor, t: float | torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        return self.model.block_log_probs(y[..., 0], self.cache, rows)


def run_by_blocks(
    run: Callable[..., BatchResult],
    model,
    rows: int,
    settings: SamplerSettings,
    generator: torch.Generator | None,
    prefix: torch.Tensor | None,
) -> BatchResult:
    """Draw ``rows`` samples block by block with the in-block sampler ``run`` (a registered
    sampler's run function); ``prefix`` (rows, P) tokens are fixed context."""
    size, length = int(model.sampling_block_size), int(settings.seq_len or model.seq_len)
    device = model.device
    given = 0 if prefix is None else prefix.shape[1]
    cache = model.new_sampling_cache()
    tokens = torch.empty(rows, length, dtype=torch.long, device=device)
    nfe, idle, steps = (torch.zeros(rows, dtype=torch.long, device=device) for _ in range(3))
    counts: dict[str, int] = {"cache_fills": 0}
    per_sample: dict[str, list[torch.Tensor]] = {}
    for start in range(0, length, size):
        end = min(start + size, length)
        if end <= given:
            block = prefix[:, start:end]
        else:
            fixed = prefix[:, start:given] if given > start else None
            out = run(BlockUnits(model, cache, end - start), rows, settings, generator, fixed)
            block = out.tokens
            nfe += out.nfe
            idle += out.idle_steps
            steps += out.steps
            for key, value in out.counts.items():
                counts[key] = counts.get(key, 0) + value
            for key, value in out.per_sample.items():
                per_sample.setdefault(key, []).append(value)
        tokens[:, start:end] = block
        if end < length:
            model.finish_block(block, cache)
            counts["cache_fills"] += rows
    return BatchResult(
        tokens=tokens,
        nfe=nfe,
        idle_steps=idle,
        steps=steps,
        counts=counts,
        per_sample={key: torch.cat(parts, 1) for key, parts in per_sample.items()},
    )


__all__ = ["BlockUnits", "run_by_blocks"]
