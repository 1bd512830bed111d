"""Metrics with update/compute/reset and float64 state."""

from __future__ import annotations

from harness.metrics.entropy import EntropyResult, MeanEntropy, unigram_entropy, units_of

__all__ = ["EntropyResult", "MeanEntropy", "unigram_entropy", "units_of"]
