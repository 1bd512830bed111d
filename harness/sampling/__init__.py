"""Samplers and the single categorical draw they all use (:func:`sample_categorical`)."""

from __future__ import annotations

from harness.sampling.categorical import (
    METHODS,
    apply_temperature,
    nucleus_filter,
    parse_dtype,
    sample_categorical,
)

__all__ = ["METHODS", "apply_temperature", "nucleus_filter", "parse_dtype", "sample_categorical"]
from harness.sampling.samplers import (  # noqa: E402
    SAMPLERS,
    generate,
    get_sampler,
    sampler_for,
    samplers_for,
    token_by_token_sampler,
)
from harness.sampling.settings import SampleOutput, SamplerSettings  # noqa: E402

__all__ += [
    "SAMPLERS",
    "SampleOutput",
    "SamplerSettings",
    "generate",
    "get_sampler",
    "sampler_for",
    "samplers_for",
    "token_by_token_sampler",
]
