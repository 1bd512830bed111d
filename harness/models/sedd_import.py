"""Published SEDD checkpoints in the Hugging Face layout (``sedd-hf:PATH``), evaluated as our SEDD.

The layout of ``louaaron/sedd-small`` and ``louaaron/sedd-medium`` (huggingface_hub's
``PyTorchModelHubMixin`` of the release's ``SEDD`` model, ``model/transformer.py`` of
louaaron/Score-Entropy-Discrete-Diffusion): ``config.json`` is the whole Hydra config the model was
built from, of which the loader reads ``tokens`` (C), ``graph.type`` (``absorb`` -> ``sedd``,
``uniform`` -> ``sedd-uniform``), ``noise.type`` and ``model.hidden_size`` / ``cond_dim`` /
``length`` / ``n_blocks`` / ``n_heads`` / ``scale_by_sigma``; the weights (``pytorch_model.bin``
or ``model.safetensors``) carry no prefix, with the rotary buffer ``rotary_emb.inv_freq`` beside
the network's parameters.

The network is :class:`harness.models.mdlm_dit.MDLMDiT` (the same DiT: MDLM's was written from
SEDD's), loaded strictly, with V = C + 1 inputs and outputs on the absorbing graph (the mask state
is C) and C on the uniform one; the time input is SEDD's total noise sigma = -log(1 - (1 - 1e-3) t)
of its log-linear schedule, which is our ``loglinear`` schedule. The shift by sigma and the 1 at the
current state are :meth:`baselines.sedd.SEDD.log_scores`, as in SEDD's ``forward``. A checkpoint
with SEDD's geometric noise is refused: its alpha at t = 0 is not 1, so the DWDSE there needs a
reconstruction term this harness does not compute. SEDD's releases use GPT-2's tokenizer
(C = 50257), taken when no tokenizer files lie beside the weights.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from harness.errors import CheckpointError
from harness.models import family_class
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

PREFIX = "sedd-hf:"
#: the release's ``graph.type`` -> our family
GRAPHS = {"absorb": "sedd", "uniform": "sedd-uniform"}
#: the release's ``model.*`` sizes -> ours
SIZES = {
    "model_length": "length",
    "hidden_dim": "hidden_size",
    "cond_dim": "cond_dim",
    "n_blocks": "n_blocks",
    "n_heads": "n_heads",
}


class ScoreBackbone(nn.Module):
    """Our backbone's call (ids, t, mask) over the release's DiT: all V raw outputs (before SEDD's
    shift by sigma, which the family applies), SEDD's total noise sigma(t) as the time input."""

    def __init__(self, dit: nn.Module):
        super().__init__()
        self.dit = dit

    def forward(self, ids: torch.Tensor, t=None, attention_mask=None) -> torch.Tensor:
        check_token_ids(ids)
        return self.dit(ids, release_sigma(t, ids.shape[0], ids.device, True))


def _section(config: dict, key: str, path: Path) -> dict:
    value = config.get(key)
    if not isinstance(value, dict):
        raise CheckpointError(
            f"{path}: {key!r} is missing or not a mapping; this is not SEDD's config",
            fix="pass the folder of a SEDD release (config.json with tokens, graph, noise and model)",
        )
    return value


def sedd_hf(source, *, ema: bool = True, device: str = "cpu", tokenizer: str | None = None):
    """Load ``sedd-hf:PATH`` -> ``(model, tokenizer, config)`` like :func:`harness.load`."""
    folder, path, config = release_folder_config(source, prefix=PREFIX, label="SEDD")
    if not isinstance(config, dict):
        raise CheckpointError(f"{path} is not a JSON object", fix="restore the release's config.json")
    where = str(path)
    graph, noise, model_cfg = (_section(config, k, path) for k in ("graph", "noise", "model"))
    kind = graph.get("type")
    if kind not in GRAPHS:
        raise CheckpointError(
            f"{path}: graph.type is {kind!r}; the harness knows SEDD's {' and '.join(map(repr, GRAPHS))}",
            fix="pass a SEDD release with the absorbing or uniform graph",
        )
    if noise.get("type") != "loglinear":
        raise CheckpointError(
            f"{path}: noise.type is {noise.get('type')!r}; only SEDD's log-linear noise is supported (the "
            "geometric one leaves noise at t = 0, so its bound needs a reconstruction term not computed here)",
            fix="pass a SEDD release trained with noise.type: loglinear",
        )
    C = config_size(config, "tokens", where=where, minimum=2)
    shape = {
        ours: config_size(model_cfg, theirs, where=where, label=f"model.{theirs}") for ours, theirs in SIZES.items()
    }
    absorbing = kind == "absorb"
    shape.update(vocab_size=C + 1 if absorbing else C, vocab_out=C + 1 if absorbing else C)
    scale = config_flag(model_cfg, "scale_by_sigma", where=where, default=False, label="model.scale_by_sigma")
    if scale and not absorbing:
        raise CheckpointError(
            f"{path}: model.scale_by_sigma is true on the uniform graph (SEDD's own model refuses it)",
            fix="restore the release's config.json",
        )
    tensors = read_weights(folder)
    return build_sedd(
        GRAPHS[kind],
        tensors,
        shape=shape,
        scale_by_sigma=scale,
        source=f"{PREFIX}{folder}",
        where=str(folder),
        extra_keys=[],
        tokenizer_folder=folder,
        device=device,
        tokenizer=release_tokenizer(folder, C, tokenizer),
    )


def build_sedd(
    family: str, state: dict, *, shape: dict, scale_by_sigma: bool, source: str, where: str, extra_keys: list, **finish
):
    """Our ``family`` (``sedd`` / ``sedd-uniform``) around the release's DiT loaded strictly from
    ``state``; ``shape["vocab_size"]`` counts the network's input rows (C + 1 with the mask state);
    ``finish``: tokenizer, tokenizer_folder, device. Also what an imported folder loads through."""
    absorbing = family_class(family).forward_process == "absorbing"
    C = shape["vocab_size"] - 1 if absorbing else shape["vocab_size"]
    shape = dict(shape, vocab_out=shape.get("vocab_out", shape["vocab_size"]))
    if shape["vocab_out"] != shape["vocab_size"]:
        raise CheckpointError(
            f"{where}: {shape['vocab_out']} outputs for {shape['vocab_size']} input states; SEDD scores every state",
            fix="the config does not describe this network; restore the release's config.json",
        )
    finish.pop("time_conditioning", None)
    return build_release_family(
        family,
        state,
        shape=shape,
        backbone=ScoreBackbone,
        model_keys=dict(time_conditioning=True, scale_by_sigma=bool(scale_by_sigma), schedule="loglinear"),
        source=source,
        where=where,
        extra_keys=extra_keys,
        ema=None,
        time_conditioning=True,
        C=C,
        **finish,
    )


register_release(
    ReleaseFormat(
        name="sedd-hf",
        prefix=PREFIX,
        what="a SEDD release in the Hugging Face layout (config.json with tokens, graph, noise and model), "
        "which loads with sedd-hf:",
        loader=sedd_hf,
        config_keys=("tokens", "graph", "noise", "model"),
    )
)

__all__ = ["GRAPHS", "PREFIX", "ScoreBackbone", "build_sedd", "sedd_hf"]
