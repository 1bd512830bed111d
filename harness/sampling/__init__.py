"""Samplers (:func:`generate`) and their categorical draws.

Every draw takes its precision from the sampler's ``dtype``: the default two-stage ancestral draw
takes the token of a revealed unit by inverse CDF (:func:`harness.sampling.categorical.sample_inverse_cdf`,
after float64 reveal decisions), and every other categorical draw goes through
:func:`sample_categorical` with the sampler's ``method``.
"""

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
