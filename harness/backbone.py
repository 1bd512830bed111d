"""A DiT-style transformer backbone in the manner of MDLM's ``DIT``, on PyTorch SDPA attention.

The backbone maps embedded inputs to logits and knows nothing about masking or sampling:

    embedding(inputs) -> h (B, L, D) -> n_layers x Block(h, c) -> FinalLayer(h, c) -> logits (B, L, C)

* token embedding is replaceable (Prime injects its sub-token embedding, whose input is (B, L, ell));
* rotary position embeddings on queries and keys, plus an optional additive position module
  ``positions(L) -> (L, D)`` (e.g. :class:`harness.positions.ImagePositions` for pixel layouts);
* an optional :class:`NeighbourMixer` (``mixer_width`` > 0): each position adds a learned depthwise
  mix of its neighbours' states (the previous ones only, when causal), once before the blocks
  (``mixer_placement: input``) or before every block (``blocks``);
* pre-norm blocks; optional adaLN time conditioning (shift/scale/gate from a time embedding ``c``);
* attention through ``torch.nn.functional.scaled_dot_product_attention``, bidirectional or causal,
  so the same code runs on CPU in float32 and on CUDA under bf16 autocast;
* final projection to C logits, zero-initialised as in MDLM (the untrained model predicts uniformly).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from harness.errors import InputError


@dataclass(frozen=True)
class BackboneConfig:
    """Shape of the network. ``vocab_in`` counts input ids (with a mask id when the family has one);
    ``vocab_out`` is C, the number of output classes."""

    vocab_in: int
    vocab_out: int
    seq_len: int
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    mlp_ratio: int = 4
    dropout: float = 0.0
    causal: bool = False
    time_conditioning: bool = False
    cond_dim: int = 64
    mixer_width: int = 0
    mixer_placement: str = "input"


class TokenEmbedding(nn.Module):
    """Plain lookup table: (B, L) ids -> (B, L, D)."""

    def __init__(self, vocab: int, d_model: int):
        super().__init__()
        self.table = nn.Embedding(vocab, d_model)
        nn.init.normal_(self.table.weight, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table(ids)


class Rotary(nn.Module):
    """Rotary position embedding (RoFormer) applied to (..., L, Dh) queries and keys.

    Pairs (2i, 2i + 1) rotate by angle_i: (x1 cos - x2 sin, x2 cos + x1 sin). Computed as
    x * cos' + swap(x) * sin' with cos' = (cos_i, cos_i) and sin' = (-sin_i, sin_i) interleaved,
    which is the same float arithmetic in three passes instead of a stack of four products."""

    def __init__(self, head_dim: int, max_len: int, base: float = 10_000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
        angles = torch.outer(torch.arange(max_len, dtype=torch.float64), inv_freq)  # (L, Dh/2)
        cos, sin = angles.cos().float(), angles.sin().float()
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.register_buffer("cos2", torch.stack((cos, cos), -1).flatten(-2), persistent=False)
        self.register_buffer("sin2", torch.stack((-sin, sin), -1).flatten(-2), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        L = x.shape[-2]
        cos, sin = self.cos2[:L].to(x.dtype), self.sin2[:L].to(x.dtype)
        swapped = x.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)  # (x2, x1) in each pair
        return (x * cos).add_(swapped.mul_(sin))


class NeighbourMixer(nn.Module):
    """Residual depthwise convolution over the sequence: h + conv_w(h), (B, L, D) -> (B, L, D).

    Why: a masked position learns nothing from context until attention has learned to look at its
    neighbours, while an ARM's own input already predicts the next token; this gives every position
    its ``width`` nearest neighbours' embeddings (centred; the ``width`` previous ones, itself
    included, when ``causal``, so an ARM stays autoregressive) from the first step.
    Padding (``keep`` False) is zeroed before mixing, so it never leaks into real positions."""

    def __init__(self, d_model: int, width: int, causal: bool):
        super().__init__()
        if width < 1:
            raise InputError(f"mixer width must be >= 1, got {width}")
        self.width, self.causal = width, causal
        self.conv = nn.Conv1d(d_model, d_model, width, groups=d_model, bias=False)

    def forward(self, h: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        x = h if keep is None else h * keep[..., None].to(h.dtype)
        x = x.transpose(1, 2)  # (B, D, L)
        left = self.width - 1 if self.causal else (self.width - 1) // 2
        x = F.pad(x, (left, self.width - 1 - left))
        return h + self.conv(x).transpose(1, 2)


class TimeEmbedding(nn.Module):
    """Sinusoidal features of t in [0, 1] followed by an MLP: (B,) -> (B, cond_dim)."""

    def __init__(self, cond_dim: int, freq_dim: int = 256):
        super().__init__()
        self.freq_dim = freq_dim
        self.mlp = nn.Sequential(nn.Linear(freq_dim, cond_dim), nn.SiLU(), nn.Linear(cond_dim, cond_dim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        half = self.freq_dim // 2
        freqs = torch.exp(-math.log(10_000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
        args = (t.float() * 1000.0)[:, None] * freqs[None]
        return self.mlp(torch.cat([args.cos(), args.sin()], dim=-1))


def _modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale[:, None]) + shift[:, None]


class Block(nn.Module):
    """Pre-norm transformer block with optional adaLN modulation."""

    def __init__(self, cfg: BackboneConfig, rotary: Rotary):
        super().__init__()
        d = cfg.d_model
        self.n_heads = cfg.n_heads
        self.causal = cfg.causal
        self.dropout = cfg.dropout
        self.rotary = rotary
        self.norm1 = nn.LayerNorm(d, elementwise_affine=not cfg.time_conditioning)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=not cfg.time_conditioning)
        self.mlp = nn.Sequential(
            nn.Linear(d, cfg.mlp_ratio * d), nn.GELU(approximate="tanh"), nn.Linear(cfg.mlp_ratio * d, d)
        )
        self.drop = nn.Dropout(cfg.dropout)
        self.adaln = None
        if cfg.time_conditioning:
            self.adaln = nn.Linear(cfg.cond_dim, 6 * d)
            nn.init.zeros_(self.adaln.weight)
            nn.init.zeros_(self.adaln.bias)

    def forward(self, h: torch.Tensor, c: torch.Tensor | None, attn_mask: torch.Tensor | None) -> torch.Tensor:
        B, L, D = h.shape
        if self.adaln is not None:
            shift1, scale1, gate1, shift2, scale2, gate2 = self.adaln(c).chunk(6, dim=-1)
        x = self.norm1(h)
        if self.adaln is not None:
            x = _modulate(x, shift1, scale1)
        q, k, v = self.qkv(x).view(B, L, 3, self.n_heads, D // self.n_heads).permute(2, 0, 3, 1, 4)
        q, k = self.rotary(torch.stack((q, k))).unbind(0)  # one rotary pass over queries and keys
        a = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=attn_mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=self.causal and attn_mask is None,
        )
        a = self.drop(self.proj(a.transpose(1, 2).reshape(B, L, D)))
        h = h + (gate1[:, None] * a if self.adaln is not None else a)
        x = self.norm2(h)
        if self.adaln is not None:
            x = _modulate(x, shift2, scale2)
        m = self.drop(self.mlp(x))
        return h + (gate2[:, None] * m if self.adaln is not None else m)


class FinalLayer(nn.Module):
    def __init__(self, cfg: BackboneConfig):
        super().__init__()
        self.norm = nn.LayerNorm(cfg.d_model, elementwise_affine=not cfg.time_conditioning)
        self.linear = nn.Linear(cfg.d_model, cfg.vocab_out)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)
        self.adaln = None
        if cfg.time_conditioning:
            self.adaln = nn.Linear(cfg.cond_dim, 2 * cfg.d_model)
            nn.init.zeros_(self.adaln.weight)
            nn.init.zeros_(self.adaln.bias)

    def forward(self, h: torch.Tensor, c: torch.Tensor | None) -> torch.Tensor:
        x = self.norm(h)
        if self.adaln is not None:
            shift, scale = self.adaln(c).chunk(2, dim=-1)
            x = _modulate(x, shift, scale)
        return self.linear(x)


class Backbone(nn.Module):
    """inputs (shape set by the embedding; (B, L) for plain tokens) and t (B,) -> logits (B, L, C).

    ``t`` is ignored unless ``time_conditioning`` is on. ``attention_mask`` (B, L) with 1 on real
    tokens restricts keys (padding never attended to); ``None`` attends everywhere.
    """

    def __init__(self, cfg: BackboneConfig, embedding: nn.Module | None = None, positions: nn.Module | None = None):
        super().__init__()
        if cfg.d_model % cfg.n_heads:
            raise InputError(f"d_model={cfg.d_model} must be divisible by n_heads={cfg.n_heads}")
        self.cfg = cfg
        self.embedding = embedding if embedding is not None else TokenEmbedding(cfg.vocab_in, cfg.d_model)
        self.positions = positions
        rotary = Rotary(cfg.d_model // cfg.n_heads, cfg.seq_len)
        self.blocks = nn.ModuleList(Block(cfg, rotary) for _ in range(cfg.n_layers))
        self.time_embedding = TimeEmbedding(cfg.cond_dim) if cfg.time_conditioning else None
        self.final = FinalLayer(cfg)
        self.drop = nn.Dropout(cfg.dropout)
        # created last: with mixer_width 0 a seed gives the same weights as before the key existed
        self.mixer, self.block_mixers = None, None
        if cfg.mixer_width and cfg.mixer_placement == "blocks":
            self.block_mixers = nn.ModuleList(
                NeighbourMixer(cfg.d_model, cfg.mixer_width, cfg.causal) for _ in range(cfg.n_layers)
            )
        elif cfg.mixer_width:
            if cfg.mixer_placement != "input":
                raise InputError(f"mixer_placement must be 'input' or 'blocks', got {cfg.mixer_placement!r}")
            self.mixer = NeighbourMixer(cfg.d_model, cfg.mixer_width, cfg.causal)

    def forward(
        self, inputs: torch.Tensor, t: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        h = self.embedding(inputs)
        if self.positions is not None:
            h = h + self.positions(h.shape[1]).to(h.dtype)
        h = self.drop(h)
        B, L, _ = h.shape
        if L > self.cfg.seq_len:
            raise InputError(f"sequence length {L} exceeds the backbone's seq_len={self.cfg.seq_len}")
        if self.mixer is not None:
            h = self.mixer(h, attention_mask)
        c = None
        if self.time_embedding is not None:
            if t is None:
                raise InputError("this backbone is time-conditioned: pass t (B,)")
            c = F.silu(self.time_embedding(t.to(h.device).expand(B) if t.dim() == 0 else t))
        mask = None
        if attention_mask is not None and not bool(attention_mask.all()):  # no padding: SDPA's unmasked path
            keys = attention_mask.to(torch.bool)[:, None, None, :]  # (B, 1, 1, L)
            mask = keys
            if self.cfg.causal:
                mask = mask & torch.ones(L, L, dtype=torch.bool, device=h.device).tril()
            # a row with no visible key would give NaN; let padded queries see themselves
            mask = mask | torch.eye(L, dtype=torch.bool, device=h.device)
        for i, block in enumerate(self.blocks):
            if self.block_mixers is not None:
                h = self.block_mixers[i](h, attention_mask)
            h = block(h, c, mask)
        return self.final(h, c).float()
