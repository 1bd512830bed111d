"""MDLM's DiT, exactly, so that published MDLM checkpoints give the original log-probabilities.

Written from the architecture of Sahoo et al.'s DiT (the ``kuleshov-group/mdlm-owt`` layout):

* ``vocab_embed.embedding`` (V, D) with V = C + 1 (the mask id is C);
* ``sigma_map``: sinusoidal features of sigma (256, cos then sin, max period 10^4) -> Linear -> SiLU
  -> Linear to ``cond_dim``; the conditioning vector is SiLU of that (sigma = 0 without time
  conditioning, so c is a constant the weights were trained with);
* per block: LayerNorm without bias (computed in float32, then scaled), adaLN modulation
  (``cond_dim`` -> 6 D: shift/scale/gate for attention and MLP), fused QKV without bias, rotary
  embeddings on q and k (base 10^4, the rotate-half convention with frequencies repeated over both
  halves), bidirectional attention, output projection without bias, a tanh-GELU MLP of width 4 D;
  residuals ``x + gate * f(modulate(norm(x)))``;
* ``output_layer``: LayerNorm, adaLN (shift, scale), Linear D -> V.

Attention runs through ``scaled_dot_product_attention`` (the original uses flash-attn's varlen
kernel, the same function). Parameter names are the checkpoint's, so loading is a strict
``load_state_dict`` and every key is accounted for.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

FREQUENCY_FEATURES = 256


class _Norm(nn.Module):
    """LayerNorm without bias, normalised in float32 and then scaled."""

    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x.float(), (x.shape[-1],)) * self.weight


class _SigmaMap(nn.Module):
    def __init__(self, cond_dim: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(FREQUENCY_FEATURES, cond_dim), nn.SiLU(), nn.Linear(cond_dim, cond_dim))

    def forward(self, sigma: torch.Tensor) -> torch.Tensor:
        half = FREQUENCY_FEATURES // 2
        freqs = torch.exp(-math.log(10_000) * torch.arange(half, dtype=torch.float32, device=sigma.device) / half)
        angles = sigma.float()[:, None] * freqs[None]
        return self.mlp(torch.cat([angles.cos(), angles.sin()], dim=-1))


def _modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale) + shift


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-second, first], dim=-1) * sin


class _Block(nn.Module):
    """One DiT block; ``cond_dim=None`` is the release's causal AR block (no adaLN: residuals
    ``x + f(norm(x))``) and ``causal`` masks attention to the past."""

    def __init__(self, dim: int, n_heads: int, cond_dim: int | None, causal: bool = False):
        super().__init__()
        self.n_heads, self.causal = n_heads, causal
        self.norm1 = _Norm(dim)
        self.attn_qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.attn_out = nn.Linear(dim, dim, bias=False)
        self.norm2 = _Norm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))
        if cond_dim is not None:
            self.adaLN_modulation = nn.Linear(cond_dim, 6 * dim)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        c: torch.Tensor | None,
        attn_mask: torch.Tensor | None = None,
        past: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """-> (the block's output, the rotated keys and the values (B, H, P + L, d) it attended to).
        ``attn_mask`` (L, L) bool: True where a query may attend to a key (None: all, or the past
        under ``causal``). ``past``: keys and values of P finished positions before these L, which
        every one of them sees (BD3-LM's cache; ``cos``/``sin`` are then those of the L new positions)."""
        B, L, D = x.shape
        if c is None:
            h = self.norm1(x)
        else:
            shift1, scale1, gate1, shift2, scale2, gate2 = self.adaLN_modulation(c)[:, None].chunk(6, dim=-1)
            h = _modulate(self.norm1(x), shift1, scale1)
        qkv = self.attn_qkv(h).view(B, L, 3, self.n_heads, D // self.n_heads)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # (B, H, L, d)
        q, k, v = _rotate(q.float(), cos, sin), _rotate(k.float(), cos, sin), v.float()
        if past is not None:
            k, v = torch.cat((past[0], k), 2), torch.cat((past[1], v), 2)
        causal = self.causal and attn_mask is None and past is None
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=causal)
        attn = attn.transpose(1, 2).reshape(B, L, D)
        if c is None:
            x = x + self.attn_out(attn)
            return x + self.mlp(self.norm2(x)), (k, v)
        x = x + gate1 * self.attn_out(attn)
        return x + gate2 * self.mlp(_modulate(self.norm2(x), shift2, scale2)), (k, v)


class _Final(nn.Module):
    def __init__(self, dim: int, vocab: int, cond_dim: int | None):
        super().__init__()
        self.norm_final = _Norm(dim)
        self.linear = nn.Linear(dim, vocab)
        if cond_dim is not None:
            self.adaLN_modulation = nn.Linear(cond_dim, 2 * dim)

    def forward(self, x: torch.Tensor, c: torch.Tensor | None) -> torch.Tensor:
        if c is None:
            return self.linear(self.norm_final(x))
        shift, scale = self.adaLN_modulation(c)[:, None].chunk(2, dim=-1)
        return self.linear(_modulate(self.norm_final(x), shift, scale))


class _Embedding(nn.Module):
    def __init__(self, vocab: int, dim: int):
        super().__init__()
        self.embedding = nn.Parameter(torch.zeros(vocab, dim))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embedding[ids]


class MDLMDiT(nn.Module):
    """(B, L) ids, (B,) sigma -> (B, L, V) logits, as the original DiT computes them (float32).

    ``ell > 1`` is MDM-Prime's variant of the same network: the input is (B, L, ell) sub-tokens
    (``vocab_size`` = base + 1 values, the mask included), each embedded in ``hidden_dim / ell``
    features and concatenated in digit order (most significant first) into one token's
    ``hidden_dim``; the output layer scores ``vocab_out`` = C whole tokens.

    ``causal=True`` is the release's autoregressive baseline (``models/autoregressive.py``): the
    same blocks without adaLN or ``sigma_map``, causal attention, ``output_layer`` = LayerNorm then
    Linear; position i scores token i + 1.
    """

    def __init__(
        self,
        *,
        vocab_size: int,
        hidden_dim: int,
        cond_dim: int,
        n_blocks: int,
        n_heads: int,
        vocab_out: int | None = None,
        ell: int = 1,
        causal: bool = False,
    ):
        super().__init__()
        head = hidden_dim // n_heads
        if head * n_heads != hidden_dim or head % 2:
            raise ValueError(f"hidden_dim {hidden_dim} must split into {n_heads} heads of an even size")
        if hidden_dim % ell:
            raise ValueError(f"hidden_dim {hidden_dim} must split into ell = {ell} sub-token embeddings")
        self.ell, self.causal = ell, causal
        #: the sizes the memory estimate reads (:func:`harness.backbone.network_shape`)
        self.shape = {"d_model": hidden_dim, "n_layers": n_blocks, "n_heads": n_heads, "mlp_ratio": 4}
        self.vocab_embed = _Embedding(vocab_size, hidden_dim // ell)
        cond = None if causal else cond_dim
        if not causal:
            self.sigma_map = _SigmaMap(cond_dim)
        self.blocks = nn.ModuleList(_Block(hidden_dim, n_heads, cond, causal) for _ in range(n_blocks))
        self.output_layer = _Final(hidden_dim, vocab_out or vocab_size, cond)
        self.register_buffer("inv_freq", 1.0 / 10_000 ** (torch.arange(0, head, 2).float() / head), persistent=False)

    def forward(
        self,
        ids: torch.Tensor,
        sigma: torch.Tensor | None = None,
        *,
        attn_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(B, L) ids -> (B, L, V) logits. ``attn_mask`` (L, L) bool restricts attention (BD3-LM's
        block layouts); ``positions`` (L,) are the rotary positions (default 0 .. L-1; BD3-LM's
        training layout repeats 0 .. n-1 over its noisy and clean halves)."""
        return self._run(ids, sigma, attn_mask=attn_mask, positions=positions)[0]

    def extend(self, ids: torch.Tensor, sigma: torch.Tensor | None, cache, *, rows=None, store: bool = False):
        """Logits (B, n, V) of n new positions after the ``cache``'s finished ones (a
        :class:`harness.backbone.KVCache`), attending to all of them and to each other: a forward
        pass over the whole sequence under a block-causal mask whose last block is the new one.
        ``rows`` (bool) picks the cache rows these inputs belong to; ``store`` appends the new
        positions to the cache."""
        start = cache.length
        positions = torch.arange(start, start + ids.shape[1], device=ids.device)
        logits, kv = self._run(ids, sigma, positions=positions, cache=cache, rows=rows)
        if store:
            cache.store(kv, [], [])
        return logits

    def _run(self, ids, sigma, *, attn_mask=None, positions=None, cache=None, rows=None):
        x = self.vocab_embed(ids).float()
        if self.ell > 1:  # (B, L, ell, D / ell) -> (B, L, D)
            x = x.reshape(ids.shape[0], ids.shape[1], -1)
        c = None if self.causal else F.silu(self.sigma_map(sigma))
        if positions is None:
            positions = torch.arange(ids.shape[1], device=ids.device)
        angles = positions.to(torch.float32)[:, None] * self.inv_freq[None]
        angles = torch.cat([angles, angles], dim=-1)  # (L, d): frequencies over both halves
        cos, sin = angles.cos(), angles.sin()
        kv = []
        for i, block in enumerate(self.blocks):
            past = None if cache is None else cache.past(i, rows, x, block.n_heads)
            x, block_kv = block(x, cos, sin, c, attn_mask, past)
            kv.append(block_kv)
        return self.output_layer(x, c).float(), kv


__all__ = ["MDLMDiT"]
