"""Feature spaces for Frechet distances: a registry of extractors with did-you-mean errors.

* ``inception``: the 2048-d pool features (and ``logits_unbiased`` for the Inception Score) of
  torch-fidelity's TF-compatible InceptionV3, the network behind published FID numbers. Weights are
  never downloaded: ``--inception-weights PATH`` or the standard file in the torch hub cache.
* ``digits-classifier`` / ``mnist-classifier``: the penultimate 64-d layer of a small CNN the
  harness trains on sklearn digits (8x8) / mnist5k (28x28) (:mod:`harness.fid.digits_classifier`).
  Numbers in these spaces are labelled with the space's name, never "Inception FID".

Every space takes uint8 images (N, 3, H, W) in 0..255, the layout torch-fidelity and torchmetrics
pass; grey images are replicated to 3 channels by :func:`as_rgb`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.errors import OfflineError, PrimebenchError
from harness.fid.digits_classifier import FEATURE_DIM, load_classifier, torch_fidelity_class
from harness.registry import Registry
from harness.safe_load import plain_tensor_copy

INCEPTION_WEIGHTS_FILE = "weights-inception-2015-12-05-6726825d.pth"
INCEPTION_WEIGHTS_URL = f"https://github.com/toshas/torch-fidelity/releases/download/v0.2.0/{INCEPTION_WEIGHTS_FILE}"
#: torch-fidelity's own registered name for the TF-compatible InceptionV3
FIDELITY_INCEPTION = "inception-v3-compat"


@dataclass(frozen=True, eq=False)
class FeatureSpace:
    """One feature extractor, ready for every backend.

    ``module``: uint8 (N, 3, H, W) -> features (N, ``dim``), with ``num_features`` (torchmetrics).
    ``logits``: uint8 (N, 3, H, W) -> (features (N, dim), logits (N, K)) when the space has an
    Inception Score (``has_inception_score``). ``fidelity_name`` / ``fidelity_weights``: how
    torch-fidelity builds the same network. ``cache_key`` identifies the network's weights for
    reference-statistics caches; ``info`` goes into the record's protocol.
    """

    name: str
    dim: int
    module: nn.Module
    fidelity_name: str
    fidelity_weights: str
    cache_key: str
    has_inception_score: bool = False
    both: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def metric_name(self) -> str:
        return f"fid[{self.name}]"


class _FirstOutput(nn.Module):
    """Wrap a module returning a tuple; return its first element as (N, D) float features."""

    def __init__(self, inner: nn.Module, num_features: int):
        super().__init__()
        self.inner = inner
        self.num_features = num_features

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.inner(images)[0].reshape(images.shape[0], -1)


def as_rgb(images: torch.Tensor) -> torch.Tensor:
    """uint8 (N, 1 or 3, H, W) -> uint8 (N, 3, H, W) (grey replicated)."""
    images = torch.as_tensor(images)
    if images.dtype != torch.uint8 or images.dim() != 4 or images.shape[1] not in (1, 3):
        raise PrimebenchError(
            f"images must be uint8 (N, 1 or 3, H, W), got {images.dtype} {tuple(images.shape)}",
            fix="convert tokens with harness.data.to_images",
        )
    return images.expand(-1, 3, -1, -1).contiguous() if images.shape[1] == 1 else images


def inception_weights_path(explicit: str | Path | None = None) -> Path:
    """The Inception weights file: ``explicit`` if given, else the torch hub cache copy.

    Checked before anything is constructed, because torch-fidelity and torchmetrics would otherwise
    try to download it."""
    if explicit is not None:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise PrimebenchError(
                f"--inception-weights {str(path)!r} does not exist", fix=f"pass the path of {INCEPTION_WEIGHTS_FILE}"
            )
        return path
    folder = Path(torch.hub.get_dir()) / "checkpoints"  # honours $TORCH_HOME
    path = folder / INCEPTION_WEIGHTS_FILE
    if not path.is_file():
        raise OfflineError(
            f"Inception weights {INCEPTION_WEIGHTS_FILE} not found in {folder} (nothing is downloaded at run time)",
            fix=f"on a machine with network download {INCEPTION_WEIGHTS_URL} and put it in {folder} "
            f"(or set TORCH_HOME, or pass --inception-weights PATH)",
        )
    return path


FEATURE_EXTRACTORS: Registry[Callable[..., FeatureSpace]] = Registry("feature extractor")


@FEATURE_EXTRACTORS.register("inception")
def _inception(*, inception_weights: str | Path | None = None, seed: int = 0) -> FeatureSpace:

    path = inception_weights_path(inception_weights)
    fix = f"use the original {INCEPTION_WEIGHTS_FILE} ({INCEPTION_WEIGHTS_URL})"
    # torch-fidelity unpickles the file with weights_only=False: it only ever sees our plain copy
    plain = plain_tensor_copy(path, what="Inception weights", fix=fix)
    from torch_fidelity.feature_extractor_inceptionv3 import FeatureExtractorInceptionV3  # deferred: optional

    try:
        net = FeatureExtractorInceptionV3(
            FIDELITY_INCEPTION, ["2048", "logits_unbiased"], feature_extractor_weights_path=str(plain)
        )
    except (RuntimeError, KeyError, TypeError, AttributeError) as exc:
        raise PrimebenchError(
            f"Inception weights {str(path)!r} do not fit torch-fidelity's InceptionV3 "
            f"({type(exc).__name__}: {exc})".splitlines()[0],
            fix=fix,
        ) from exc
    net.eval().requires_grad_(False)

    def both(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features, logits = net(images)
        return features.reshape(images.shape[0], -1), logits

    return FeatureSpace(
        name="inception",
        dim=2048,
        module=_FirstOutput(net, 2048),
        fidelity_name=FIDELITY_INCEPTION,
        fidelity_weights=str(plain),
        cache_key=f"inception2048-{path.name}-{path.stat().st_size}",
        has_inception_score=True,
        both=both,
        info={
            "network": "torch-fidelity InceptionV3 (TF 2015-12-05 weights)",
            "layer": "2048-d pool",
            "weights": str(path),
            "input": "uint8 0..255, resized inside the network to 299x299",
        },
    )


def _classifier_space(name: str, dataset: str, *, seed: int) -> FeatureSpace:

    trained = load_classifier(dataset, seed=seed)
    net = trained.net

    class _Features(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net
            self.num_features = FEATURE_DIM

        def forward(self, images):
            return self.net(images)[0]

    return FeatureSpace(
        name=name,
        dim=FEATURE_DIM,
        module=_Features().eval(),
        fidelity_name=name,
        fidelity_weights=str(trained.path),
        cache_key=f"{name}-seed{seed}-{trained.path.stem}",
        info={"classifier": trained.describe(), "input": "uint8 0..255, channels averaged, scaled to [0, 1]"},
    )


@FEATURE_EXTRACTORS.register("digits-classifier")
def _digits(*, inception_weights: str | Path | None = None, seed: int = 0) -> FeatureSpace:
    return _classifier_space("digits-classifier", "digits", seed=seed)


@FEATURE_EXTRACTORS.register("mnist-classifier")
def _mnist(*, inception_weights: str | Path | None = None, seed: int = 0) -> FeatureSpace:
    return _classifier_space("mnist-classifier", "mnist5k", seed=seed)


def get_feature_space(name: str, *, inception_weights: str | Path | None = None, seed: int = 0) -> FeatureSpace:
    """Build the named feature space (did-you-mean on a typo). ``seed``: the classifier's training seed."""
    return FEATURE_EXTRACTORS.get(name)(inception_weights=inception_weights, seed=seed)


def default_features(reference_name: str) -> str:
    """The feature space that fits a reference dataset name (``digits``, ``mnist5k``, ``cifar10:...``)."""
    base = reference_name.split(":", 1)[0]
    return {"digits": "digits-classifier", "mnist5k": "mnist-classifier"}.get(base, "inception")


@functools.cache
def register_with_torch_fidelity() -> None:
    """Register the classifier extractors in torch-fidelity's registry (once; not at import)."""
    # deferred: torch-fidelity is optional and its registry is filled only when a backend asks
    from torch_fidelity.registry import FEATURE_EXTRACTORS_REGISTRY, register_feature_extractor

    cls = torch_fidelity_class()
    for name in ("digits-classifier", "mnist-classifier"):
        if name not in FEATURE_EXTRACTORS_REGISTRY:
            register_feature_extractor(name, cls)


def extract(
    space: FeatureSpace, images: torch.Tensor, *, batch_size: int = 256, with_logits: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Features (N, D) float64 (and logits (N, K) when ``with_logits``) of uint8 images, in batches."""
    images = as_rgb(images)
    feats, logits = [], []
    with torch.no_grad():
        for start in range(0, len(images), batch_size):
            chunk = images[start : start + batch_size]
            if with_logits:
                f, lg = space.both(chunk)
                logits.append(lg.to(torch.float64))
            else:
                f = space.module(chunk)
            feats.append(f.to(torch.float64))
    return torch.cat(feats), (torch.cat(logits) if with_logits else None)
