"""Metrics with update/compute/reset and float64 state, on one base (:mod:`harness.metrics.base`).

:mod:`~harness.metrics.nll` (token-weighted NLL over a dataset), :mod:`~harness.metrics.genppl`
(generative perplexity), :mod:`~harness.metrics.entropy` (unigram entropy of samples).
"""

from __future__ import annotations

from harness.metrics.base import Accumulator
from harness.metrics.entropy import EntropyResult, MeanEntropy, unigram_entropy, units_of

__all__ = ["Accumulator", "EntropyResult", "MeanEntropy", "unigram_entropy", "units_of"]
