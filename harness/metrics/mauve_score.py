"""MAUVE between generated samples and held-out text, through the ``mauve-text`` package.

The package computes the divergence frontier from two sets of features (the quantisation by k-means
on PCA-reduced features, the frontier and its area); the harness only supplies the features: the
judge's last-layer hidden state at each sample's last token (:meth:`harness.judges.Judge.features`),
as MAUVE's reference code does with GPT-2 Large. MAUVE moves with the feature model, the number of
samples on each side and the package's settings, so :func:`mauve_between` returns all of them for
the record.
"""

from __future__ import annotations

from importlib.metadata import version

import torch

from harness.errors import InputError

#: the package's settings the harness passes (its defaults, spelled out so the record carries them)
SETTINGS = {
    "num_buckets": "auto",
    "pca_max_data": -1,
    "kmeans_explained_var": 0.9,
    "kmeans_num_redo": 5,
    "kmeans_max_iter": 500,
    "divergence_curve_discretization_size": 25,
    "mauve_scaling_factor": 5,
}


#: the fewest samples on each side for which a MAUVE number is reported: below it the package's
#: k-means has two clusters of a handful of points, and a tiled batch scores like held-out text
MIN_SAMPLES = 8


def too_few_for_mauve(held_out: int, generated: int) -> str | None:
    """Why MAUVE is not computed for these counts (a sentence for the record), or None when it is."""
    if min(held_out, generated) >= MIN_SAMPLES:
        return None
    return (
        f"not computed: MAUVE needs at least {MIN_SAMPLES} samples on each side (here {generated} generated, "
        f"{held_out} held out); with fewer its clusters cannot tell copies from text"
    )


def mauve_between(p_features: torch.Tensor, q_features: torch.Tensor, *, seed: int) -> tuple[float, dict]:
    """MAUVE of samples ``q_features`` (N, D) against held-out text ``p_features`` (M, D): ``(value in
    (0, 1], protocol)``; the protocol names the package, its version, the settings and both counts."""

    import mauve  # deferred: mauve-text and its scikit-learn load only when MAUVE is computed

    if p_features.shape[0] < 2 or q_features.shape[0] < 2:
        raise InputError("MAUVE needs at least 2 samples on each side", fix="draw more --samples, or pass --no-mauve")
    p = p_features.double().numpy()
    q = q_features.double().numpy()
    out = mauve.compute_mauve(p_features=p, q_features=q, seed=seed, verbose=False, **SETTINGS)
    protocol = {
        "package": f"mauve-text {version('mauve-text')}",
        "settings": dict(SETTINGS, seed=seed),
        "samples": {"held_out": int(p.shape[0]), "generated": int(q.shape[0])},
        "features": "the judge's last-layer hidden state at each sample's last token",
        "buckets": "auto = max(2, round(min(N, M) / 10)) k-means clusters",
    }
    return float(out.mauve), protocol


__all__ = ["MIN_SAMPLES", "SETTINGS", "mauve_between", "too_few_for_mauve"]
