"""A small CNN digit classifier trained by the harness, whose penultimate layer is a feature space
for Frechet distances on tiny grey images (where Inception features mean little).

One classifier per dataset: ``digits`` (sklearn 8x8, 17 levels) and ``mnist5k`` (28x28). It is
trained, seeded, on the dataset's ``train`` split in seconds on CPU, its accuracy is measured on the
``test`` split, and both weights and accuracy are cached under
``cache_dir("fid", "classifiers")`` keyed by dataset and seed. Scores in this space are labelled
``fid[digits-classifier]`` / ``fid[mnist-classifier]`` and are not Inception FID.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from harness.data import get_image_dataset, to_images
from harness.data.cache import cache_dir
from harness.errors import PrimebenchError
from harness.io import atomic_write_bytes
from harness.logging import console
from harness.safe_load import load_torch_file

#: bump when the architecture or training recipe changes (invalidates the cache)
RECIPE_VERSION = 1
FEATURE_DIM = 64
NUM_CLASSES = 10
#: (dataset, epochs) of the training recipe
EPOCHS = {"digits": 20, "mnist5k": 6}


class DigitNet(nn.Module):
    """uint8 images (N, 1 or 3, H, W) in 0..255 -> (penultimate features (N, 64), logits (N, 10)).

    Colour channels are averaged to grey; intensities are scaled to [0, 1]. conv-conv (-pool for
    images >= 16 px) - adaptive 4x4 average pool - linear 64 (the features, before the ReLU) - linear 10.
    """

    def __init__(self, height: int, width: int):
        super().__init__()
        self.height, self.width = int(height), int(width)
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc = nn.Linear(64 * 4 * 4, FEATURE_DIM)
        self.head = nn.Linear(FEATURE_DIM, NUM_CLASSES)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if images.dim() != 4 or images.shape[1] not in (1, 3) or tuple(images.shape[2:]) != (self.height, self.width):
            raise PrimebenchError(
                f"the digit classifier takes (N, 1 or 3, {self.height}, {self.width}) images, got "
                f"{tuple(images.shape)}",
                fix="use the feature extractor trained on the dataset these images come from",
            )
        x = images.to(torch.float32).mean(dim=1, keepdim=True) / 255.0  # (N, 1, H, W) in [0, 1]
        x = F.relu(self.conv1(x))
        if self.height >= 16:
            x = F.max_pool2d(x, 2)
        x = F.relu(self.conv2(x))
        x = F.adaptive_avg_pool2d(x, 4).flatten(1)  # (N, 1024)
        features = self.fc(x)  # (N, 64)
        return features, self.head(F.relu(features))


@dataclass(frozen=True, eq=False)
class TrainedClassifier:
    """A trained :class:`DigitNet` with the held-out accuracy on ``dataset:test``."""

    net: DigitNet
    dataset: str
    seed: int
    accuracy: float
    test_size: int
    path: Path
    trained_now: bool

    def describe(self) -> dict:
        return {
            "dataset": self.dataset,
            "seed": self.seed,
            "test_accuracy": self.accuracy,
            "test_split": f"{self.dataset}:test",
            "test_size": self.test_size,
            "train_split": f"{self.dataset}:train",
            "recipe_version": RECIPE_VERSION,
            "feature_dim": FEATURE_DIM,
            "epochs": EPOCHS[self.dataset],
            "train_threads": 1,
            "features": "penultimate linear layer, before ReLU",
            "weights": str(self.path),
        }


def classifier_path(dataset: str, seed: int) -> Path:

    return cache_dir("fid", "classifiers") / f"{dataset}-seed{seed}-v{RECIPE_VERSION}-e{EPOCHS.get(dataset)}.pt"


def _dataset_images(spec: str) -> tuple[torch.Tensor, torch.Tensor]:

    ds = get_image_dataset(spec)
    return to_images(ds.tokens, ds), ds.labels


def _accuracy(net: DigitNet, images: torch.Tensor, labels: torch.Tensor) -> float:
    with torch.no_grad():
        predictions = torch.cat([net(images[i : i + 512])[1].argmax(dim=1) for i in range(0, len(images), 512)])
    return float((predictions == labels).to(torch.float64).mean())


def train_classifier(dataset: str, *, seed: int = 0) -> tuple[DigitNet, float, int]:
    """Train on ``dataset:train`` (Adam, seeded) and return (net, accuracy on ``dataset:test``, test size)."""
    if dataset not in EPOCHS:
        raise PrimebenchError(
            f"no digit classifier recipe for dataset {dataset!r}", fix=f"use one of {', '.join(sorted(EPOCHS))}"
        )
    images, labels = _dataset_images(f"{dataset}:train")
    test_images, test_labels = _dataset_images(f"{dataset}:test")
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = DigitNet(images.shape[2], images.shape[3])
    optimizer = torch.optim.Adam(net.parameters(), lr=2e-3)
    net.train()
    # One thread: these tiny batches run ~4x faster than on several contended threads, and the
    # result is the same on every machine (the thread count is restored afterwards).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(EPOCHS[dataset]):
            order = torch.randperm(len(images), generator=gen)
            for start in range(0, len(order), 64):
                idx = order[start : start + 64]
                loss = F.cross_entropy(net(images[idx])[1], labels[idx])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    finally:
        torch.set_num_threads(threads)
    net.eval().requires_grad_(False)
    return net, _accuracy(net, test_images, test_labels), len(test_images)


def save_classifier(net: DigitNet, path: Path, *, dataset: str, seed: int, accuracy: float, test_size: int) -> None:

    buffer = io.BytesIO()
    torch.save(
        {
            "state_dict": net.state_dict(),
            "height": net.height,
            "width": net.width,
            "dataset": dataset,
            "seed": seed,
            "accuracy": accuracy,
            "test_size": test_size,
            "recipe_version": RECIPE_VERSION,
        },
        buffer,
    )
    atomic_write_bytes(path, buffer.getvalue())


def read_classifier(path: Path) -> tuple[DigitNet, dict]:
    """Load a cached classifier file -> (net in eval mode, its metadata)."""
    path = Path(path)
    if not path.is_file():
        raise PrimebenchError(
            f"digit classifier weights {str(path)!r} do not exist",
            fix="load it with harness.fid.digits_classifier.load_classifier(DATASET) (trains and caches it)",
        )

    fix = f"delete {path} (the classifier is re-trained and cached on next use)"
    blob = load_torch_file(path, what="digit classifier cache", fix=fix)
    try:
        net = DigitNet(int(blob["height"]), int(blob["width"]))
        net.load_state_dict(blob["state_dict"])
        float(blob["accuracy"]), int(blob["test_size"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise PrimebenchError(
            f"digit classifier cache {str(path)!r} does not hold a classifier "
            f"({type(exc).__name__}: {exc})".splitlines()[0],
            fix=fix,
        ) from exc
    net.eval().requires_grad_(False)
    return net, {k: v for k, v in blob.items() if k != "state_dict"}


def load_classifier(dataset: str, *, seed: int = 0) -> TrainedClassifier:
    """The cached classifier for (dataset, seed), training and caching it on first use."""
    path = classifier_path(dataset, seed)
    if path.is_file():
        net, meta = read_classifier(path)
        return TrainedClassifier(net, dataset, seed, float(meta["accuracy"]), int(meta["test_size"]), path, False)

    console().log(f"training the {dataset} feature classifier (seed {seed}); cached at {path}")
    net, accuracy, test_size = train_classifier(dataset, seed=seed)
    save_classifier(net, path, dataset=dataset, seed=seed, accuracy=accuracy, test_size=test_size)
    console().log(f"{dataset} classifier: held-out accuracy {accuracy:.4f} on {test_size} {dataset}:test images")
    return TrainedClassifier(net, dataset, seed, accuracy, test_size, path, True)


def torch_fidelity_class():
    """A torch-fidelity ``FeatureExtractorBase`` subclass serving a cached classifier.

    torch-fidelity builds extractors by name with keyword arguments; the classifier file travels in
    ``feature_extractor_weights_path``. Features: ``penultimate`` (FID, KID) and ``logits`` (ISC).
    """
    from torch_fidelity.feature_extractor_base import FeatureExtractorBase  # deferred: optional torch-fidelity

    class DigitClassifierFeatureExtractor(FeatureExtractorBase):
        def __init__(self, name, features_list, feature_extractor_weights_path=None, **kwargs):
            super().__init__(name, features_list)
            if feature_extractor_weights_path is None:
                raise PrimebenchError(
                    f"feature extractor {name!r} needs feature_extractor_weights_path",
                    fix="pass the classifier file from load_classifier(...).path",
                )
            self.net, _ = read_classifier(Path(feature_extractor_weights_path))

        @staticmethod
        def get_provided_features_list():
            return "penultimate", "logits"

        @staticmethod
        def get_default_feature_layer_for_metric(metric):
            return {"fid": "penultimate", "kid": "penultimate", "prc": "penultimate", "isc": "logits"}[metric]

        @staticmethod
        def can_be_compiled():
            return False

        @staticmethod
        def get_dummy_input_for_compile():
            return torch.zeros(1, 3, 8, 8, dtype=torch.uint8)

        def forward(self, x):
            features, logits = self.net(x)
            out = {"penultimate": features, "logits": logits}
            return tuple(out[name] for name in self.features_list)

    return DigitClassifierFeatureExtractor
