"""FID between two sets of uint8 images through one of three backends on the same features.

* ``frechet``: our float64 :mod:`harness.fid.frechet` (reference statistics cached by
  :mod:`harness.fid.reference` when the reference is a dataset spec);
* ``torch-fidelity``: ``torch_fidelity.calculate_metrics`` with the space's registered extractor
  (its own statistics cache is off: references are small, and a stale cache would be silent);
* ``torchmetrics``: ``FrechetInceptionDistance(feature=<the space's nn.Module>)``.

The Inception Score (only for the ``inception`` space) comes from ``logits_unbiased``: torch-fidelity's
``isc`` for that backend, :func:`harness.fid.frechet.inception_score` otherwise (10 splits).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import torch

from harness.errors import PrimebenchError
from harness.fid.features import FeatureSpace, as_rgb, extract, register_with_torch_fidelity
from harness.fid.frechet import frechet_distance, inception_score
from harness.fid.reference import feature_stats, reference_images, reference_stats

BACKENDS = ("torch-fidelity", "torchmetrics", "frechet")
IS_SPLITS = 10


@dataclass(frozen=True)
class FidResult:
    """FID in ``space`` (squared feature units) and, for Inception, the Inception Score (mean, std over splits)."""

    fid: float
    space: str
    backend: str
    samples: int
    reference: str
    reference_size: int
    inception_score: float | None = None
    inception_score_std: float | None = None
    reference_cached: bool | None = None


class _ImageDataset(torch.utils.data.Dataset):
    """uint8 (N, 3, H, W) tensor -> a Dataset of uint8 (3, H, W) images (torch-fidelity's input)."""

    def __init__(self, images: torch.Tensor):
        self.images = images

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.images[i]


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        close = difflib.get_close_matches(backend, BACKENDS, n=1)
        raise PrimebenchError(
            f"unknown FID backend {backend!r}",
            fix=(f"did you mean {close[0]!r}? " if close else "") + f"use one of {', '.join(BACKENDS)}",
        )


def fid_between(
    images: torch.Tensor,
    reference: torch.Tensor | str,
    space: FeatureSpace,
    *,
    backend: str = "torch-fidelity",
    batch_size: int = 256,
) -> FidResult:
    """FID between generated uint8 ``images`` (N, ch, H, W) and ``reference`` (images or a dataset spec)."""
    _check_backend(backend)
    images = as_rgb(images)
    ref_spec = reference if isinstance(reference, str) else "(images)"
    ref_images = (
        None
        if isinstance(reference, str) and backend == "frechet"
        else (reference_images(reference)[0] if isinstance(reference, str) else reference)
    )
    if ref_images is not None:
        ref_images = as_rgb(ref_images)
    if len(images) < 2:
        raise PrimebenchError(f"FID needs at least 2 samples, got {len(images)}", fix="use --samples >= 2")
    is_mean = is_std = None
    cached = None
    if backend == "frechet":
        if isinstance(reference, str):
            ref_stats, cached = reference_stats(reference, space, batch_size=batch_size)
        else:
            ref_stats = feature_stats(space, ref_images, batch_size=batch_size)
        ref_size = ref_stats.count
        gen_stats = feature_stats(space, images, batch_size=batch_size)
        fid = frechet_distance(gen_stats, ref_stats)
        if space.has_inception_score:
            _, logits = extract(space, images, batch_size=batch_size, with_logits=True)
            is_mean, is_std = inception_score(logits, splits=IS_SPLITS)
    elif backend == "torchmetrics":
        from torchmetrics.image.fid import FrechetInceptionDistance  # deferred: an optional backend

        metric = FrechetInceptionDistance(feature=space.module, reset_real_features=True)
        for start in range(0, len(ref_images), batch_size):
            metric.update(ref_images[start : start + batch_size], real=True)
        for start in range(0, len(images), batch_size):
            metric.update(images[start : start + batch_size], real=False)
        fid = float(metric.compute())
        ref_size = len(ref_images)
        if space.has_inception_score:
            _, logits = extract(space, images, batch_size=batch_size, with_logits=True)
            is_mean, is_std = inception_score(logits, splits=IS_SPLITS)
    else:
        import torch_fidelity  # deferred: an optional backend, loaded only when chosen

        register_with_torch_fidelity()
        out = torch_fidelity.calculate_metrics(
            input1=_ImageDataset(images),
            input2=_ImageDataset(ref_images),
            fid=True,
            isc=space.has_inception_score,
            feature_extractor=space.fidelity_name,
            feature_extractor_weights_path=space.fidelity_weights,
            batch_size=batch_size,
            cuda=False,
            cache=False,
            verbose=False,
            save_cpu_ram=True,
            isc_splits=IS_SPLITS,
        )
        fid = float(out["frechet_inception_distance"])
        ref_size = len(ref_images)
        if space.has_inception_score:
            is_mean, is_std = float(out["inception_score_mean"]), float(out["inception_score_std"])
    return FidResult(
        fid=fid,
        space=space.name,
        backend=backend,
        samples=len(images),
        reference=ref_spec,
        reference_size=ref_size,
        inception_score=is_mean,
        inception_score_std=is_std,
        reference_cached=cached,
    )
