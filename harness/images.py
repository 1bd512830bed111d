"""Image helpers shared by training and evaluation: a sample grid PNG.

``save_grid(images, path)`` tiles uint8 ``(N, ch, H, W)`` images (the output of
:func:`harness.data.images.to_images`) into one PNG with a 1-pixel gap; ``write_sample_grid``
draws samples from a trained image model and saves them that way (``primebench train`` writes
``samples.png`` into every image checkpoint).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from PIL import Image

from harness.data.images import to_images
from harness.sampling import generate


def save_grid(images: torch.Tensor, path: str | Path, *, nrow: int | None = None, scale: int = 1, pad: int = 1) -> Path:
    """Write uint8 images (N, ch, H, W), ch in {1, 3}, as a grid PNG (``nrow`` per row, default ~sqrt(N))."""

    images = torch.as_tensor(images)
    if images.dim() != 4 or images.dtype != torch.uint8 or images.shape[1] not in (1, 3) or images.shape[0] == 0:
        raise ValueError(
            f"save_grid expects uint8 images of shape (N, 1 or 3, H, W), got {images.dtype} {tuple(images.shape)}"
        )
    n, ch, h, w = images.shape
    nrow = nrow or math.ceil(math.sqrt(n))
    ncol_rows = math.ceil(n / nrow)
    grid = torch.zeros(ch, ncol_rows * (h + pad) + pad, nrow * (w + pad) + pad, dtype=torch.uint8)
    for k in range(n):
        r, c = divmod(k, nrow)
        grid[:, pad + r * (h + pad) : pad + r * (h + pad) + h, pad + c * (w + pad) : pad + c * (w + pad) + w] = images[
            k
        ]
    array = grid.permute(1, 2, 0).numpy()
    image = Image.fromarray(array[..., 0] if ch == 1 else array, mode="L" if ch == 1 else "RGB")
    if scale > 1:
        image = image.resize((image.width * scale, image.height * scale), Image.NEAREST)
    path = Path(path)
    image.save(path)
    return path


def write_sample_grid(model, ds, path: str | Path, *, num_samples: int = 64, seed: int = 0) -> Path:
    """Draw ``num_samples`` images from ``model`` (its default sampler, float64, seeded) and save a grid.

    ``ds``: the :class:`harness.data.images.ImageTokens` the model was trained on (its layout and levels).
    """

    out = generate(model, num_samples=num_samples, batch_size=num_samples, generator=seed)
    scale = max(1, 128 // max(ds.height, ds.width))
    return save_grid(to_images(out.tokens.cpu(), ds), path, scale=min(scale, 4))


__all__ = ["save_grid", "write_sample_grid"]
