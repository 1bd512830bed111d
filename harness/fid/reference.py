"""Reference images and their cached feature statistics, per (dataset, split, feature extractor).

Reference specs are image dataset specs (``digits:train``, ``mnist5k:test``, ``cifar10:PATH:train``);
images come from :func:`harness.data.get_image_dataset` + :func:`harness.data.to_images` as uint8
(N, ch, H, W). Statistics are cached as ``.npz`` under ``cache_dir("fid", "reference")``; the file
name holds the dataset spec, a hash of it (CIFAR specs carry a folder) and the extractor's cache key
(network and weights), so a different classifier seed or weights file never reuses stale numbers.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import torch

from harness.data import get_image_dataset, to_images
from harness.data.cache import cache_dir
from harness.fid.features import FeatureSpace, extract
from harness.fid.frechet import FeatureStats, GaussianStats


def reference_images(spec: str):
    """uint8 images (N, ch, H, W) of an image dataset spec, with its :class:`ImageTokens`."""

    ds = get_image_dataset(spec)
    return to_images(ds.tokens, ds), ds


def reference_cache_path(spec: str, space: FeatureSpace) -> Path:

    digest = hashlib.sha256(spec.encode()).hexdigest()[:10]
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", spec.split(":", 1)[0] + "-" + spec.rsplit(":", 1)[-1])
    return cache_dir("fid", "reference") / f"{readable}-{digest}--{space.cache_key}.npz"


def feature_stats(space: FeatureSpace, images: torch.Tensor, *, batch_size: int = 256) -> GaussianStats:
    """Gaussian statistics of ``space`` features of uint8 images, accumulated batch by batch."""
    acc = FeatureStats(space.dim)
    for start in range(0, len(images), batch_size):
        features, _ = extract(space, images[start : start + batch_size], batch_size=batch_size)
        acc.update(features)
    return acc.compute()


def reference_stats(spec: str, space: FeatureSpace, *, batch_size: int = 256) -> tuple[GaussianStats, bool]:
    """(statistics of ``spec`` in ``space``, whether they came from the cache)."""
    path = reference_cache_path(spec, space)
    if path.is_file():
        return GaussianStats.load(path), True
    images, _ = reference_images(spec)
    stats = feature_stats(space, images, batch_size=batch_size)
    stats.save(path)
    return stats, False
