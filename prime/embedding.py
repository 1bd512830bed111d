"""MDM-Prime's sub-token embedding (the encoder of ``PerceiverDIT``).

Each sub-token y^{i,j} in {0..b-1} U {m} (mask id = b) is looked up in one shared (b + 1) x (D / ell)
table and the ell embeddings of token i are concatenated in order j into a D-dimensional token
embedding, so the transformer still runs on L token positions, not L * ell.
"""

from __future__ import annotations

import torch
from torch import nn

from harness.errors import ConfigError


class SubtokenEmbedding(nn.Module):
    """(B, L, ell) sub-token ids in [0, base] -> (B, L, D)."""

    def __init__(self, base: int, ell: int, d_model: int):
        super().__init__()
        if d_model % ell:
            raise ConfigError(
                f"d_model={d_model} is not divisible by ell={ell}: the Prime embedding concatenates ell "
                f"sub-token embeddings of size d_model/ell",
                fix=f"choose d_model as a multiple of {ell}",
            )
        self.base, self.ell = base, ell
        # named like the plain token table so that with ell = 1 the weights are interchangeable with MDLM's
        self.table = nn.Embedding(base + 1, d_model // ell)
        nn.init.normal_(self.table.weight, std=0.02)

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        if y.dim() != 3 or y.shape[-1] != self.ell:
            raise ValueError(f"expected sub-token ids of shape (B, L, ell={self.ell}), got {tuple(y.shape)}")
        B, L, _ = y.shape
        return self.table(y).reshape(B, L, -1)
