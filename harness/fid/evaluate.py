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
from pathlib import Path
from typing import Any

import torch

from harness.errors import DataError, PrimebenchError

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
    from harness.data.images import parse_image_spec

    if reference is None or not reference.startswith("cifar10:"):
        raise PrimebenchError(
            "--paper-protocol needs the CIFAR-10 folder: --reference cifar10:PATH",
            fix="e.g. --reference cifar10:/data/cifar (holding cifar-10-batches-py/)",
        )
    return parse_image_spec(reference).with_split("train").spec


def _image_corpus(corpus: str):
    """The :class:`~harness.data.images.ImageSpec` (train split) of an ``image:NAME`` corpus."""
    from harness.data.images import is_image_spec, parse_image_spec

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
    from harness.data import get_image_dataset

    return get_image_dataset(_image_corpus(corpus))


def sample_images(
    model,
    layout,
    *,
    samples: int,
    batch_size: int,
    sampler: str | None,
    steps: int | None,
    dtype: str,
    method: str,
    seed: int,
    draw: str = "two-stage",
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Draw ``samples`` images (uint8 (N, ch, H, W)) and the sampler's protocol."""
    from harness.data import to_images
    from harness.sampling import generate

    if model.seq_len != layout.seq_len:
        raise DataError(
            f"the model generates {model.seq_len} tokens but {layout.spec} images have "
            f"{layout.height}x{layout.width}x{layout.channels} = {layout.seq_len}",
            fix="pass the dataset the model was trained on",
        )
    out = generate(
        model,
        sampler,
        num_samples=samples,
        batch_size=batch_size,
        steps=steps,
        dtype=dtype,
        method=method,
        generator=seed,
        draw=draw,
    )
    return to_images(out.tokens.cpu(), layout), dict(out.protocol)


def fid_record(
    model,
    layout,
    *,
    reference: str,
    features: str | None,
    backend: str,
    samples: int,
    batch_size: int,
    sampler: str | None = None,
    steps: int | None = None,
    dtype: str = "float64",
    method: str = "gumbel",
    seed: int = 0,
    inception_weights: str | None = None,
    classifier_seed: int = 0,
    model_block: dict | None = None,
    device: str = "cpu",
    paper_protocol: bool = False,
    draw: str = "two-stage",
) -> dict[str, Any]:
    """Sample from ``model`` (tokens in ``layout``), compute FID (and IS for Inception), return a record."""
    from harness.fid.backends import fid_between
    from harness.fid.features import default_features, get_feature_space
    from harness.fid.reference import reference_images
    from harness.records import Metric, make_record

    t0 = time.time()
    features = features or default_features(reference)
    space = get_feature_space(features, inception_weights=inception_weights, seed=classifier_seed)
    ref_imgs, ref_ds = reference_images(reference)
    if (ref_ds.height, ref_ds.width) != (layout.height, layout.width):
        raise DataError(
            f"reference {reference} has {ref_ds.height}x{ref_ds.width} images but the model draws "
            f"{layout.height}x{layout.width}",
            fix="use a reference of the model's image size",
        )
    images, sampler_protocol = sample_images(
        model,
        layout,
        samples=samples,
        batch_size=batch_size,
        sampler=sampler,
        steps=steps,
        dtype=dtype,
        method=method,
        seed=seed,
        draw=draw,
    )
    result = fid_between(
        images, reference if backend == "frechet" else ref_imgs, space, backend=backend, batch_size=batch_size
    )
    units = f"squared {space.name} feature units ({space.dim}-d)"
    metrics = {space.metric_name: Metric(result.fid, None, "estimate", units)}
    if result.inception_score is not None:
        metrics["inception_score"] = Metric(
            result.inception_score,
            None,
            "estimate",
            f"exp(nats) over Inception classes, mean of 10 splits (std {result.inception_score_std:.4f})",
        )
    sampler_protocol.pop("num_samples", None)
    protocol = {
        "features": space.name,
        "feature_extractor": space.info,
        "feature_extractor_accuracy": (space.info.get("classifier") or {}).get("test_accuracy"),
        "backend": backend,
        "reference": reference,
        "reference_size": len(ref_imgs),
        "samples": samples,
        "batch_size": batch_size,
        "seed": seed,
        "image_layout": {
            "dataset": layout.name,
            "height": layout.height,
            "width": layout.width,
            "channels": layout.channels,
            "levels": layout.levels,
            "to_uint8": "round(v * 255 / (levels - 1))",
        },
        "paper_protocol": dict(PAPER_PROTOCOL) if paper_protocol else None,
        "sampler": sampler_protocol,
    }
    return make_record(
        "fid",
        model=model_block or {"name": None, "family": None},
        metrics=metrics,
        protocol=protocol,
        seed=seed,
        device=device,
        wall_s=time.time() - t0,
    )


def run_fid(
    checkpoint: Path,
    *,
    reference: str | None = None,
    paper_protocol: bool = False,
    device: str = "cpu",
    ema: bool = True,
    carry_over: bool | None = None,
    **kwargs,
) -> dict[str, Any]:
    """Load an image checkpoint and return its FID record (other keywords as :func:`fid_record`).

    ``reference`` None: the checkpoint's dataset, train split. ``paper_protocol``: the CIFAR-10
    train split of ``reference`` with the samples, features and backend of :data:`PAPER_PROTOCOL`.
    ``ema``: sample from the EMA weights (default) or the raw ones; ``carry_over``: override Prime's
    carry-over (None: as trained). Both are recorded.
    """
    from harness.evaluation import load_for_evaluation
    from harness.records import model_block

    if paper_protocol:
        reference = paper_reference(reference)
        kwargs.update({k: PAPER_PROTOCOL[k] for k in ("samples", "features", "backend")})
    _, model, _, cfg = load_for_evaluation(checkpoint, device, carry_over=carry_over, ema=ema)
    layout = image_layout(cfg.data.corpus)
    reference = reference or default_reference(cfg.data.corpus)
    record = fid_record(
        model,
        layout,
        reference=reference,
        model_block=model_block(Path(checkpoint), cfg),
        device=device,
        paper_protocol=paper_protocol,
        **kwargs,
    )
    record["protocol"]["weights"] = "EMA" if ema else "raw"
    return record
