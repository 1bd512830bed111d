"""Typed inputs and outputs of the samplers: the settings they run with and what they return.

A sampler runs one batch and returns a :class:`BatchResult`; :func:`harness.sampling.generate` runs
the batches, concatenates them and returns a :class:`SampleOutput` whose ``protocol`` records every
setting that can move a downstream number (Gen PPL, entropy, idle steps).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

#: how the ancestral step is drawn (same law): reveal then token, or MDLM's joint draw over C + 1
DRAWS = ("two-stage", "joint")

#: how still-masked units are filled after the last grid step (only reached when ``t_end > 0``)
NOISE_REMOVAL = ("argmax", "sample")


@dataclass(frozen=True)
class SamplerSettings:
    """Everything a sampler needs besides the model, the batch rows and the generator.

    ``steps``: number of grid steps T (ancestral, maskgit), None for the token-by-token samplers.
    ``dtype`` goes unchanged to every draw, :func:`harness.sampling.sample_categorical` and (for the
    two-stage ancestral draw's tokens) :func:`harness.sampling.categorical.sample_inverse_cdf`, the
    only places the precision is applied; ``method`` goes to :func:`sample_categorical`.
    ``temperature`` and ``nucleus_p`` (with ``nucleus_rule``) shape the token distribution
    p(x^i | z_t) (over the C classes) before any draw; they were checked when the settings were
    built (:func:`harness.sampling.generate`) and are not checked again. ``t_end``: the ancestral grid
    runs from t = 1 down to ``t_end``; units still masked there are filled by ``noise_removal``.
    ``cache``: reuse a sequence's denoiser output while it does not change (with the two-stage
    draw: call the denoiser only at steps that reveal a unit). ``draw``: ``two-stage`` (reveal
    decision, then the token) or ``joint`` (MDLM's one draw over C + 1 outcomes), see
    :mod:`harness.sampling.ancestral`. ``seq_len``: the length of the samples (the model is never
    changed to draw shorter ones).
    """

    steps: int | None
    temperature: float
    nucleus_p: float
    dtype: torch.dtype
    method: str
    noise_removal: str
    cache: bool
    t_end: float
    nucleus_rule: str = "cross"
    draw: str = "two-stage"
    #: the canvas: how many token positions a sample has (at most the model's length; None: the model's)
    seq_len: int | None = None
    #: ReMDM's remasking settings (:class:`harness.sampling.remdm.RemaskSettings`, checked), remdm only
    remask: Any = None
    #: GIDD's self-correction settings (:class:`harness.sampling.correction.CorrectionSettings`,
    #: checked), self-correction only
    correction: Any = None


@dataclass
class BatchResult:
    """One batch of B samples (mutable while a sampler fills it in).

    ``tokens`` (B, L) ids in [0, C); ``nfe``, ``idle_steps``, ``steps`` (B,) int64 per sample;
    ``counts`` are integers summed over batches; ``per_sample`` tensors (B, ...) are concatenated.
    """

    tokens: torch.Tensor
    nfe: torch.Tensor
    idle_steps: torch.Tensor
    steps: torch.Tensor
    counts: dict[str, int] = field(default_factory=dict)
    per_sample: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class SampleOutput:
    """Samples with their cost and the protocol that produced them.

    * ``tokens`` LongTensor (N, L): token ids in [0, C) (the model's vocabulary, never sub-tokens);
    * ``nfe`` (N,): denoiser calls whose batch row was this sample (cached reuse not counted);
    * ``idle_steps`` (N,): grid steps in which this sample did not change (Prime's idle steps,
      counted on sub-tokens for Prime and on tokens otherwise);
    * ``steps`` (N,): sampler steps this sample went through (T for grid samplers, one per
      masked unit for first-hitting, one per generated token for the ARM);
    * ``wall_s`` (N,) float64: seconds, the batch's wall time divided by its size;
    * ``stats``: counts summed over samples (e.g. ``invalid_codes``) and per-sample tensors
      (e.g. first-hitting ``reveal_times``), plus strings saying how something was resolved;
    * ``protocol``: every setting (sampler, steps, dtype, method, temperature, nucleus_p,
      noise_removal, cache, grid, prefix length, ...).
    """

    tokens: torch.Tensor
    nfe: torch.Tensor
    idle_steps: torch.Tensor
    steps: torch.Tensor
    wall_s: torch.Tensor
    stats: dict[str, Any]
    protocol: dict[str, Any]

    @property
    def num_samples(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def idle_fraction(self) -> torch.Tensor:
        """(N,) idle steps over steps per sample (a fraction, the per-sample ISR)."""
        return self.idle_steps.double() / self.steps.double().clamp_min(1)

    def summary(self) -> dict[str, float]:
        """Means over samples of nfe, idle steps, steps and wall seconds (for records and tables)."""
        return {
            "nfe": float(self.nfe.double().mean()),
            "idle_steps": float(self.idle_steps.double().mean()),
            "steps": float(self.steps.double().mean()),
            "wall_s": float(self.wall_s.mean()),
        }


__all__ = ["DRAWS", "NOISE_REMOVAL", "SamplerSettings", "BatchResult", "SampleOutput"]
