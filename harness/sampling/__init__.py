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
