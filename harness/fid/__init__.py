"""Frechet distances between image sets in named feature spaces (Inception, trained digit classifiers).

Modules: :mod:`~harness.fid.frechet` (float64 statistics, distance, Inception Score),
:mod:`~harness.fid.features` (extractor registry), :mod:`~harness.fid.digits_classifier`,
:mod:`~harness.fid.reference` (cached reference statistics), :mod:`~harness.fid.backends`
(torch-fidelity, torchmetrics, ours), :mod:`~harness.fid.evaluate` (sample a model, write a record).
Nothing is imported here, so ``import harness.fid`` stays cheap.
"""
