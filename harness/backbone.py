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
  so the same code runs on CPU in float32 and on CUDA under bf16 autocast; a family may pass its own
  boolean attention mask, position ids and mixer neighbours (BD3-LM's block layouts), and
  :meth:`Backbone.extend` runs new positions against a :class:`KVCache` of finished ones;
* final projection to C logits, zero-initialised as in MDLM (the untrained model predicts uniformly).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from harness.errors import InputError
from harness.graph import tracked


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
    """Plain lookup table: (B, L) ids -> (B, L, D). A float (B, L, V) input is a distribution over the
    ids (rows summing to 1) and embeds as the weighted average of the rows of the table (DUO's soft
    curriculum input)."""

    def __init__(self, vocab: int, d_model: int):
        super().__init__()
        self.table = nn.Embedding(vocab, d_model)
        nn.init.normal_(self.table.weight, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if ids.is_floating_point():
            return ids.to(self.table.weight.dtype) @ self.table.weight
        return self.table(ids)


class Rotary(nn.Module):
    """Rotary position embedding (RoFormer) applied to (..., L, Dh) queries and keys.

    Pairs (2i, 2i + 1) rotate by angle_i: (x1 cos - x2 sin, x2 cos + x1 sin), as
    x * cos' + swap(x) * sin' with cos' = (cos_i, cos_i) and sin' = (-sin_i, sin_i) interleaved.

    Without a graph it takes two passes and no copy of x. First x * cos' is written into a dense
    tensor whose dimensions lie in memory in x's order (for a view of the fused projection that is
    (B, L, 2, H, Dh), so the attention's output comes back already in (B, L, H, Dh) order and needs
    no copy). Then, each pair read as one complex number z = x1 + i x2, ``addcmul_`` adds
    z * (i sin) = (-x2 sin, x1 sin) to it. That product is exact whichever way the kernel fuses it
    (one factor of each of its products is zero), so the sums round as x1 cos - x2 sin and
    x2 cos + x1 sin do: the same values bit for bit; an entry of x that is exactly zero may leave a
    zero of the other sign, which no later operation tells apart, and an infinite entry gives NaN
    where the two-product form gave an infinity (the attention makes NaN of either). A full complex
    multiply by (cos + i sin) would be one pass, but its scalar tail fuses a multiply-add and rounds
    differently. Half-precision inputs (no complex kernels) take x * (sin, sin) as a second product
    and one strided pass per half."""

    def __init__(self, head_dim: int, max_len: int, base: float = 10_000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
        angles = torch.outer(torch.arange(max_len, dtype=torch.float64), inv_freq)  # (L, Dh/2)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(
        self, x: torch.Tensor, positions: torch.Tensor | None = None, workspace: Workspace | None = None
    ) -> torch.Tensor:
        """``positions`` (L,): the position of each row of x (default 0 .. L - 1). x may have any
        strides (e.g. a view into a fused projection). With a graph the result is contiguous; without
        one it is dense and laid out in x's dimension order (contiguous when x is), a new tensor or,
        with a ``workspace``, the workspace's ``pair`` slot."""
        rows = slice(0, x.shape[-2]) if positions is None else positions
        cos, sin = self.cos[rows].to(x.dtype), self.sin[rows].to(x.dtype)
        cos2 = torch.stack((cos, cos), -1).flatten(-2)
        if tracked(x) or torch.compiler.is_compiling():
            # training: whole-tensor passes, whose backward vectorises (the strided half passes below
            # cost a training step about 1%); torch.compile fuses these into one kernel and has no
            # complex kernels
            x = x.contiguous()
            sin2 = torch.stack((-sin, sin), -1).flatten(-2)
            return (x * cos2).add_(x.unflatten(-1, (-1, 2)).flip(-1).flatten(-2).mul_(sin2))
        # no graph: x * cos' in x's own memory order, then the pairs' sine terms added in one pass
        out = torch.mul(x, cos2, out=_dense_like(workspace, "pair", x))
        if _complex_view_ok(x):
            turn = torch.complex(torch.zeros_like(sin), sin)  # i sin_i, one per pair
            _as_complex(out).addcmul_(_as_complex(x), turn)
            return out
        products = torch.mul(x, torch.stack((sin, sin), -1).flatten(-2), out=_dense_like(workspace, "tmp", x))
        parts, sines = out.unflatten(-1, (-1, 2)), products.unflatten(-1, (-1, 2))
        parts[..., 0].sub_(sines[..., 1])
        parts[..., 1].add_(sines[..., 0])
        return out


def _complex_view_ok(x: torch.Tensor) -> bool:
    """Whether x's last dimension reads as complex numbers (float32 or float64 pairs, every other
    stride and the offset even, as ``torch.view_as_complex`` requires)."""
    return (
        x.dtype in (torch.float32, torch.float64)
        and x.stride(-1) == 1
        and x.storage_offset() % 2 == 0
        and all(stride % 2 == 0 for stride in x.stride()[:-1])
    )


def _as_complex(x: torch.Tensor) -> torch.Tensor:
    return torch.view_as_complex(x.unflatten(-1, (-1, 2)))


class Workspace:
    """Memory that one forward pass without a graph lends from block to block.

    Every block makes intermediates of the same sizes: the fused projection, the rotated queries and
    keys, the attention output and the MLP's hidden layer. Asked for fresh each time, the allocator
    often hands back pages the kernel must fault in again (tens of thousands per forward at the
    bench's shape). Here up to three flat slots are reused instead, each intermediate taking a slot that no
    live tensor holds at that point of :meth:`Block.forward`, so the peak stays about what a block
    needed before. Reuse changes no number: the same kernels write the same values."""

    def __init__(self) -> None:
        self._slots: dict[str, torch.Tensor] = {}

    @staticmethod
    def usable(h: torch.Tensor) -> bool:
        """Whether a pass over ``h`` may use one: no graph (autograd keeps its intermediates), no
        autocast (an ``out=`` product is not autocast, so it would run in the buffer's dtype), and not
        under ``torch.compile`` (which plans its own buffers and cannot trace writes into views of a
        flat slot)."""
        return (
            not torch.is_grad_enabled()
            and not torch.is_autocast_enabled(h.device.type)
            and not torch.compiler.is_compiling()
        )

    def take(self, slot: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """A tensor of ``shape`` (``like``'s dtype and device) over slot ``slot``'s memory; what the
        slot held before is overwritten by whoever writes into it."""
        n = math.prod(shape)
        buf = self._slots.get(slot)
        if buf is None or buf.numel() < n or buf.dtype != like.dtype or buf.device != like.device:
            buf = self._slots[slot] = torch.empty(n, dtype=like.dtype, device=like.device)
        return buf[:n].view(shape)


def _buffer(workspace: Workspace | None, slot: str, shape, like: torch.Tensor) -> torch.Tensor:
    if workspace is None:
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    return workspace.take(slot, tuple(shape), like)


def _dense_like(workspace: Workspace | None, slot: str, x: torch.Tensor) -> torch.Tensor:
    """A tensor of x's shape and dtype, dense, with its dimensions in memory in x's order (largest
    stride first, the last dimension innermost), so an elementwise pass reads and writes both in the
    same order; from ``slot`` of the ``workspace`` when there is one."""
    order = sorted(range(x.dim() - 1), key=lambda i: -x.stride(i)) + [x.dim() - 1]
    dense = _buffer(workspace, slot, [x.shape[i] for i in order], x)
    return dense.permute([order.index(i) for i in range(x.dim())])


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

    @property
    def left(self) -> int:
        """How many earlier positions a position mixes in (the rest of the width lies after it)."""
        return self.width - 1 if self.causal else (self.width - 1) // 2

    def forward(
        self, h: torch.Tensor, keep: torch.Tensor | None = None, sources: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``sources`` (L, width) long: instead of the plain neighbours, position i mixes in the state
        at ``sources[i, k]`` (-1: zero) where the convolution reads position i + k - left (a family's
        own layout, e.g. BD3-LM's noisy and clean halves, where a neighbour may sit elsewhere)."""
        x = h if keep is None else h * keep[..., None].to(h.dtype)
        if sources is not None:
            padded = F.pad(x, (0, 0, 0, 1))  # row L is zero: where source -1 points
            index = sources.masked_fill(sources < 0, x.shape[1])
            weight = self.conv.weight[:, 0, :]  # (D, width)
            # one gather per offset: index_select's backward (index_add) is cheap on CPU, where one
            # (B, L, width, D) gather and an einsum spend more than the whole conv path
            for k in range(self.width):
                h = h + padded.index_select(1, index[:, k]) * weight[:, k]
            return h
        x = x.transpose(1, 2)  # (B, D, L)
        left = self.left
        x = F.pad(x, (left, self.width - 1 - left))
        return h + self.conv(x).transpose(1, 2)

    def extend(self, h: torch.Tensor, tail: torch.Tensor) -> torch.Tensor:
        """Mix new positions ``h`` (B, n, D) that follow the ``tail`` (B, left, D) of finished ones
        (zeros where there were none) and precede nothing: what :meth:`forward` gives those
        positions on the whole sequence when nothing lies after them."""
        x = torch.cat((tail, h), 1).transpose(1, 2)
        x = F.pad(x, (0, self.width - 1 - self.left))
        return h + self.conv(x).transpose(1, 2)


class TimeEmbedding(nn.Module):
    """Sinusoidal features of t in [0, 1] followed by an MLP: (B,) -> (B, cond_dim). The features are
    computed in float32 and handed to the MLP in its weights' dtype (a float64 network takes them)."""

    def __init__(self, cond_dim: int, freq_dim: int = 256):
        super().__init__()
        self.freq_dim = freq_dim
        self.mlp = nn.Sequential(nn.Linear(freq_dim, cond_dim), nn.SiLU(), nn.Linear(cond_dim, cond_dim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        half = self.freq_dim // 2
        freqs = torch.exp(-math.log(10_000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
        args = (t.float() * 1000.0)[:, None] * freqs[None]
        return self.mlp(torch.cat([args.cos(), args.sin()], dim=-1).to(self.mlp[0].weight.dtype))


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

    def forward(
        self,
        h: torch.Tensor,
        c: torch.Tensor | None,
        attn_mask: torch.Tensor | None,
        positions: torch.Tensor | None = None,
        past: tuple[torch.Tensor, torch.Tensor] | None = None,
        queries: int | None = None,
        workspace: Workspace | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]] | torch.Tensor:
        """``past``: keys and values (B, H, P, Dh) of earlier positions that every query attends to;
        with it, the new keys and values (past included) come back beside the output. ``queries``:
        the outputs of the first that many positions only (every position is still a key).
        ``workspace`` (no graph, no autocast; :meth:`Workspace.usable`): the intermediates go into its
        slots, ``wide`` for the projection and then the MLP's hidden layer, ``pair`` for the rotated
        queries and keys and then the attention's projection, ``tmp`` (only when needed) for a
        half-precision rotation's sine products and then a copy of the attention output, should SDPA
        return it in (B, H, L, Dh) order (on CPU it follows the queries' (B, L, H, Dh) order and
        needs none); the output itself is always a new tensor."""
        B, L, D = h.shape
        inplace = not torch.is_grad_enabled()  # no graph to keep: reuse the buffers this block made
        ws = workspace
        if self.adaln is not None:
            shift1, scale1, gate1, shift2, scale2, gate2 = self.adaln(c).chunk(6, dim=-1)
        x = self.norm1(h)
        if self.adaln is not None:
            x = _modulate(x, shift1, scale1)
        qkv = self._linear(self.qkv, x, ws, "wide")
        qkv = qkv.view(B, L, 3, self.n_heads, D // self.n_heads).permute(2, 0, 3, 1, 4)
        # one rotary pass over queries and keys, read from the projection: (2, B, H, L, Dh), contiguous
        q, k = self.rotary(qkv[:2], positions, ws).unbind(0)
        v = qkv[2]
        if past is not None:
            k, v = torch.cat((past[0], k), 2), torch.cat((past[1], v), 2)
        if queries is not None:
            if self.causal and attn_mask is None:
                raise InputError("queries= needs an explicit attn_mask on a causal block")
            q, h, L = q[:, :, :queries], h[:, :queries], queries
            attn_mask = None if attn_mask is None else attn_mask[..., :queries, :]
        a = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=attn_mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=self.causal and attn_mask is None and past is None,
        )
        a = a.transpose(1, 2)  # (B, L, H, Dh); the rotated queries and keys are dead from here
        if ws is not None and not a.is_contiguous():  # SDPA kept the queries' (B, H, L, Dh) order
            a = ws.take("tmp", tuple(a.shape), a).copy_(a)
        a = a.reshape(B, L, D)
        a = self.drop(self._linear(self.proj, a, ws, "pair"))
        h = _residual(h, a, gate1 if self.adaln is not None else None, inplace)
        x = self.norm2(h)
        if self.adaln is not None:
            x = _modulate(x, shift2, scale2)
        fc1, act, fc2 = self.mlp
        m = self._linear(fc1, x, ws, "wide")  # the projection (and so v) is dead from here
        m = torch.ops.aten.gelu_(m, approximate=act.approximate) if inplace else act(m)
        m = self.drop(fc2(m))
        out = _residual(h, m, gate2 if self.adaln is not None else None, inplace)
        return out if past is None else (out, (k, v))

    @staticmethod
    def _linear(layer: nn.Linear, x: torch.Tensor, ws: Workspace | None, slot: str) -> torch.Tensor:
        """``layer(x)``, or with a workspace the same product (the kernel ``F.linear`` runs on the
        flattened rows) written into ``slot``."""
        if ws is None:
            return layer(x)
        rows = x.reshape(-1, x.shape[-1])
        out = ws.take(slot, (rows.shape[0], layer.out_features), x)
        if layer.bias is None:
            torch.mm(rows, layer.weight.t(), out=out)
        else:
            torch.addmm(layer.bias, rows, layer.weight.t(), out=out)
        return out.view(*x.shape[:-1], layer.out_features)


def _residual(h: torch.Tensor, branch: torch.Tensor, gate: torch.Tensor | None, inplace: bool) -> torch.Tensor:
    """h + gate * branch (gate (B, D) or None). ``inplace``: written into ``branch``, a tensor the
    caller made and no graph needs (the same sums: products and sums commute bit for bit), unless the
    sum's dtype is wider than ``branch``'s (under autocast a bf16 branch joins a float32 stream, which
    must stay float32)."""
    wider = torch.promote_types(h.dtype, branch.dtype)
    if gate is not None:
        wider = torch.promote_types(wider, gate.dtype)
    if not inplace or wider != branch.dtype:
        return h + (gate[:, None] * branch if gate is not None else branch)
    if gate is not None:
        branch.mul_(gate[:, None])
    return branch.add_(h)


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
        self,
        inputs: torch.Tensor,
        t: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        *,
        attn_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        mixer_sources: torch.Tensor | None = None,
        outputs: int | None = None,
    ) -> torch.Tensor:
        """``attn_mask`` (L, L) bool, True where query i may attend to key j (the family's own
        layout; padding from ``attention_mask`` is applied on top); ``positions`` (L,) the position
        of each input (default 0 .. L - 1; a layout may repeat them); ``mixer_sources`` (L, width)
        the neighbours each position mixes in (:meth:`NeighbourMixer.forward`); ``outputs``: the
        logits of the first that many positions only (a layout whose later inputs are context, e.g.
        BD3-LM's clean half)."""
        h = self._embed(inputs, positions)
        B, L, _ = h.shape
        if self.mixer is not None:
            h = self.mixer(h, attention_mask, mixer_sources)
        c = self._condition(t, B, h.device)
        mask = None
        if attn_mask is not None:
            mask = attn_mask.to(device=h.device, dtype=torch.bool)[None, None]
        if attention_mask is not None and not bool(attention_mask.all()):  # no padding: SDPA's unmasked path
            keys = attention_mask.to(torch.bool)[:, None, None, :]  # (B, 1, 1, L)
            mask = keys if mask is None else mask & keys
            if self.cfg.causal and attn_mask is None:
                mask = mask & torch.ones(L, L, dtype=torch.bool, device=h.device).tril()
        if mask is not None:
            # a row with no visible key would give NaN; let padded queries see themselves
            mask = mask | torch.eye(L, dtype=torch.bool, device=h.device)
        ws = Workspace() if Workspace.usable(h) else None  # blocks reuse one another's intermediates
        for i, block in enumerate(self.blocks):
            if self.block_mixers is not None:
                h = self.block_mixers[i](h, attention_mask, mixer_sources)
            last = i == len(self.blocks) - 1
            # later positions: keys only
            h = block(h, c, mask, positions, queries=outputs if last else None, workspace=ws)
        return self.final(h, c).float()

    def _embed(self, inputs: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
        h = self.embedding(inputs)
        L = h.shape[1]
        last = L if positions is None else int(positions.max()) + 1 if positions.numel() else 0
        if last > self.cfg.seq_len:
            raise InputError(f"sequence length {last} exceeds the backbone's seq_len={self.cfg.seq_len}")
        if self.positions is not None:
            table = self.positions(last).to(h.dtype)
            h = h + (table if positions is None else table[positions])
        return self.drop(h)

    def _condition(self, t: torch.Tensor | None, B: int, device) -> torch.Tensor | None:
        if self.time_embedding is None:
            return None
        if t is None:
            raise InputError("this backbone is time-conditioned: pass t (B,)")
        return F.silu(self.time_embedding(t.to(device).expand(B) if t.dim() == 0 else t))

    @torch.no_grad()
    def extend(
        self, inputs: torch.Tensor, cache: KVCache, *, rows: torch.Tensor | None = None, store: bool = False
    ) -> torch.Tensor:
        """Logits (B, n, C) of n new positions that follow the ``cache``'s finished ones and attend
        to all of them and to each other (nothing lies after them): the block-by-block sampler's
        call, equal to a forward pass over the whole sequence under a block-causal mask whose last
        block is the new one. ``rows`` (bool (B_cache,)) picks the cache rows these inputs belong to.
        ``store``: append the new positions to the cache (a finished block). Not time-conditioned."""
        if self.time_embedding is not None:
            raise InputError("extend() runs networks without a time input")
        start = cache.length
        positions = torch.arange(start, start + inputs.shape[1], device=inputs.device)
        h = self._embed(inputs, positions)
        mixers = ([self.mixer] if self.mixer is not None else []) + list(self.block_mixers or [])
        tails = [cache.tail(j, rows, h, m.left) for j, m in enumerate(mixers)]
        new_tails, new_kv = [], []
        if self.mixer is not None:
            new_tails.append(h)
            h = self.mixer.extend(h, tails[0])
        offset = 1 if self.mixer is not None else 0
        ws = Workspace() if Workspace.usable(h) else None
        for i, block in enumerate(self.blocks):
            if self.block_mixers is not None:
                new_tails.append(h)
                h = self.block_mixers[i].extend(h, tails[offset + i])
            h, kv = block(h, None, None, positions, cache.past(i, rows, h, block.n_heads), workspace=ws)
            new_kv.append(kv)
        if store:
            cache.store(new_kv, new_tails, [m.left for m in mixers])
        return self.final(h, None).float()


def network_shape(net: nn.Module) -> dict[str, int] | None:
    """``d_model``, ``n_layers``, ``n_heads`` and ``mlp_ratio`` of a family's network, for the memory
    estimate (:mod:`harness.resources`): ours from its config, a release's DiT from the sizes it was
    built with, a transformers model from its config; None when they cannot be read."""
    if isinstance(net, Backbone):
        c = net.cfg
        return {"d_model": c.d_model, "n_layers": c.n_layers, "n_heads": c.n_heads, "mlp_ratio": c.mlp_ratio}
    shape = getattr(getattr(net, "dit", None), "shape", None)  # a release's DiT (harness.models.mdlm_dit)
    if isinstance(shape, dict):
        return dict(shape)
    config = getattr(getattr(net, "hf", None), "config", None)  # a transformers causal LM
    try:
        d, layers, heads = (int(config.hidden_size), int(config.num_hidden_layers), int(config.num_attention_heads))
    except (AttributeError, TypeError, ValueError):
        return None
    inner = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * d
    return {"d_model": d, "n_layers": layers, "n_heads": heads, "mlp_ratio": max(1, round(int(inner) / d))}


class KVCache:
    """Keys and values (B, H, P, Dh) of the P finished positions per layer, and the last states each
    neighbour mixer needs, for :meth:`Backbone.extend` (BD3-LM's block-by-block sampling)."""

    def __init__(self) -> None:
        self.length = 0
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.tails: list[torch.Tensor] = []

    def past(self, layer: int, rows: torch.Tensor | None, h: torch.Tensor, heads: int):
        """Layer ``layer``'s keys and values for the rows of ``h`` (B, n, D); empty ones at first."""
        if not self.kv:
            empty = h.new_zeros(h.shape[0], heads, 0, h.shape[2] // heads)
            return empty, empty
        k, v = self.kv[layer]
        return (k, v) if rows is None else (k[rows], v[rows])

    def tail(self, slot: int, rows: torch.Tensor | None, h: torch.Tensor, left: int) -> torch.Tensor:
        """Mixer ``slot``'s last ``left`` input states (B, left, D); zeros before the first position."""
        if not self.tails:
            return h.new_zeros(h.shape[0], left, h.shape[2])
        tail = self.tails[slot]
        return tail if rows is None else tail[rows]

    def store(self, kv: list[tuple[torch.Tensor, torch.Tensor]], states: list[torch.Tensor], lefts: list[int]) -> None:
        """Keep the keys and values ``kv`` (finished positions included) and each mixer's last states."""
        olds = self.tails or [s.new_zeros(s.shape[0], left, s.shape[2]) for s, left in zip(states, lefts)]
        self.tails = [
            torch.cat((old, new), 1)[:, old.shape[1] + new.shape[1] - left :]
            for old, new, left in zip(olds, states, lefts)
        ]
        self.kv = kv
        self.length = kv[0][0].shape[2] if kv else self.length
