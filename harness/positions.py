"""Position information beyond 1-D rotary: row, column and channel embeddings for pixel tokens.

``model.positions`` selects it: ``rope`` (default) keeps the backbone's 1-D rotary embedding only;
``image`` keeps rotary and adds learned row, column and channel embeddings to the token embedding,
so attention can tell vertical from horizontal neighbours and R from G from B. The layout is the
one of :mod:`harness.data.images`: position ``(row * W + col) * channels + channel``.

The image shape is the config string ``model.image_shape`` = ``"HxWxC"`` (``"8x8x1"``), filled in
from the dataset by ``primebench train`` and saved in ``config.yaml``, so ``harness.load`` rebuilds
the same module without the data. The backbone stays family-agnostic: it only adds a (L, D) table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from torch import nn

from harness.errors import InputError

POSITIONS = ("rope", "image")


@dataclass(frozen=True)
class ImageShape:
    """Height, width and channels of the images a model was trained on."""

    height: int
    width: int
    channels: int

    @property
    def seq_len(self) -> int:
        return self.height * self.width * self.channels

    def spec(self) -> str:
        return f"{self.height}x{self.width}x{self.channels}"

    @classmethod
    def parse(cls, spec: str) -> ImageShape:
        match = re.fullmatch(r"\s*(\d+)x(\d+)x(\d+)\s*", spec or "")
        if not match or 0 in tuple(int(g) for g in match.groups()):
            raise InputError(f"model.image_shape must look like 'HxWxC' (e.g. '8x8x1'), got {spec!r}")
        return cls(*(int(g) for g in match.groups()))


class ImagePositions(nn.Module):
    """Learned row, column and channel embeddings: sequence length L -> (L, D), added to tokens.

    ``offset`` leading positions carry no pixel (the ARM's start token) and get a zero vector;
    position ``offset + j`` is pixel token j.
    """

    def __init__(self, shape: ImageShape, d_model: int, *, offset: int = 0):
        super().__init__()
        self.shape = shape
        self.offset = int(offset)
        self.row = nn.Embedding(shape.height, d_model)
        self.col = nn.Embedding(shape.width, d_model)
        self.channel = nn.Embedding(shape.channels, d_model)
        for table in (self.row, self.col, self.channel):
            nn.init.normal_(table.weight, std=0.02)
        j = torch.arange(shape.seq_len)
        self.register_buffer("rows", j // (shape.width * shape.channels), persistent=False)
        self.register_buffer("cols", (j // shape.channels) % shape.width, persistent=False)
        self.register_buffer("chans", j % shape.channels, persistent=False)

    def forward(self, length: int) -> torch.Tensor:
        table = self.row(self.rows) + self.col(self.cols) + self.channel(self.chans)  # (H*W*ch, D)
        table = torch.cat([table.new_zeros(self.offset, table.shape[1]), table])
        if length > table.shape[0]:
            raise InputError(
                f"sequence length {length} exceeds the {self.shape.spec()} image layout ({table.shape[0]} positions)"
            )
        return table[:length]


def build_positions(
    positions: str, image_shape: str, *, d_model: int, seq_len: int, offset: int = 0
) -> ImagePositions | None:
    """The additive position module a family hands its backbone (None for plain rotary)."""
    if positions not in POSITIONS:
        raise InputError(f"model.positions must be one of {POSITIONS}, got {positions!r}")
    if positions == "rope":
        return None
    if not image_shape:
        raise InputError(
            "model.positions=image needs model.image_shape ('HxWxC'); primebench train fills it in from an "
            "image: corpus"
        )
    shape = ImageShape.parse(image_shape)
    if shape.seq_len != seq_len:
        raise InputError(
            f"model.image_shape={image_shape!r} has {shape.seq_len} tokens but the sequence length is {seq_len}"
        )
    return ImagePositions(shape, d_model, offset=offset)


__all__ = ["POSITIONS", "ImageShape", "ImagePositions", "build_positions"]
