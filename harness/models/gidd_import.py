"""Published GIDD checkpoints in the Hugging Face layout (``gidd-hf:PATH``), evaluated as our GIDD.

The layout of ``dvruette/gidd-{small,base}-p_unif-{0.0,0.1,0.2}`` (transformers' ``save_pretrained`` of
the release's ``DIT``, ``gidd/models/modeling_dit.py`` of dvruette/gidd, which the hub loads with
``trust_remote_code``; this loader runs none of it):

* ``config.json``: ``model_type: dit`` and the fields of its ``DITConfig``: ``vocab_size`` (V, the
  tokenizer's length: GPT-2's 50257 tokens, the ``[PAD]`` and the ``[MASK]`` its code appends, so
  V = 50259), ``max_seq_len``, ``hidden_size``, ``timestep_cond_dim``, ``num_hidden_layers``,
  ``num_attention_heads``, ``p_uniform`` (the noise's uniform share, 0.0 / 0.1 / 0.2) and ``t_eps``;
* ``model.safetensors``: MDLM's DiT with no prefix (``vocab_embed.embedding``, ``sigma_map.*``,
  ``blocks.N.*``, ``output_layer.*``) and the rotary tables GIDD precomputes as buffers
  (``rotary_emb.cos_cached`` / ``sin_cached``, shape (1, max_seq_len, 3, 1, head size), the value
  slot fixed at cos 1 and sin 0). The loader checks the tables are base-10000 rotary of the head
  size and drops them (ours are computed the same way);
* the tokenizer files ``save_pretrained`` wrote (GPT-2's, with ``[PAD]`` at 50257 and ``[MASK]`` at
  50258).

The network is :class:`harness.models.mdlm_dit.MDLMDiT`, loaded strictly. GIDD's DiT reads the time t
itself (not a total noise) and outputs V logits, of which GIDD sets the mask's to -1e6 before its
softmax; :class:`GiddBackbone` returns the other C = V - 1, the same distribution. The mask must be
the last id (GIDD's tokenizer appends it). The uniform noise of GIDD's process spreads over those
C ids, ``[PAD]`` included, as ours does over the family's C tokens. ``gamma`` is 1 (GIDD's pipeline
builds its process with the default).

The text tokenizer is ``gpt2-pad`` (GPT-2's with ``[PAD]`` as id 50257, C = 50258), checked token by
token against the folder's tokenizer files less their ``[MASK]``; ``--tokenizer SPEC`` names another
(it must have C ids and, when the folder holds tokenizer files, agree with them).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn

from harness.data import get_tokenizer
from harness.errors import CheckpointError
from harness.io import read_json
from harness.models.mdlm_import import read_weights
from harness.models.release_ckpt import (
    build_release_family,
    check_same_vocabulary,
    check_token_ids,
    release_folder_config,
)
from harness.models.release_config import config_size
from harness.models.releases import ReleaseFormat, register_release

PREFIX = "gidd-hf:"
MODEL_TYPE = "dit"
#: the release's ``DITConfig`` fields -> our shape keys
SIZES = {
    "vocab_size": "vocab_size",
    "max_seq_len": "model_length",
    "hidden_size": "hidden_dim",
    "timestep_cond_dim": "cond_dim",
    "num_hidden_layers": "n_blocks",
    "num_attention_heads": "n_heads",
}
#: the C of GIDD's OpenWebText models (GPT-2 and the pad its code adds) and its text tokenizer
PADDED_GPT2 = (50258, "gpt2-pad")
ROTARY = ("rotary_emb.cos_cached", "rotary_emb.sin_cached")


class GiddBackbone(nn.Module):
    """Our backbone's call (ids, t, mask) over GIDD's DiT: the time t as its input (GIDD feeds t, not
    a noise level), the C logits of the tokens (the mask's column, last, dropped)."""

    def __init__(self, dit: nn.Module):
        super().__init__()
        self.dit = dit

    def forward(self, ids: torch.Tensor, t=None, attention_mask=None) -> torch.Tensor:
        check_token_ids(ids)
        if t is None:
            raise CheckpointError("GIDD's network reads the time t, and none was given", fix="pass t (B,)")
        time = torch.as_tensor(t, device=ids.device).float().expand(ids.shape[0])
        return self.dit(ids, time)[..., :-1]


def rotary_tables(positions: int, head: int) -> tuple[torch.Tensor, torch.Tensor]:
    """GIDD's precomputed rotary buffers: (1, positions, 3, 1, head) cos and sin of base-10000
    frequencies over both halves, the value slot (index 2) the identity."""
    inv = 1.0 / 10_000 ** (torch.arange(0, head, 2).float() / head)
    angles = torch.arange(positions).float()[:, None] * inv[None]
    both = torch.cat([angles, angles], -1)[None, :, None, None, :].repeat(1, 1, 3, 1, 1)
    cos, sin = both.cos(), both.sin()
    cos[:, :, 2], sin[:, :, 2] = 1.0, 0.0
    return cos, sin


def _drop_rotary(state: dict, shape: dict, where: str) -> dict:
    """``state`` without GIDD's rotary buffers, after checking they hold base-10000 rotary tables."""
    state = dict(state)
    held = [state.pop(k, None) for k in ROTARY]
    if all(v is None for v in held):
        return state  # no tables saved: ours are computed
    head = shape["hidden_dim"] // shape["n_heads"]
    want = rotary_tables(shape["model_length"], head)
    for key, value, ref in zip(ROTARY, held, want):
        if value is None or tuple(value.shape) != tuple(ref.shape):
            got = "missing" if value is None else f"of shape {tuple(value.shape)}"
            raise CheckpointError(
                f"{where}: {key} is {got}; GIDD's DiT of this config holds {tuple(ref.shape)}",
                fix="the config and the weights come from different models; restore the release's files",
            )
        if not torch.allclose(value.float(), ref, atol=1e-4):
            raise CheckpointError(
                f"{where}: {key} is not base-10000 rotary of head size {head}; this network's positions "
                "are encoded differently from GIDD's",
                fix="pass a GIDD release whose modeling_dit.py is the published one",
            )
    return state


def folder_vocabulary(folder: Path) -> tuple[dict[str, int], str | None] | None:
    """The vocabulary (token -> id, added tokens included) of the ``tokenizer.json`` beside a release's
    weights and the mask token its ``tokenizer_config.json`` names, read as data (the folder's
    ``auto_map`` points at code this loader never runs); None without ``tokenizer.json``."""
    from tokenizers import Tokenizer as Backend  # deferred: only a folder with tokenizer files needs it

    path = folder / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        vocab = Backend.from_file(str(path)).get_vocab(with_added_tokens=True)
    except Exception as exc:  # noqa: BLE001 - the tokenizers library raises a bare Exception for bad JSON
        raise CheckpointError(
            f"{path} is not a tokenizers file ({exc})", fix="restore the release's tokenizer.json, or remove it"
        ) from None
    settings = folder / "tokenizer_config.json"
    doc = read_json(settings, what="tokenizer config", fix="restore the file") if settings.is_file() else {}
    mask = doc.get("mask_token") if isinstance(doc, dict) else None
    if isinstance(mask, dict):
        mask = mask.get("content")
    return vocab, mask if isinstance(mask, str) else None


def gidd_tokenizer(folder: Path, V: int, spec: str | None):
    """The text tokenizer of a GIDD release with V network ids: C = V - 1 ids, the mask last."""
    C = V - 1
    saved = folder_vocabulary(folder)
    if saved is not None:
        vocab, mask = saved
        if len(vocab) != V or mask is None or vocab.get(mask) != C:
            where = "no mask token" if mask is None else f"the mask {mask!r} at id {vocab.get(mask)}"
            raise CheckpointError(
                f"{folder}: its tokenizer files have {len(vocab)} ids and {where}; GIDD's network reads "
                f"V = {V} ids with the mask last (id {C})",
                fix="restore the release's tokenizer files, or remove them and pass --tokenizer SPEC",
            )
    if spec is not None:
        tokenizer, chosen = get_tokenizer(spec), f"--tokenizer {spec}"
    elif C == PADDED_GPT2[0]:
        tokenizer, chosen = get_tokenizer(PADDED_GPT2[1]), f"the {PADDED_GPT2[1]} tokenizer"
    else:
        raise CheckpointError(
            f"{folder}: C = {C} tokens is not GPT-2's with [PAD] (50258), the vocabulary of GIDD's releases",
            fix="name the release's tokenizer without its mask (primebench import --tokenizer SPEC)",
        )
    if tokenizer.vocab_size != C:
        raise CheckpointError(
            f"{chosen} has {tokenizer.vocab_size} ids but the model has C = {C} (V = {V} with the mask)",
            fix="pass the tokenizer the release was trained with",
        )
    if saved is not None:
        theirs = {tok: i for tok, i in saved[0].items() if i != C}
        check_same_vocabulary(tokenizer, theirs, chosen=chosen, other=f"the tokenizer files in {folder}")
    return tokenizer


def gidd_hf(source, *, ema: bool = True, device: str = "cpu", tokenizer: str | None = None):
    """Load ``gidd-hf:PATH`` -> ``(model, tokenizer, config)`` like :func:`harness.load`."""
    folder, path, config = release_folder_config(source, prefix=PREFIX, label="GIDD")
    if not isinstance(config, dict) or any(k not in config for k in (*SIZES, "p_uniform")):
        raise CheckpointError(
            f"{path} is not GIDD's DITConfig (it needs {', '.join(SIZES)} and p_uniform)",
            fix="pass the folder of a GIDD release (dvruette/gidd-*)",
        )
    where = str(path)
    shape = {
        ours: config_size(config, theirs, where=where, minimum=2 if ours == "vocab_size" else 1)
        for theirs, ours in SIZES.items()
    }
    p_uniform = config.get("p_uniform")
    if isinstance(p_uniform, bool) or not isinstance(p_uniform, (int, float)) or not 0 <= p_uniform < 1:
        raise CheckpointError(
            f"{path}: p_uniform is {p_uniform!r}; GIDD's uniform share is a number in [0, 1)",
            fix="restore the release's config.json",
        )
    state = _drop_rotary(read_weights(folder), shape, where=str(folder))
    return build_gidd(
        state,
        shape=shape,
        p_uniform=float(p_uniform),
        source=f"{PREFIX}{folder}",
        where=str(folder),
        extra_keys=[],
        tokenizer_folder=folder,
        device=device,
        tokenizer=gidd_tokenizer(folder, shape["vocab_size"], tokenizer),
    )


def build_gidd(
    state: dict,
    *,
    shape: dict,
    p_uniform: float,
    gamma: float = 1.0,
    source: str,
    where: str,
    extra_keys: list,
    **finish,
):
    """Our ``gidd`` around the release's DiT loaded strictly from ``state`` (unprefixed keys, no rotary
    buffers), V = ``shape["vocab_size"]`` ids in and out; ``finish``: tokenizer, tokenizer_folder,
    device. Also what a folder written by ``primebench import`` loads through."""
    if not math.isfinite(gamma):
        raise CheckpointError(f"{where}: gamma is {gamma}", fix="restore the folder's config.json")
    finish.pop("time_conditioning", None)
    return build_release_family(
        "gidd",
        state,
        shape=dict(shape, vocab_out=shape["vocab_size"]),
        backbone=GiddBackbone,
        model_keys=dict(time_conditioning=True, p_uniform=p_uniform, gamma=gamma),
        source=source,
        where=where,
        extra_keys=extra_keys,
        ema=None,
        time_conditioning=True,
        C=shape["vocab_size"] - 1,
        **finish,
    )


register_release(
    ReleaseFormat(
        name="gidd-hf",
        prefix=PREFIX,
        what="a GIDD release in the Hugging Face layout (config.json with model_type dit and p_uniform), "
        "which loads with gidd-hf:",
        loader=gidd_hf,
        model_type=MODEL_TYPE,
    )
)

__all__ = ["PREFIX", "GiddBackbone", "build_gidd", "folder_vocabulary", "gidd_hf", "gidd_tokenizer", "rotary_tables"]
