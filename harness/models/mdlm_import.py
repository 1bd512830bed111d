"""Published MDLM checkpoints in the Hugging Face layout (``mdlm-hf:PATH``), evaluated as our MDLM.

The folder holds ``config.json`` (``vocab_size`` V = C + 1, ``model_length``, ``hidden_dim``,
``cond_dim``, ``n_blocks``, ``n_heads``, ``time_conditioning``) and ``model.safetensors`` with the
weights under ``backbone.*`` (as ``kuleshov-group/mdlm-owt``). Its modeling code is never run: the
network is :class:`harness.models.mdlm_dit.MDLMDiT`, loaded strictly (a missing or unexpected key
is an error), inside our MDLM family, so every evaluation (NELBO, samplers, lm-eval, audits) runs
on it unchanged. The mask id is C; SUBS drops the mask logit (what MDLM's -inf on it does) and
carries unmasked tokens over. With time conditioning the network gets MDLM's log-linear total
noise sigma(t) = -log(1 - (1 - 1e-3) t).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.errors import CheckpointError

PREFIX = "mdlm-hf:"
CONFIG_KEYS = ("vocab_size", "model_length", "hidden_dim", "cond_dim", "n_blocks", "n_heads")
LOGLINEAR_EPS = 1e-3


def is_mdlm_hf_source(source) -> bool:
    return str(source).startswith(PREFIX)


class MDLMBackbone(nn.Module):
    """Our backbone's call (ids, t, mask) over MDLM's DiT: the C token logits (mask logit dropped)."""

    def __init__(self, dit: nn.Module, *, vocab_size: int, time_conditioning: bool):
        super().__init__()
        self.dit = dit
        self.vocab_size = vocab_size
        self.time_conditioning = time_conditioning

    def forward(self, ids: torch.Tensor, t=None, attention_mask=None) -> torch.Tensor:
        if self.time_conditioning and t is not None:
            sigma = -torch.log1p(-(1 - LOGLINEAR_EPS) * t.float())
        else:
            sigma = torch.zeros(ids.shape[0], device=ids.device)
        return self.dit(ids, sigma)[..., : self.vocab_size]


def read_mdlm_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{str(folder)!r} has no config.json", fix="pass the folder of an MDLM release in the HF layout")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path} is not valid JSON ({exc})", fix="restore the file") from exc
    missing = [k for k in CONFIG_KEYS if k not in config]
    if missing:
        raise CheckpointError(f"{path} is not an MDLM config (missing {', '.join(missing)})",
                              fix="pass an MDLM release folder (config.json with hidden_dim, cond_dim, n_blocks, ...)")
    return config


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    from harness.safe_load import check_pickles_in_folder, load_torch_file

    files = sorted(folder.glob("*.safetensors"))
    if files:
        tensors: dict[str, torch.Tensor] = {}
        for file in files:
            tensors.update(load_file(str(file)))
        return tensors
    pickles = check_pickles_in_folder(folder, what="MDLM weights")
    if not pickles:
        raise CheckpointError(f"{str(folder)!r} holds no weights (model.safetensors)", fix="download the release's weights")
    tensors = {}
    for file in pickles:
        tensors.update(load_torch_file(file, what="MDLM weights", fix="re-download it"))
    return tensors


def mdlm_hf(source, *, device: str = "cpu"):
    """Load ``mdlm-hf:PATH`` -> ``(model, tokenizer, config)`` like :func:`harness.load`."""
    from baselines.mdlm import MDLM
    from harness.config import Config, DataConfig
    from harness.models.masked_diffusion import MDLMConfig
    from harness.models.mdlm_dit import MDLMDiT

    folder = Path(str(source)[len(PREFIX):]).expanduser()
    if not folder.is_dir():
        raise CheckpointError(f"{PREFIX}{folder}: not a folder", fix="pass the folder of an MDLM release in the HF layout")
    config = read_mdlm_config(folder)
    V, L = int(config["vocab_size"]), int(config["model_length"])
    tc = bool(config.get("time_conditioning", False))
    dit = MDLMDiT(vocab_size=V, hidden_dim=int(config["hidden_dim"]), cond_dim=int(config["cond_dim"]),
                  n_blocks=int(config["n_blocks"]), n_heads=int(config["n_heads"]))
    tensors = read_weights(folder)
    state = {k.removeprefix("backbone."): v for k, v in tensors.items() if k.startswith("backbone.")}
    state.pop("rotary_emb.inv_freq", None)  # a buffer the original saves; ours is computed the same way
    others = sorted(k for k in tensors if not k.startswith("backbone."))
    expected = dit.state_dict()
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected)) + others
    if missing or unexpected:
        raise CheckpointError(f"weights in {str(folder)!r} are not MDLM's DiT layout (missing {missing[:3]}, "
                              f"unexpected {unexpected[:3]})", fix="pass an MDLM release in the HF layout (keys backbone.*)")
    for key, value in state.items():
        if value.shape != expected[key].shape:
            raise CheckpointError(f"weight {key!r} has shape {tuple(value.shape)}; config.json builds {tuple(expected[key].shape)}",
                                  fix="config.json and the weights come from different models")
    dit.load_state_dict({k: v.float() for k, v in state.items()})
    C = V - 1
    tokenizer = _tokenizer(folder, C)
    cfg = Config(model=MDLMConfig(family="mdlm", d_model=int(config["hidden_dim"]), n_layers=int(config["n_blocks"]),
                                  n_heads=int(config["n_heads"]), time_conditioning=tc, cond_dim=int(config["cond_dim"])),
                 data=DataConfig(tokenizer=tokenizer.spec, seq_len=L), name=folder.name)
    model = MDLM(vocab_size=C, seq_len=L, d_model=8, n_layers=1, n_heads=2, time_conditioning=tc,
                 extra_hparams={"source": f"{PREFIX}{folder}", "network": "MDLM DiT"})
    model.hparams.update(d_model=int(config["hidden_dim"]), n_layers=int(config["n_blocks"]), n_heads=int(config["n_heads"]))
    model.backbone = MDLMBackbone(dit, vocab_size=C, time_conditioning=tc)  # replaces the placeholder network
    return model.to(device).eval(), tokenizer, cfg


def _tokenizer(folder: Path, C: int):
    from harness.data import get_tokenizer
    from harness.data.tokenizers.hf import load_transformers

    if (folder / "tokenizer.json").is_file() or (folder / "tokenizer_config.json").is_file():
        tokenizer = load_transformers(folder.resolve(), spec=f"hf:{folder.resolve()}")
    elif C == 50257:
        tokenizer = get_tokenizer("gpt2")  # MDLM's OpenWebText models use GPT-2's tokenizer
    else:
        raise CheckpointError(f"{str(folder)!r} has no tokenizer files and C = {C} is not GPT-2's vocabulary",
                              fix="save the release's tokenizer into the folder (tokenizer.json)")
    if tokenizer.vocab_size != C:
        raise CheckpointError(f"the tokenizer has {tokenizer.vocab_size} ids but the model has C = {C} (V = C + 1 with the mask)",
                              fix="pass the tokenizer the release was trained with")
    return tokenizer


__all__ = ["mdlm_hf", "is_mdlm_hf_source", "MDLMBackbone", "read_mdlm_config"]
