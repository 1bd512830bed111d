"""``eval fid``: sample images from a checkpoint and score them against a reference set.

:func:`fid_record` takes ``(model, layout)`` (the model and the :class:`~harness.data.ImageTokens`
whose layout its tokens follow), so it works for any image model; :func:`run_fid` loads a
checkpoint whose config has ``data.corpus: image:NAME`` and calls it.

FID is an estimate (biased in the number of samples; no standard error is given), in squared
units of the named feature space. Only the ``inception`` space gives numbers comparable to
published FID, and only under the paper protocol (:data:`PAPER_PROTOCOL`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from harness.data import get_image_dataset, to_images
from harness.data.images import is_image_spec, parse_image_spec
from harness.errors import DataError, PrimebenchError
from harness.evaluation import load_for_evaluation
from harness.fid.backends import fid_between
from harness.fid.features import default_features, get_feature_space
from harness.fid.reference import reference_images
from harness.records import Metric, make_record, model_block
from harness.sampling import generate
from harness.settings import changed

#: CIFAR-10 FID as in MDM-Prime and DUO: 50,000 samples vs the 50,000 train images, Inception
#: 2048-d pool features, torchmetrics FrechetInceptionDistance on uint8 images (DUO's input; MDM-Prime
#: passes float [0, 1] with normalize=True, which torchmetrics converts to the same uint8).
PAPER_PROTOCOL: dict[str, Any] = {
    "dataset": "cifar10",
    "split": "train",
    "samples": 50_000,
    "features": "inception",
    "backend": "torchmetrics",
    "input": "uint8 0..255 (normalize=False)",
}


def paper_reference(reference: str | None) -> str:
    """``cifar10:PATH[:SPLIT]`` -> ``cifar10:PATH:train`` (the paper protocol's reference)."""

    if reference is None or not reference.startswith("cifar10:"):
        raise PrimebenchError(
            "--paper-protocol needs the CIFAR-10 folder: --reference cifar10:PATH",
            fix="e.g. --reference cifar10:/data/cifar (holding cifar-10-batches-py/)",
        )
    return parse_image_spec(reference).with_split("train").spec


def _image_corpus(corpus: str):
    """The :class:`~harness.data.images.ImageSpec` (train split) of an ``image:NAME`` corpus."""

    if not is_image_spec(corpus):
        raise DataError(
            f"the checkpoint was trained on {corpus!r}, not on images",
            fix="FID needs an image checkpoint (data.corpus: image:digits, image:mnist5k, image:cifar10:PATH)",
        )
    return parse_image_spec(corpus).with_split("train")


def default_reference(corpus: str) -> str:
    """The reference set of a checkpoint trained on ``corpus``: its dataset's train split
    (``image:digits`` -> ``digits:train``)."""
    return _image_corpus(corpus).spec


def image_layout(corpus: str):
    """The :class:`ImageTokens` (train split) of an ``image:NAME`` corpus: layout and levels."""

    return get_image_dataset(_image_corpus(corpus))


@dataclass(frozen=True)
class FIDSettings:
    """Every setting of an FID run (:func:`run_fid`, :func:`fid_record`), with ``eval fid``'s defaults.

    ``reference``: ``DATASET:SPLIT`` (None: the checkpoint's dataset, train split); ``features``
    (None: by the reference dataset) with ``inception_weights`` or the digit classifier's
    ``classifier_seed``; the ``backend``; ``samples`` drawn and featurised in batches of
    ``batch_size`` from ``seed`` with ``sampler``, ``steps``, ``dtype``, ``method`` and ``draw``;
    ``paper_protocol``: the CIFAR-10 setting of :data:`PAPER_PROTOCOL`; ``device``; the ``ema``
    weights and Prime's ``carry_over`` (None: as trained), both recorded.
    """

    reference: str | None = None
    features: str | None = None
    backend: str = "torch-fidelity"
    samples: int = 1000
    batch_size: int = 256
    sampler: str | None = None
    steps: int | None = None
    dtype: str = "float64"
    method: str = "gumbel"
    draw: str = "two-stage"
    seed: int = 0
    inception_weights: str | Path | None = None
    classifier_seed: int = 0
    device: str = "cpu"
    paper_protocol: bool = False
    ema: bool = True
    carry_over: bool | None = None


def sample_images(model, layout, settings: FIDSettings) -> tuple[torch.Tensor, dict[str, Any]]:
    """Draw ``settings.samples`` images (uint8 (N, ch, H, W)) and the sampler's protocol."""

    if model.seq_len != layout.seq_len:
        raise DataError(
            f"the model generates {model.seq_len} tokens but {layout.spec} images have "
            f"{layout.height}x{layout.width}x{layout.channels} = {layout.seq_len}",
            fix="pass the dataset the model was trained on",
        )
    out = generate(
        model,
        settings.sampler,
        num_samples=settings.samples,
        batch_size=settings.batch_size,
        steps=settings.steps,
        dtype=settings.dtype,
        method=settings.method,
        generator=settings.seed,
        draw=settings.draw,
    )
    return to_images(out.tokens.cpu(), layout), dict(out.protocol)


def _metrics(result, space) -> dict:

    units = f"squared {space.name} feature units ({space.dim}-d)"
    metrics = {space.metric_name: Metric(result.fid, None, "estimate", units)}
    if result.inception_score is not None:
        metrics["inception_score"] = Metric(
            result.inception_score,
            None,
            "estimate",
            f"exp(nats) over Inception classes, mean of 10 splits (std {result.inception_score_std:.4f})",
        )
    return metrics


def _protocol(settings: FIDSettings, space, layout, reference_size: int, sampler_protocol: dict) -> dict:
    sampler_protocol = {k: v for k, v in sampler_protocol.items() if k != "num_samples"}
    return {
        "features": space.name,
        "feature_extractor": space.info,
        "feature_extractor_accuracy": (space.info.get("classifier") or {}).get("test_accuracy"),
        "backend": settings.backend,
        "reference": settings.reference,
        "reference_size": reference_size,
        "samples": settings.samples,
        "batch_size": settings.batch_size,
        "seed": settings.seed,
        "image_layout": {
            "dataset": layout.name,
            "height": layout.height,
            "width": layout.width,
            "channels": layout.channels,
            "levels": layout.levels,
            "to_uint8": "round(v * 255 / (levels - 1))",
        },
        "paper_protocol": dict(PAPER_PROTOCOL) if settings.paper_protocol else None,
        "sampler": sampler_protocol,
    }


def fid_record(model, layout, settings: FIDSettings, *, model_block: dict | None = None) -> dict[str, Any]:
    """Sample from ``model`` (tokens in ``layout``), compute FID (and IS for Inception) against
    ``settings.reference`` (which must be set), return a record."""

    t0 = time.time()
    features = settings.features or default_features(settings.reference)
    space = get_feature_space(features, inception_weights=settings.inception_weights, seed=settings.classifier_seed)
    ref_imgs, ref_ds = reference_images(settings.reference)
    if (ref_ds.height, ref_ds.width) != (layout.height, layout.width):
        raise DataError(
            f"reference {settings.reference} has {ref_ds.height}x{ref_ds.width} images but the model draws "
            f"{layout.height}x{layout.width}",
            fix="use a reference of the model's image size",
        )
    images, sampler_protocol = sample_images(model, layout, settings)
    against = settings.reference if settings.backend == "frechet" else ref_imgs
    result = fid_between(images, against, space, backend=settings.backend, batch_size=settings.batch_size)
    return make_record(
        "fid",
        model=model_block or {"name": None, "family": None},
        metrics=_metrics(result, space),
        protocol=_protocol(settings, space, layout, len(ref_imgs), sampler_protocol),
        seed=settings.seed,
        device=settings.device,
        wall_s=time.time() - t0,
    )


def run_fid(checkpoint: Path, settings: FIDSettings | None = None, **changes) -> dict[str, Any]:
    """Load an image checkpoint and return its FID record.

    ``settings``: a :class:`FIDSettings` (default: ``eval fid``'s defaults), with ``changes`` by field
    name on top. ``reference`` None: the checkpoint's dataset, train split. ``paper_protocol``: the
    CIFAR-10 train split of ``reference`` with the samples, features and backend of
    :data:`PAPER_PROTOCOL`.
    """

    s = changed(settings or FIDSettings(), changes, "FID")
    if s.paper_protocol:
        paper = {k: PAPER_PROTOCOL[k] for k in ("samples", "features", "backend")}
        s = replace(s, reference=paper_reference(s.reference), **paper)
    _, model, _, cfg = load_for_evaluation(checkpoint, s.device, carry_over=s.carry_over, ema=s.ema)
    layout = image_layout(cfg.data.corpus)
    s = replace(s, reference=s.reference or default_reference(cfg.data.corpus))
    record = fid_record(model, layout, s, model_block=model_block(Path(checkpoint), cfg))
    record["protocol"]["weights"] = "EMA" if s.ema else "raw"
    return record
