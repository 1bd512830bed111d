"""Published BD3-LM checkpoints (Arriola et al., ``kuleshov-group/bd3lms``), evaluated as our ``bd3lm``.

Two forms, as released:

* ``bd3lm-hf:PATH``: the Hugging Face layout (``kuleshov-group/bd3lm-owt-block_size4`` and its
  siblings): ``config.json`` with ``model_type: bd3lm``, ``block_size``, ``vocab_size`` V = C + 1,
  ``model_length``, ``hidden_dim``, ``cond_dim``, ``n_blocks``, ``n_heads``, ``cross_attn``,
  ``adaln``, ``causal``, ``time_conditioning``, and ``model.safetensors`` with the network under
  ``backbone.*`` plus the two buffers ``sampling_eps_min`` / ``sampling_eps_max`` (the clipped
  mask-rate range the model was trained with);
* ``bd3lm-ckpt:FILE``: the training code's Lightning checkpoint: ``state_dict`` with ``backbone.*``,
  EMA ``shadow_params`` in the backbone's parameter order, the Hydra config (``block_size`` at the
  top, the network under ``model.*``, ``algo.name: bd3lm`` with ``cross_attn`` and
  ``time_conditioning``) and the clipped range as ``sampling_eps_min`` / ``sampling_eps_max``.

The network is MDLM's DiT (:class:`harness.models.mdlm_dit.MDLMDiT`, loaded strictly; the release's
modeling code is never run) with BD3-LM's layouts: for the NELBO the noisy sequence followed by the
clean one (positions 0..L-1 twice) under the block-diffusion mask, for sampling the finished blocks in
a key-value cache. The released models have no time input (the network gets sigma = 0, as the code
does with ``time_conditioning: false``); a release with time conditioning is refused. The mask id is C.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.errors import CheckpointError
from harness.models.mdlm_import import read_weights
from harness.models.release_ckpt import (
    build_release_family,
    ema_state,
    model_shape,
    read_release_ckpt,
    release_folder_config,
    release_tokenizer,
)
from harness.models.release_config import BD3LM_RELEASE_ALGO, config_flag, config_size
from harness.models.releases import ReleaseFormat, register_release

PREFIX = "bd3lm-hf:"
CKPT_PREFIX = "bd3lm-ckpt:"
CONFIG_KEYS = ("block_size", "vocab_size", "model_length", "hidden_dim", "cond_dim", "n_blocks", "n_heads")
#: ``algo.name`` in the Hydra config of the BD3-LM code's Lightning checkpoints of this kind
RELEASE_ALGO = BD3LM_RELEASE_ALGO
#: the weights outside ``backbone.*`` a release holds: its clipped mask-rate range
CLIP_KEYS = ("sampling_eps_min", "sampling_eps_max")


class BD3LMBackbone(nn.Module):
    """Our backbone's calls over BD3-LM's DiT: ``forward`` with the family's attention mask and
    positions (the C token logits, the mask logit dropped) and ``extend`` for block-by-block
    sampling with a key-value cache. No neighbour mixer, no time input."""

    mixer = None
    block_mixers = None
    time_embedding = None

    def __init__(self, dit: nn.Module, *, vocab_size: int):
        super().__init__()
        self.dit = dit
        self.vocab_size = vocab_size

    def _sigma(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.zeros(ids.shape[0], device=ids.device)

    def forward(
        self, ids, t=None, attention_mask=None, *, attn_mask=None, positions=None, mixer_sources=None, outputs=None
    ):
        logits = self.dit(ids, self._sigma(ids), attn_mask=attn_mask, positions=positions)
        return logits[:, :outputs, : self.vocab_size]

    def extend(self, inputs, cache, *, rows=None, store: bool = False):
        return self.dit.extend(inputs, self._sigma(inputs), cache, rows=rows, store=store)[..., : self.vocab_size]


#: (key, the value refused, why, what to do): a release the family cannot evaluate as the code does
REFUSED = (
    (
        "cross_attn",
        False,
        "a model trained without BD3-LM's two-halves layout (the code's MDLM or AR baseline)",
        "load an MDLM-layout release with mdlm-hf: / mdlm-ckpt:",
    ),
    ("adaln", False, "BD3-LM's released DiT has adaLN", "pass a BD3-LM release"),
    ("causal", True, "a causal network is not a block-diffusion model", "pass a BD3-LM release"),
    ("causal_attention", True, "a causal network is not a block-diffusion model", "pass a BD3-LM release"),
    (
        "time_conditioning",
        True,
        "the harness's bd3lm has no time input (the released models have none)",
        "evaluate a release trained with time_conditioning: false",
    ),
)


def _check_layout(flags: dict[str, Any], where: str, label: str = "") -> None:
    """Refuse a release whose ``flags`` (its config.json, or the Hydra ``algo`` block) say it is not
    what the family evaluates; absent keys take the release's defaults."""
    for key, refused, why, fix in REFUSED:
        if key in flags and config_flag(flags, key, where=where, default=not refused, label=label + key) == refused:
            raise CheckpointError(f"{where}: {label}{key} is {str(refused).lower()}: {why}", fix=fix)


def _clip(values: dict[str, Any], where: str) -> tuple[float, float]:
    """The release's clipped mask-rate range (1e-3, 1.0 when it saved none), checked."""
    found = {}
    for key, default in zip(CLIP_KEYS, (1e-3, 1.0)):
        value = values.get(key, default)
        try:
            found[key] = float(f"{float(value.item() if isinstance(value, torch.Tensor) else value):.7g}")
        except (TypeError, ValueError, RuntimeError) as err:
            raise CheckpointError(f"{where}: {key} is {value!r}, not a number", fix="pass the release's files") from err
    low, high = found["sampling_eps_min"], found["sampling_eps_max"]
    if not 0.0 < low <= high <= 1.0:
        raise CheckpointError(
            f"{where}: the clipped range [{low}, {high}] is not inside (0, 1]", fix="pass the release's files"
        )
    return low, high


def bd3lm_hf(source, *, device: str = "cpu", tokenizer: str | None = None, ema: bool = True):
    """Load ``bd3lm-hf:PATH`` -> ``(model, tokenizer, config)`` like :func:`harness.load`."""

    folder, path, config = release_folder_config(source, prefix=PREFIX, label="BD3-LM")
    missing = [k for k in CONFIG_KEYS if k not in config]
    if missing:
        raise CheckpointError(
            f"{path} is not a BD3-LM config (missing {', '.join(missing)})",
            fix="pass a BD3-LM release folder (config.json with block_size, hidden_dim, n_blocks, ...)",
        )
    where = str(path)
    shape = {k: config_size(config, k, where=where, minimum=2 if k == "vocab_size" else 1) for k in CONFIG_KEYS}
    _check_layout(config, where)
    tensors = read_weights(folder)
    state = {k.removeprefix("backbone."): v for k, v in tensors.items() if k.startswith("backbone.")}
    others = sorted(k for k in tensors if not k.startswith("backbone.") and k not in CLIP_KEYS)
    clip = _clip({k: tensors[k] for k in CLIP_KEYS if k in tensors}, str(folder))
    return build_bd3lm(
        state,
        shape=shape,
        clip=clip,
        source=f"{PREFIX}{folder}",
        where=str(folder),
        extra_keys=others,
        device=device,
        tokenizer=release_tokenizer(folder, shape["vocab_size"] - 1, tokenizer),
    )


def bd3lm_ckpt(source, *, ema: bool = True, device: str = "cpu", tokenizer: str | None = None):
    """Load ``bd3lm-ckpt:FILE`` (the BD3-LM code's Lightning checkpoint) -> ``(model, tokenizer, config)``;
    the EMA weights by default, as the code evaluates."""
    path = Path(str(source)[len(CKPT_PREFIX) :]).expanduser()
    ckpt = read_release_ckpt(path, what="BD3-LM checkpoint", ema=ema, prefix=CKPT_PREFIX)
    config = ckpt.config
    algo = config.get("algo") if isinstance(config.get("algo"), dict) else {}
    where = f"{path} (hyper_parameters)"
    _check_layout(algo, where, "algo.")
    V = int(ckpt.state["vocab_embed.embedding"].shape[0])
    shape = model_shape(config, str(path), vocab_size=V, block_size=config_size(config, "block_size", where=where))
    state = ema_state(ckpt.state, ckpt.shadow, shape, where=str(path)) if ckpt.shadow is not None else ckpt.state
    return build_bd3lm(
        state,
        shape=shape,
        clip=_clip(ckpt.extras, str(path)),
        source=f"{CKPT_PREFIX}{path}",
        where=str(path),
        extra_keys=[],
        device=device,
        ema=ema,
        tokenizer=release_tokenizer(path.parent, V - 1, tokenizer, saved=ckpt.tokenizer_json),
    )


def build_bd3lm(
    state: dict,
    *,
    shape: dict,
    clip: tuple[float, float],
    source: str,
    where: str,
    extra_keys: list,
    device: str = "cpu",
    ema: bool | None = None,
    tokenizer=None,
):
    """Our BD3-LM around the release's DiT loaded strictly from ``state`` (keys without ``backbone.``).
    A block size that does not divide the release's ``model_length`` is refused: its rows would end in
    a partial block, which the release's code never trained on, and its bound would not be the
    release's number."""
    block, length = shape["block_size"], shape["model_length"]
    if block > length or length % block:
        raise CheckpointError(
            f"{where}: block_size = {block} does not divide model_length = {length}"
            + (" (a block longer than every row)" if block > length else ""),
            fix="the config does not describe a BD3-LM release; restore its config.json (block_size, model_length)",
        )
    C = shape["vocab_size"] - 1
    return build_release_family(
        "bd3lm",
        state,
        shape=shape,
        backbone=lambda dit: BD3LMBackbone(dit, vocab_size=C),
        model_keys=dict(block_size=shape["block_size"], train_clip_min=clip[0], train_clip_max=clip[1]),
        source=source,
        where=where,
        extra_keys=extra_keys,
        ema=ema,
        time_conditioning=False,
        tokenizer_folder=Path(where),
        C=C,
        device=device,
        tokenizer=tokenizer,
    )


LOADERS = {PREFIX: bd3lm_hf, CKPT_PREFIX: bd3lm_ckpt}

register_release(
    ReleaseFormat(
        name="bd3lm-hf",
        prefix=PREFIX,
        what="a BD3-LM release in the Hugging Face layout (config.json with block_size, hidden_dim, ...), "
        "which loads with bd3lm-hf:",
        loader=bd3lm_hf,
        model_type="bd3lm",
        config_keys=CONFIG_KEYS,
    )
)
register_release(
    ReleaseFormat(
        name="bd3lm-ckpt",
        prefix=CKPT_PREFIX,
        what="a BD3-LM Lightning checkpoint (algo.name: bd3lm), which loads with bd3lm-ckpt:",
        loader=bd3lm_ckpt,
        checkpoint_file=True,
    )
)

__all__ = [
    "BD3LMBackbone",
    "RELEASE_ALGO",
    "CKPT_PREFIX",
    "CONFIG_KEYS",
    "LOADERS",
    "PREFIX",
    "bd3lm_ckpt",
    "bd3lm_hf",
    "build_bd3lm",
]
