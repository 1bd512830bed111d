"""BD3-LM (Arriola et al., ICLR 2025): block diffusion, autoregressive over blocks of ``block_size``
tokens with masked diffusion inside each block.

    -log p(x) = sum_b -log p(x^b | x^{<b})
              <= sum_b E_{t_b}[ w(t_b) * sum over masked i in block b of -log p(x^i | x_t^b, x^{<b}) ],

one time t_b per block, each block's NELBO the MDLM one (SUBS parameterisation: the mask logit is
-inf and unmasked tokens are carried over), so the reported number is an upper bound. Block size 1
is an autoregressive model (every term is -log p(x^i | x^{<i}) of its own network, exact under the
mask-count sampler); block size L is MDLM.

The network sees, as the BD3-LM code trains it, the noisy sequence followed by the clean one
(2L inputs, positions 0..L-1 twice) under the block-diffusion attention mask: a noisy block attends
to itself and to the clean blocks before it, a clean block to the clean blocks up to itself. Logits
come from the noisy half. The neighbour mixer (``mixer_width``) follows the same rule: a noisy
position mixes its own block's noisy neighbours and earlier blocks' clean ones; a clean position
its clean neighbours up to its own block. Sampling runs block by block: the finished blocks sit in
a key-value cache (:meth:`harness.backbone.Backbone.extend`) and the current block is drawn by the
harness's own in-block sampler (:mod:`harness.sampling.blocks`).

The BD3-LM code's settings, as config keys: the schedule (its ``LogLinearNoise`` masks with
probability t and weights 1/t, the harness's ``linear``), the clipped mask-rate range of its
training loss (``train_clip_min``/``train_clip_max``: t drawn in that range, a biased objective
that lowers the loss's variance; the reported NELBO always uses [1e-3, 1]). Its released models are
not time-conditioned and no time input is offered here: the code's time input, when switched on,
is the first block's time only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from baselines.mdlm import subs_log_probs
from harness import diffusion
from harness.backbone import KVCache
from harness.errors import CheckpointError, ConfigError
from harness.models import MODELS
from harness.models.bd3lm_import import build_bd3lm
from harness.models.masked_diffusion import MaskedDiffusion, MaskedDiffusionConfig
from harness.models.release_config import config_size


@dataclass(frozen=True)
class BD3LMConfig(MaskedDiffusionConfig):
    """``block_size`` tokens per block; the training loss draws t in [``train_clip_min``,
    ``train_clip_max``]; ``schedule`` defaults to ``linear``, the BD3-LM code's noise."""

    schedule: str = "linear"
    block_size: int = 4
    train_clip_min: float = 1e-3
    train_clip_max: float = 1.0

    def check(self) -> None:
        if isinstance(self.block_size, bool) or not isinstance(self.block_size, int) or self.block_size < 1:
            raise ConfigError(f"model.block_size must be a positive integer, got {self.block_size!r}")
        if not 0.0 < self.train_clip_min <= self.train_clip_max <= 1.0:
            raise ConfigError(
                f"model.train_clip_min/max must satisfy 0 < min <= max <= 1, got "
                f"{self.train_clip_min!r}, {self.train_clip_max!r}",
                fix="the BD3-LM paper clips to e.g. [0.3, 0.8]; the unclipped range is [1e-3, 1]",
            )


def block_diffusion_mask(length: int, block_size: int, device=None) -> torch.Tensor:
    """(2L, 2L) bool, True where a query may attend to a key, over [noisy x_t ; clean x_0]: a noisy
    block sees itself, and the clean blocks before it; a clean block sees the clean blocks up to itself."""
    ids = diffusion.block_ids(length, block_size, device)
    block = torch.cat((ids, ids))
    clean = torch.arange(2 * length, device=device) >= length
    q_block, k_block = block[:, None], block[None, :]
    q_clean, k_clean = clean[:, None], clean[None, :]
    own_noisy = (q_block == k_block) & ~q_clean & ~k_clean
    earlier_clean = (q_block > k_block) & ~q_clean & k_clean
    clean_causal = (q_block >= k_block) & q_clean & k_clean
    return own_noisy | earlier_clean | clean_causal


def block_causal_mask(length: int, block_size: int, device=None) -> torch.Tensor:
    """(L, L) bool: position i attends to every position of its own block and of earlier blocks."""
    ids = diffusion.block_ids(length, block_size, device)
    return ids[:, None] >= ids[None, :]


def mixer_sources(length: int, block_size: int, width: int, left: int, *, doubled: bool, device=None) -> torch.Tensor:
    """(N, width) long (N = 2L when ``doubled``, else L): the input each position mixes in at each
    offset (-1: none), under the attention rule of :func:`block_diffusion_mask` (``doubled``) or of
    :func:`block_causal_mask`. Neighbour j of position i is read at offset j - i + left."""
    ids = diffusion.block_ids(length, block_size, device)
    pos = torch.arange(length, device=device)
    j = pos[:, None] + torch.arange(width, device=device)[None, :] - left  # (L, width)
    inside = (j >= 0) & (j < length)
    jc = j.clamp(0, length - 1)
    same, earlier = ids[jc] == ids[:, None], ids[jc] < ids[:, None]
    clean = torch.where(inside & (same | earlier), jc, torch.full_like(jc, -1))  # block-causal, in place
    if not doubled:
        return clean
    noisy = torch.where(inside & same, jc, torch.where(inside & earlier, jc + length, torch.full_like(jc, -1)))
    return torch.cat((noisy, torch.where(clean >= 0, clean + length, clean)))


class BD3LM(MaskedDiffusion):
    """Block diffusion LM: per-block masked diffusion, autoregressive over blocks; NLL is an upper bound."""

    family = "bd3lm"
    config_class = BD3LMConfig
    table_order = 1
    samplers = ("ancestral", "first-hitting", "remdm")
    release_formats = ("bd3lm-hf:", "bd3lm-ckpt:")
    token_convention = (
        "all L positions of each row are scored, BOS/EOS included, as MDLM's NELBO (the BD3-LM code keeps "
        "the first token visible and unscored)"
    )

    def __init__(
        self,
        *,
        block_size: int = 4,
        train_clip_min: float = 1e-3,
        train_clip_max: float = 1.0,
        schedule: str = "linear",
        time_conditioning: bool = False,
        **shape: Any,
    ):
        if time_conditioning:
            raise ConfigError(
                "bd3lm has no time input: BD3-LM draws one time per block and its released models are not "
                "time-conditioned",
                fix="drop model.time_conditioning",
            )
        BD3LMConfig(block_size=block_size, train_clip_min=train_clip_min, train_clip_max=train_clip_max).check()
        super().__init__(
            schedule=schedule,
            extra_hparams=dict(
                block_size=int(block_size), train_clip_min=float(train_clip_min), train_clip_max=float(train_clip_max)
            ),
            **shape,
        )
        self.block_size = int(block_size)
        self.train_clip = (float(train_clip_min), float(train_clip_max))
        self._layouts: dict[tuple[int, bool, str], tuple[torch.Tensor, torch.Tensor | None]] = {}

    # -- facts ----------------------------------------------------------------------------------
    @property
    def nelbo_block_size(self) -> int:
        return self.block_size

    @property
    def sampling_block_size(self) -> int:
        return self.block_size

    def protocol(self) -> dict[str, Any]:
        return {
            "block_size": self.block_size,
            "nelbo": "sum over blocks of the block's NELBO given the clean blocks before it, one t per block",
            "train_clip": list(self.train_clip),
        }

    @classmethod
    def label(cls, cfg) -> str:
        return f"{cls.family}, block={cfg.block_size}"

    def transfer_keys(self) -> dict[str, Any]:
        return {self.family: {"block_size": self.block_size, "train_clip": list(self.train_clip)}}

    @classmethod
    def load_transfer(cls, state: dict, *, shape: dict, section: Any, doc: dict, where: str, common: dict[str, Any]):

        block = section if isinstance(section, dict) else {}
        shape = dict(shape, block_size=config_size(block, "block_size", where=where, label="bd3lm.block_size"))
        clip = block.get("train_clip", [1e-3, 1.0])
        if not (isinstance(clip, list) and len(clip) == 2 and all(isinstance(v, (int, float)) for v in clip)):
            raise CheckpointError(f"{where}: bd3lm.train_clip is {clip!r}", fix="import the checkpoint again")
        kept = {k: v for k, v in common.items() if k not in ("time_conditioning", "tokenizer_folder")}
        return build_bd3lm(state, shape=shape, clip=(float(clip[0]), float(clip[1])), extra_keys=[], **kept)

    bench_nll_cost_target = 2.5
    network_positions_per_token = 2

    @classmethod
    def bench_variants(cls) -> tuple[dict[str, Any], ...]:
        return ({"block_size": 16},)

    # -- the network ----------------------------------------------------------------------------
    def _layout(self, length: int, doubled: bool, device) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The attention mask and mixer sources of a row of ``length`` tokens (cached per length)."""
        key = (length, doubled, str(device))
        if key not in self._layouts:
            build = block_diffusion_mask if doubled else block_causal_mask
            mask = build(length, self.block_size, device)
            mixer = self.backbone.mixer or (self.backbone.block_mixers[0] if self.backbone.block_mixers else None)
            sources = None
            if mixer is not None:
                sources = mixer_sources(
                    length, self.block_size, mixer.width, mixer.left, doubled=doubled, device=device
                )
            self._layouts[key] = (mask, sources)
        return self._layouts[key]

    def log_probs(
        self, z_t: torch.Tensor, t: torch.Tensor | None = None, attention_mask=None, x0: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, L) ids -> (B, L, C) SUBS log-probabilities. With ``x0`` (z_t a corruption of it: the
        estimators, the loss): log p(x_0^i | z_t^{block(i)}, x_0^{<block(i)}) on the two-halves layout.
        Without: z_t's blocks before its last partly masked one are taken as clean, under the
        block-causal mask (what sampling sees, without the cache)."""
        L = z_t.shape[1]
        if x0 is None:
            mask, sources = self._layout(L, False, z_t.device)
            logits = self.backbone(z_t, None, attention_mask, attn_mask=mask, mixer_sources=sources)
            return subs_log_probs(logits, z_t, self.mask_id)
        mask, sources = self._layout(L, True, z_t.device)
        positions = torch.arange(L, device=z_t.device).repeat(2)
        keys = None if attention_mask is None else torch.cat((attention_mask, attention_mask), 1)
        logits = self.backbone(
            torch.cat((z_t, x0), 1), None, keys, attn_mask=mask, positions=positions, mixer_sources=sources, outputs=L
        )
        return subs_log_probs(logits, z_t, self.mask_id)

    def loss(self, x0: torch.Tensor, *, generator: torch.Generator | None = None, attention_mask=None) -> torch.Tensor:
        """Per-token training loss: one t per block in the clipped range, stratified over batch x blocks."""
        self.check_tokens(x0)
        tokens = self.scored_tokens(x0, attention_mask, None)
        B, L = x0.shape
        blocks = -(-L // self.block_size)
        u = diffusion.block_uniforms(B, blocks, 1, generator=generator, device=x0.device)[:, 0]
        z_t, masked, weight, _ = diffusion.corrupt_blocks(
            x0,
            u,
            tokens,
            block_size=self.block_size,
            sampler="t",
            schedule=self.schedule,
            process=self.process,
            generator=generator,
            t_range=self.train_clip,
        )
        log_p = self.log_probs(z_t, None, attention_mask, x0)
        nats = self.unit_terms(log_p, x0, x0, masked, self.train_estimator, tokens)
        per_block = diffusion.blocked(nats, self.block_size).sum(-1)
        return (weight.to(torch.float32) * per_block).sum() / tokens.sum().clamp_min(1)

    # -- block-by-block sampling (harness.sampling.blocks) ----------------------------------------
    def new_sampling_cache(self) -> KVCache:
        return KVCache()

    def block_log_probs(self, z: torch.Tensor, cache: KVCache, rows: torch.Tensor | None = None) -> torch.Tensor:
        """(B, n) the current block (after the cache's finished positions) -> (B, n, C) SUBS log-probabilities."""
        return subs_log_probs(self.backbone.extend(z, cache, rows=rows), z, self.mask_id)

    def finish_block(self, tokens: torch.Tensor, cache: KVCache) -> None:
        """Append a finished block (B, n) to the cache."""
        self.backbone.extend(tokens, cache, store=True)


MODELS.register("bd3lm", BD3LM)

__all__ = ["BD3LM", "BD3LMConfig", "block_causal_mask", "block_diffusion_mask", "mixer_sources"]
