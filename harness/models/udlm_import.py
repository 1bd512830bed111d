"""Published UDLM checkpoints in the Hugging Face layout (``udlm-hf:PATH``), evaluated as our UDLM.

The layout of ``kuleshov-group/udlm-lm1b`` (written by transformers' ``save_pretrained`` from the
release's ``UDLM`` model, ``models/hf`` of kuleshov-group/discrete-diffusion-guidance):
``config.json`` with ``model_type: udlm``, ``vocab_size`` = C (no mask token: the uniform process
has none), ``model_length``, ``hidden_dim``, ``cond_dim``, ``n_blocks``, ``n_heads``,
``time_conditioning`` (true) and the classifier-free-guidance fields ``cfg`` / ``cfg_num_classes``,
and ``model.safetensors`` with MDLM's DiT under ``backbone.*``. The network is
:class:`harness.models.mdlm_dit.MDLMDiT`, loaded strictly, whose C logits are UDLM's x_theta; the
time input is sigma = -log alpha_t of the log-linear schedule, as the release's code feeds it. A
checkpoint trained for guidance (``cfg: true``, with a label embedding) is refused: the harness
evaluates unconditional models.

LM1B's release uses ``bert-base-uncased`` (C = 30522) and ships no tokenizer files: pass
``--tokenizer hf:FOLDER`` (a local copy of that tokenizer) or put its ``tokenizer.json`` beside the
weights. :func:`load_uniform_hf` serves DUO's layout too (:mod:`harness.models.duo_import`).
"""

from __future__ import annotations

import torch
from torch import nn

from harness.errors import CheckpointError
from harness.models.mdlm_import import read_weights
from harness.models.release_ckpt import (
    build_release_family,
    check_token_ids,
    release_folder_config,
    release_sigma,
    release_tokenizer,
)
from harness.models.release_config import config_flag, config_size
from harness.models.releases import ReleaseFormat, register_release

PREFIX = "udlm-hf:"
CONFIG_KEYS = ("vocab_size", "model_length", "hidden_dim", "cond_dim", "n_blocks", "n_heads")


class UniformBackbone(nn.Module):
    """Our backbone's call (ids, t, mask) over the release's DiT: all C logits, sigma(t) as time input."""

    def __init__(self, dit: nn.Module, *, time_conditioning: bool):
        super().__init__()
        self.dit = dit
        self.time_conditioning = time_conditioning

    def forward(self, ids: torch.Tensor, t=None, attention_mask=None) -> torch.Tensor:
        check_token_ids(ids)
        return self.dit(ids, release_sigma(t, ids.shape[0], ids.device, self.time_conditioning))


def load_uniform_hf(
    source,
    *,
    prefix: str,
    family: str,
    label: str,
    time_conditioning: bool | None,
    refuse: dict[str, str],
    device: str = "cpu",
    tokenizer: str | None = None,
):
    """A uniform-state release folder (``prefix`` + PATH) as our ``family``: MDLM's DiT with C = ``vocab_size``.

    ``time_conditioning``: None reads ``config.json``'s flag (default true); a bool is the layout's
    fixed setting. ``refuse``: config flags that must be false, each with the reason."""

    folder, path, config = release_folder_config(source, prefix=prefix, label=label)
    missing = [k for k in CONFIG_KEYS if k not in config]
    if missing:
        raise CheckpointError(
            f"{path} is not a {label} config (missing {', '.join(missing)})",
            fix=f"pass a {label} release folder (config.json with hidden_dim, n_blocks, ...)",
        )
    where = str(path)
    shape = {k: config_size(config, k, where=where, minimum=2 if k == "vocab_size" else 1) for k in CONFIG_KEYS}
    for flag, why in refuse.items():
        if config_flag(config, flag, where=where, default=False):
            raise CheckpointError(f"{path}: {flag} is true ({why})", fix=f"pass an unconditional {label} release")
    if time_conditioning is None:
        time_conditioning = config_flag(config, "time_conditioning", where=where, default=True)
    if not time_conditioning:
        raise CheckpointError(
            f"{path}: time_conditioning is false, but a uniform-state model needs the time input",
            fix=f"pass a {label} release trained with time conditioning",
        )
    tensors = read_weights(folder)
    state = {k.removeprefix("backbone."): v for k, v in tensors.items() if k.startswith("backbone.")}
    others = sorted(k for k in tensors if not k.startswith("backbone."))
    return build_uniform(
        family,
        state,
        shape=shape,
        source=f"{prefix}{folder}",
        where=str(folder),
        extra_keys=others,
        tokenizer_folder=folder,
        device=device,
        tokenizer=release_tokenizer(folder, shape["vocab_size"], tokenizer),
    )


def build_uniform(family: str, state: dict, *, shape: dict, source: str, where: str, extra_keys: list, **finish):
    """Our uniform-state ``family`` around the release's DiT loaded strictly from ``state`` (keys
    without ``backbone.``), C = ``shape["vocab_size"]``; ``finish``: tokenizer, tokenizer_folder, device."""
    return build_release_family(
        family,
        state,
        shape=shape,
        backbone=lambda dit: UniformBackbone(dit, time_conditioning=True),
        model_keys=dict(time_conditioning=True),
        source=source,
        where=where,
        extra_keys=extra_keys,
        ema=None,
        time_conditioning=True,
        C=shape["vocab_size"],
        **finish,
    )


def udlm_hf(source, *, ema: bool = True, device: str = "cpu", tokenizer: str | None = None):
    """Load ``udlm-hf:PATH`` -> ``(model, tokenizer, config)`` like :func:`harness.load`."""
    return load_uniform_hf(
        source,
        prefix=PREFIX,
        family="udlm",
        label="UDLM",
        time_conditioning=None,
        refuse={"cfg": "trained with a class label for classifier-free guidance"},
        device=device,
        tokenizer=tokenizer,
    )


register_release(
    ReleaseFormat(
        name="udlm-hf",
        prefix=PREFIX,
        what="a UDLM release in the Hugging Face layout (config.json with model_type udlm), which loads with udlm-hf:",
        loader=udlm_hf,
        model_type="udlm",
    )
)

__all__ = ["CONFIG_KEYS", "PREFIX", "UniformBackbone", "build_uniform", "load_uniform_hf", "udlm_hf"]
