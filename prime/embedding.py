"""MDM-Prime's sub-token embedding (the encoder of ``PerceiverDIT``), in two layouts.

Each sub-token y^{i,j} in {0..b-1} U {m} (mask id = b) is embedded, and the ell embeddings of token
i make one D-dimensional token embedding, so the transformer still runs on L token positions, not
L * ell:

* ``concat`` (MDM-Prime, and Prime-v2's ``cat-share``): one shared (b + 1) x (D / ell) table, the ell
  embeddings concatenated in order j; D must be a multiple of ell.
* ``sum`` (Prime-v2's 1.1B model, ``sum_emb``): one (b + 1) x D table per digit position j, the ell
  embeddings summed; any D, which the binary encoding (ell = ceil(log2 C)) needs.
"""

from __future__ import annotations

import torch
from torch import nn

from harness.errors import ConfigError

LAYOUTS = ("concat", "sum")


class SubtokenEmbedding(nn.Module):
    """(B, L, ell) sub-token ids in [0, base] -> (B, L, D)."""

    def __init__(self, base: int, ell: int, d_model: int, layout: str = "concat"):
        super().__init__()
        if layout not in LAYOUTS:
            raise ConfigError(f"model.embedding must be one of {list(LAYOUTS)}, got {layout!r}")
        if layout == "concat" and d_model % ell:
            raise ConfigError(
                f"d_model={d_model} is not divisible by ell={ell}: the Prime embedding concatenates ell "
                f"sub-token embeddings of size d_model/ell",
                fix=f"choose d_model as a multiple of {ell}, or model.embedding=sum (one table per digit, summed)",
            )
        self.base, self.ell, self.layout = base, ell, layout
        # named like the plain token table so that with ell = 1 the weights are interchangeable with MDLM's
        rows, width = (base + 1, d_model // ell) if layout == "concat" else (ell * (base + 1), d_model)
        self.table = nn.Embedding(rows, width)
        nn.init.normal_(self.table.weight, std=0.02)

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        if y.dim() != 3 or y.shape[-1] != self.ell:
            raise ValueError(f"expected sub-token ids of shape (B, L, ell={self.ell}), got {tuple(y.shape)}")
        B, L, _ = y.shape
        if self.layout == "sum":
            offsets = torch.arange(self.ell, device=y.device) * (self.base + 1)
            return self.table(y + offsets).sum(-2)
        return self.table(y).reshape(B, L, -1)
