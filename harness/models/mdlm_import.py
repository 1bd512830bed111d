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

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn

from harness.config import Config, DataConfig
from harness.errors import CheckpointError
from harness.io import read_json
from harness.models import family_class
from harness.models.hf_causal import hf_arm_class
from harness.models.masked_diffusion import MDLMConfig
from harness.models.release_ckpt import (
    build_release_family,
    ema_state,
    finish_import,
    import_provenance,
    load_dit,
    model_shape,
    read_release_ckpt,
    release_sigma,
    release_tokenizer,
)
from harness.models.release_config import config_flag, config_size
from harness.models.releases import ReleaseFormat, register_release
from harness.safe_load import check_pickles_in_folder, load_torch_file

PREFIX = "mdlm-hf:"
CKPT_PREFIX = "mdlm-ckpt:"
PRIME_PREFIX = "prime-ckpt:"
AR_PREFIX = "ar-ckpt:"
CONFIG_KEYS = ("vocab_size", "model_length", "hidden_dim", "cond_dim", "n_blocks", "n_heads")


class MDLMBackbone(nn.Module):
    """Our backbone's call (ids, t, mask) over MDLM's DiT: the C token logits (mask logit dropped)."""

    def __init__(self, dit: nn.Module, *, vocab_size: int, time_conditioning: bool):
        super().__init__()
        self.dit = dit
        self.vocab_size = vocab_size
        self.time_conditioning = time_conditioning

    def forward(self, ids: torch.Tensor, t=None, attention_mask=None) -> torch.Tensor:
        return self.dit(ids, release_sigma(t, ids.shape[0], ids.device, self.time_conditioning))[..., : self.vocab_size]


def read_mdlm_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.is_file():
        raise CheckpointError(
            f"{str(folder)!r} has no config.json", fix="pass the folder of an MDLM release in the HF layout"
        )

    config = read_json(path, what="MDLM config", fix="restore the file", error=CheckpointError)
    missing = [k for k in CONFIG_KEYS if k not in config]
    if missing:
        raise CheckpointError(
            f"{path} is not an MDLM config (missing {', '.join(missing)})",
            fix="pass an MDLM release folder (config.json with hidden_dim, cond_dim, n_blocks, ...)",
        )
    return config


def read_weights(folder: Path) -> dict[str, torch.Tensor]:

    files = sorted(folder.glob("*.safetensors"))
    if files:
        tensors: dict[str, torch.Tensor] = {}
        for file in files:
            tensors.update(load_file(str(file)))
        return tensors
    pickles = check_pickles_in_folder(folder, what="MDLM weights")
    if not pickles:
        raise CheckpointError(
            f"{str(folder)!r} holds no weights (model.safetensors)", fix="download the release's weights"
        )
    tensors = {}
    for file in pickles:
        tensors.update(load_torch_file(file, what="MDLM weights", fix="re-download it"))
    return tensors


def mdlm_hf(source, *, device: str = "cpu", tokenizer: str | None = None, ema: bool = True):
    """Load ``mdlm-hf:PATH`` -> ``(model, tokenizer, config)`` like :func:`harness.load`."""
    folder = Path(str(source)[len(PREFIX) :]).expanduser()
    if not folder.is_dir():
        raise CheckpointError(
            f"{PREFIX}{folder}: not a folder", fix="pass the folder of an MDLM release in the HF layout"
        )
    config = read_mdlm_config(folder)
    where = str(folder / "config.json")
    shape = {k: config_size(config, k, where=where, minimum=2 if k == "vocab_size" else 1) for k in CONFIG_KEYS}
    time_conditioning = config_flag(config, "time_conditioning", where=where, default=False)
    tensors = read_weights(folder)
    state = {k.removeprefix("backbone."): v for k, v in tensors.items() if k.startswith("backbone.")}
    others = sorted(k for k in tensors if not k.startswith("backbone."))
    return build_mdlm(
        state,
        shape=shape,
        time_conditioning=time_conditioning,
        tokenizer_folder=folder,
        source=f"{PREFIX}{folder}",
        where=str(folder),
        extra_keys=others,
        device=device,
        tokenizer=release_tokenizer(folder, shape["vocab_size"] - 1, tokenizer),
    )


def mdlm_ckpt(source, *, ema: bool = True, device: str = "cpu", tokenizer: str | None = None):
    """Load ``mdlm-ckpt:FILE`` (MDLM's Lightning checkpoint) -> ``(model, tokenizer, config)``.

    Weights under ``state_dict`` as ``backbone.*``; EMA weights (used by default, as MDLM evaluates)
    under ``ema.shadow_params``, in the order of the network's parameters. The Hydra config under
    ``hyper_parameters`` is read as plain data (:func:`harness.safe_load.load_lightning_checkpoint`)."""
    path = Path(str(source)[len(CKPT_PREFIX) :]).expanduser()
    ckpt = read_release_ckpt(path, what="MDLM checkpoint", ema=ema, prefix=CKPT_PREFIX)
    shape = model_shape(ckpt.config, str(path), vocab_size=int(ckpt.state["vocab_embed.embedding"].shape[0]))
    state = ema_state(ckpt.state, ckpt.shadow, shape, where=str(path)) if ckpt.shadow is not None else ckpt.state
    return build_mdlm(
        state,
        shape=shape,
        time_conditioning=config_flag(ckpt.config, "time_conditioning", where=str(path), default=False),
        tokenizer_folder=path.parent,
        source=f"{CKPT_PREFIX}{path}",
        where=str(path),
        extra_keys=[],
        device=device,
        ema=ema,
        tokenizer=release_tokenizer(path.parent, shape["vocab_size"] - 1, tokenizer, saved=ckpt.tokenizer_json),
    )


def build_mdlm(
    state: dict,
    *,
    shape: dict,
    time_conditioning: bool,
    tokenizer_folder: Path,
    source: str,
    where: str,
    extra_keys: list,
    device: str = "cpu",
    ema: bool | None = None,
    tokenizer=None,
):
    """Our MDLM around MDLM's DiT loaded strictly from ``state`` (keys without ``backbone.``)."""

    MDLM = family_class("mdlm")

    dit = load_dit(state, shape, where=where, extra_keys=extra_keys)
    C = shape["vocab_size"] - 1
    model = MDLM(
        vocab_size=C,
        seq_len=shape["model_length"],
        d_model=8,
        n_layers=1,
        n_heads=2,
        time_conditioning=time_conditioning,
        extra_hparams=import_provenance(source, ema),
    )
    return finish_import(
        model,
        MDLMBackbone(dit, vocab_size=C, time_conditioning=time_conditioning),
        MDLMConfig,
        shape=shape,
        time_conditioning=time_conditioning,
        tokenizer_folder=tokenizer_folder,
        C=C,
        where=where,
        device=device,
        tokenizer=tokenizer,
    )


class PrimeBackbone(nn.Module):
    """Our backbone's call over MDM-Prime's DiT: (B, L, ell) sub-tokens -> (B, L, C) logits."""

    def __init__(self, dit: nn.Module, *, time_conditioning: bool):
        super().__init__()
        self.dit = dit
        self.time_conditioning = time_conditioning

    def forward(self, z: torch.Tensor, t=None, attention_mask=None) -> torch.Tensor:
        return self.dit(z, release_sigma(t, z.shape[0], z.device, self.time_conditioning))


def prime_ckpt(source, *, ema: bool = True, device: str = "cpu", tokenizer: str | None = None):
    """Load ``prime-ckpt:FILE`` (an MDM-Prime release checkpoint, ell > 1) -> ``(model, tokenizer, config)``.

    ``config.prime`` gives ell (``target_length``), the base and carry-over; the network is MDM-Prime's
    DiT (sub-token embeddings concatenated per token, C output logits), inside our Prime family whose
    restricted joint (with carry-over) or plain softmax (without) turns the logits into p(x_0 | y_t).
    Checkpoints of the same release with ell = 1 are MDLM's layout: load them with ``mdlm-ckpt:``.
    The Prime family (found by name in the model registry) gives the base of ell digits."""

    path = Path(str(source)[len(PRIME_PREFIX) :]).expanduser()
    ckpt = read_release_ckpt(path, what="MDM-Prime checkpoint", ema=ema, prefix=PRIME_PREFIX)
    state, config = ckpt.state, ckpt.config
    prime_cfg = config.get("prime", {}) if isinstance(config.get("prime"), dict) else {}
    ell = int(prime_cfg.get("target_length", 1))
    if ell < 2:
        raise CheckpointError(
            f"{str(path)!r} has prime.target_length = {ell}: an MDLM-layout checkpoint",
            fix=f"load it with mdlm-ckpt:{path}",
        )
    if "output_layer.linear.weight" not in state:
        raise CheckpointError(
            f"{str(path)!r} lacks backbone.output_layer.linear.weight", fix="pass the release's .ckpt"
        )
    C = int(state["output_layer.linear.weight"].shape[0])
    base = family_class("prime").base_for(C, ell)
    if "base" in prime_cfg and int(prime_cfg["base"]) != base:
        raise CheckpointError(
            f"{str(path)!r}: prime.base = {prime_cfg['base']} but C = {C}, ell = {ell} give base {base}",
            fix="this harness uses the smallest base with base**ell >= C, as the release does",
        )
    shape = model_shape(config, str(path), vocab_size=base + 1, vocab_out=C, ell=ell)
    if ckpt.shadow is not None:
        state = ema_state(state, ckpt.shadow, shape, where=str(path))
    return build_prime(
        state,
        shape=shape,
        time_conditioning=config_flag(config, "time_conditioning", where=str(path), default=False),
        carry_over=config_flag(prime_cfg, "carry_over", where=str(path), default=True, label="prime.carry_over"),
        tokenizer_folder=path.parent,
        source=f"{PRIME_PREFIX}{path}",
        where=str(path),
        device=device,
        ema=ema,
        tokenizer=release_tokenizer(path.parent, C, tokenizer, saved=ckpt.tokenizer_json),
    )


def build_prime(
    state: dict,
    *,
    shape: dict,
    time_conditioning: bool,
    carry_over: bool,
    tokenizer_folder: Path,
    source: str,
    where: str,
    device: str = "cpu",
    ema: bool | None = None,
    tokenizer=None,
):
    """Our Prime around MDM-Prime's DiT loaded strictly from ``state`` (keys without ``backbone.``)."""
    ell = shape["ell"]
    return build_release_family(
        "prime",
        state,
        shape=shape,
        backbone=lambda dit: PrimeBackbone(dit, time_conditioning=time_conditioning),
        model_keys=dict(ell=ell, carry_over=carry_over, time_conditioning=time_conditioning),
        d_model=8 * ell,
        source=source,
        where=where,
        extra_keys=[],
        ema=ema,
        time_conditioning=time_conditioning,
        tokenizer_folder=tokenizer_folder,
        C=shape["vocab_out"],
        device=device,
        tokenizer=tokenizer,
    )


class ARBackbone(nn.Module):
    """Our backbone's call over the release's causal DiT: (B, P) ids -> (B, P, C) next-token logits.

    The release sets the mask logit to -1000 before its log-softmax over C + 1 classes; dropping
    that logit gives the same C probabilities (exp(-1000) is zero in float32)."""

    def __init__(self, dit: nn.Module, *, vocab_size: int):
        super().__init__()
        self.dit = dit
        self.vocab_size = vocab_size

    def forward(self, ids: torch.Tensor, t=None, attention_mask=None) -> torch.Tensor:
        return self.dit(ids)[..., : self.vocab_size]


def ar_ckpt(source, *, ema: bool = True, device: str = "cpu", tokenizer: str | None = None):
    """Load ``ar-ckpt:FILE`` (the autoregressive baseline of the MDLM / MDM-Prime releases, a
    Lightning checkpoint with ``backbone: ar``) as our ARM family -> ``(model, tokenizer, config)``.

    Rows are ``model.length`` tokens; as in the release, the network reads the first L - 1 and
    scores the L - 1 shifted targets."""
    path = Path(str(source)[len(AR_PREFIX) :]).expanduser()
    ckpt = read_release_ckpt(path, what="AR checkpoint", ema=ema, prefix=AR_PREFIX)
    state, config = ckpt.state, ckpt.config
    prime_cfg = config.get("prime", {}) if isinstance(config.get("prime"), dict) else {}
    if int(prime_cfg.get("target_length", 1)) != 1:
        raise CheckpointError(
            f"{str(path)!r} is an AR over sub-tokens (prime.target_length = {prime_cfg['target_length']})",
            fix="only the token-level AR baseline (target_length 1) is supported",
        )
    if any(k.startswith(("sigma_map.", "blocks.0.adaLN")) for k in state):
        raise CheckpointError(
            f"{str(path)!r} has adaLN / sigma_map weights: a diffusion checkpoint, not the AR baseline",
            fix=f"load it with {CKPT_PREFIX}{path} (or {PRIME_PREFIX} for ell > 1)",
        )
    V = int(state["vocab_embed.embedding"].shape[0])
    shape = model_shape(config, str(path), vocab_size=V, causal=True)
    if ckpt.shadow is not None:
        state = ema_state(state, ckpt.shadow, shape, where=str(path))
    dit = load_dit(state, shape, where=str(path), extra_keys=[])
    return build_ar(
        dit,
        shape=shape,
        tokenizer=release_tokenizer(path.parent, V - 1, tokenizer, saved=ckpt.tokenizer_json),
        source=f"{AR_PREFIX}{path}",
        ema=ema,
        device=device,
        name=path.stem,
    )


def build_ar(dit: nn.Module, *, shape: dict, tokenizer, source: str, ema: bool | None, device: str, name: str):
    """Our ARM (an external-network ARM, as for ``hf:``) over the release's causal DiT."""

    C, L = shape["vocab_size"] - 1, shape["model_length"]
    model = hf_arm_class()(
        ARBackbone(dit, vocab_size=C),
        vocab_size=C,
        seq_len=L,
        source=source,
        network="the release's causal DiT (float32)",
    )
    model.hparams.update(
        import_provenance(source, ema),
        d_model=shape["hidden_dim"],
        n_layers=shape["n_blocks"],
        n_heads=shape["n_heads"],
    )
    cfg = Config(
        model=family_class("arm").config_class(
            family="arm", d_model=shape["hidden_dim"], n_layers=shape["n_blocks"], n_heads=shape["n_heads"]
        ),
        data=DataConfig(tokenizer=tokenizer.spec, seq_len=L),
        name=name,
    )
    return model.to(device).eval(), tokenizer, cfg


LOADERS = {PREFIX: mdlm_hf, CKPT_PREFIX: mdlm_ckpt, PRIME_PREFIX: prime_ckpt, AR_PREFIX: ar_ckpt}

register_release(
    ReleaseFormat(
        name="mdlm-hf",
        prefix=PREFIX,
        what="an MDLM release in the Hugging Face layout (config.json with hidden_dim, n_blocks, ...), "
        "which loads with mdlm-hf:",
        loader=mdlm_hf,
        model_type="mdlm",
        config_keys=CONFIG_KEYS,
    )
)
register_release(
    ReleaseFormat(
        name="mdlm-ckpt",
        prefix=CKPT_PREFIX,
        what="an MDLM Lightning checkpoint (or MDM-Prime's with ell = 1), which loads with mdlm-ckpt:",
        loader=mdlm_ckpt,
        checkpoint_file=True,
    )
)
register_release(
    ReleaseFormat(
        name="prime-ckpt",
        prefix=PRIME_PREFIX,
        what="an MDM-Prime checkpoint (prime.target_length = ell > 1), which loads with prime-ckpt:",
        loader=prime_ckpt,
        checkpoint_file=True,
    )
)
register_release(
    ReleaseFormat(
        name="ar-ckpt",
        prefix=AR_PREFIX,
        what="the releases' autoregressive baseline (backbone: ar, no adaLN), which loads with ar-ckpt:",
        loader=ar_ckpt,
        checkpoint_file=True,
    )
)


__all__ = [
    "mdlm_hf",
    "mdlm_ckpt",
    "prime_ckpt",
    "ar_ckpt",
    "build_ar",
    "ARBackbone",
    "LOADERS",
    "build_prime",
    "PrimeBackbone",
    "load_dit",
    "build_mdlm",
    "MDLMBackbone",
    "read_mdlm_config",
]
