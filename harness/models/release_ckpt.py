"""What the release loaders of :mod:`harness.models.mdlm_import` share: reading a release's Lightning
checkpoint without running code, its model sizes, its EMA weights, the release's DiT loaded
strictly, the tokenizer of a release, and the config that describes the loaded model as ours.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from harness.config import Config, DataConfig
from harness.data import get_tokenizer
from harness.data.tokenizers.hf import load_transformers
from harness.errors import CheckpointError
from harness.io import read_json
from harness.models import family_class
from harness.models.mdlm_dit import MDLMDiT
from harness.models.release_config import BD3LM_RELEASE_ALGO, config_size
from harness.models.releases import format_of
from harness.safe_load import load_lightning_checkpoint, plain, saved_tokenizer_json

LOGLINEAR_EPS = 1e-3

#: what a primebench checkpoint folder is (it loads as a plain path, without a prefix)
OWN_FOLDER = "a primebench checkpoint folder (config.yaml), which loads as a plain path"


def prefix_description(prefix: str) -> str:
    """What the file or folder that ``prefix`` loads is (``""``: our own checkpoint folder)."""

    return OWN_FOLDER if not prefix else format_of(prefix).what


def ckpt_prefix(state: dict[str, Any], config: dict[str, Any]) -> str:
    """The prefix of a release checkpoint, from its ``backbone.*`` keys (without ``backbone.``) and
    its Hydra config: BD3-LM's says ``algo.name: bd3lm``; the AR baseline has no adaLN / sigma_map
    (and ``backbone: ar``); a diffusion checkpoint is MDM-Prime's when ``prime.target_length`` > 1,
    else MDLM's layout."""

    algo = config.get("algo") if isinstance(config.get("algo"), dict) else {}
    if algo.get("name") == BD3LM_RELEASE_ALGO:
        return "bd3lm-ckpt:"
    if config.get("backbone") == "ar" or not any(k.startswith(("sigma_map.", "blocks.0.adaLN")) for k in state):
        return "ar-ckpt:"
    prime = config.get("prime") if isinstance(config.get("prime"), dict) else {}
    try:
        ell = int(prime.get("target_length", 1))
    except (TypeError, ValueError):
        ell = 1
    return "prime-ckpt:" if ell > 1 else "mdlm-ckpt:"


def check_ckpt_prefix(path: Path, state: dict[str, Any], config: dict[str, Any], *, used: str) -> None:
    """Refuse a release checkpoint loaded with the prefix ``used`` when it is another kind."""
    right = ckpt_prefix(state, config)
    if right != used:
        raise wrong_prefix(path, used, right)


def wrong_prefix(path: Path, used: str, right: str) -> CheckpointError:
    mismatch = f"{used} does not load it" if used else "without a prefix it does not load"
    return CheckpointError(
        f"{str(path)!r} is {prefix_description(right)}; {mismatch}",
        fix=f"load it as {right}{path}" if right else f"pass the folder without a prefix: {path}",
    )


def release_folder_config(source, *, prefix: str, label: str) -> tuple[Path, Path, Any]:
    """``prefix`` + FOLDER -> ``(folder, its config.json path, the parsed config)``, refusing a path
    that is not a folder or has no ``config.json``; ``label`` names the release in the errors."""
    folder = Path(str(source)[len(prefix) :]).expanduser()
    if not folder.is_dir():
        raise CheckpointError(
            f"{prefix}{folder}: not a folder", fix=f"pass the folder of a {label} release (HF layout)"
        )
    path = folder / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{str(folder)!r} has no config.json", fix=f"pass the folder of a {label} release")
    return folder, path, read_json(path, what=f"{label} config", fix="restore the file", error=CheckpointError)


def check_token_ids(ids: torch.Tensor) -> None:
    """A release's DiT embeds token ids; soft (probability) inputs are refused, naming the fix."""
    if ids.is_floating_point():
        raise CheckpointError(
            "a release's DiT reads token ids, not soft inputs", fix="fine-tune a model trained here instead"
        )


def release_sigma(t, rows: int, device, time_conditioning: bool) -> torch.Tensor:
    if time_conditioning and t is not None:
        return -torch.log1p(-(1 - LOGLINEAR_EPS) * t.float())
    return torch.zeros(rows, device=device)


@dataclass(frozen=True)
class ReleaseCkpt:
    """What an import reads from a release's Lightning checkpoint: the backbone's weights (keys
    without ``backbone.``), the Hydra config as plain data, the EMA ``shadow_params`` (None for raw
    weights), the tokenizer pickled in the hyper-parameters, as its ``tokenizers`` JSON (or None), and
    ``extras``: the checkpoint's other top-level scalars (BD3-LM's ``sampling_eps_min`` / ``_max``)."""

    state: dict
    config: dict
    shadow: list | None
    tokenizer_json: str | None
    extras: dict = field(default_factory=dict)


def read_release_ckpt(path: Path, *, what: str, ema: bool, prefix: str) -> ReleaseCkpt:
    """Read a Lightning checkpoint of MDLM, MDM-Prime or their AR baseline, without running code;
    one of another kind than ``prefix`` (``mdlm-ckpt:``, ...) is refused naming the right prefix."""

    blob = load_lightning_checkpoint(path, what=what)
    if not isinstance(blob, dict) or not isinstance(blob.get("state_dict"), dict):
        raise CheckpointError(
            f"{str(path)!r} is not a Lightning checkpoint (no state_dict)", fix="pass the release's .ckpt file"
        )
    raw_hp = blob.get("hyper_parameters") or {}
    hp = plain(raw_hp)
    config = hp.get("config", hp) if isinstance(hp, dict) else {}
    state = {k.removeprefix("backbone."): v for k, v in blob["state_dict"].items() if k.startswith("backbone.")}
    if "vocab_embed.embedding" not in state:
        raise CheckpointError(
            f"{str(path)!r} has no backbone.vocab_embed.embedding: not the release's DiT layout",
            fix="pass a checkpoint of the DiT backbone",
        )

    check_ckpt_prefix(path, state, config if isinstance(config, dict) else {}, used=prefix)
    shadow = None
    if ema:
        shadow = (blob.get("ema") or {}).get("shadow_params") if isinstance(blob.get("ema"), dict) else None
        if not shadow:
            raise CheckpointError(
                f"{str(path)!r} holds no EMA weights (ema.shadow_params)", fix="load the raw weights with ema=False"
            )
    saved = saved_tokenizer_json(raw_hp.get("tokenizer")) if isinstance(raw_hp, dict) else None
    extras = {
        k: v
        for k, v in blob.items()
        if (isinstance(v, torch.Tensor) and v.dim() == 0) or (isinstance(v, (int, float)) and not isinstance(v, bool))
    }
    return ReleaseCkpt(
        state=state,
        config=config if isinstance(config, dict) else {},
        shadow=shadow,
        tokenizer_json=saved,
        extras=extras,
    )


def model_shape(config: dict, where: str, **extra) -> dict:
    """The network sizes in the Hydra config under ``hyper_parameters``, read strictly (integers >= 1)."""
    model_cfg = config.get("model", {}) if isinstance(config.get("model"), dict) else {}
    keys = {
        "model_length": "length",
        "hidden_dim": "hidden_size",
        "cond_dim": "cond_dim",
        "n_blocks": "n_blocks",
        "n_heads": "n_heads",
    }
    return {
        ours: config_size(model_cfg, theirs, where=f"{where} (hyper_parameters)", label=f"model.{theirs}")
        for ours, theirs in keys.items()
    } | extra


def ema_state(state: dict, shadow: list, shape: dict, *, where: str) -> dict:
    """The EMA copy of each parameter: ``shadow_params`` follow the network's parameter order."""
    names = [n for n, _ in _dit(shape).named_parameters()]
    if len(shadow) < len(names):
        raise CheckpointError(
            f"{where}: {len(shadow)} EMA tensors for {len(names)} parameters", fix="load the raw weights with ema=False"
        )
    out = dict(state)
    for name, value in zip(names, shadow):
        if name in state and tuple(value.shape) != tuple(state[name].shape):
            raise CheckpointError(
                f"{where}: EMA tensor for {name!r} has shape {tuple(value.shape)}, the weight "
                f"{tuple(state[name].shape)}",
                fix="load the raw weights with ema=False",
            )
        out[name] = value
    return out


def _dit(shape: dict):

    return MDLMDiT(
        vocab_size=shape["vocab_size"],
        hidden_dim=shape["hidden_dim"],
        cond_dim=shape["cond_dim"],
        n_blocks=shape["n_blocks"],
        n_heads=shape["n_heads"],
        vocab_out=shape.get("vocab_out"),
        ell=shape.get("ell", 1),
        causal=bool(shape.get("causal", False)),
    )


def check_heads(shape: dict, *, where: str) -> None:
    """A release's width must split into its heads, each of even size (rotary embeddings pair them)."""
    width, heads = shape["hidden_dim"], shape["n_heads"]
    if width % heads or (width // heads) % 2:
        raise CheckpointError(
            f"{where}: hidden_dim = {shape['hidden_dim']} does not split into n_heads = {heads} heads of an even size",
            fix="the config does not describe this network; restore the release's config.json",
        )


def load_dit(state: dict, shape: dict, *, where: str, extra_keys: list):
    """The DiT of ``shape`` loaded strictly from ``state`` (keys without ``backbone.``)."""
    check_heads(shape, where=where)
    dit = _dit(shape)
    state = dict(state)
    state.pop("rotary_emb.inv_freq", None)  # a buffer the original saves; ours is computed the same way
    expected = dit.state_dict()
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected)) + sorted(extra_keys)
    if missing or unexpected:
        raise CheckpointError(
            f"weights in {where!r} are not the DiT layout of the release (missing {missing[:3]}, "
            f"unexpected {unexpected[:3]})",
            fix="pass a checkpoint of the release (keys backbone.*)",
        )
    for key, value in state.items():
        if value.shape != expected[key].shape:
            raise CheckpointError(
                f"weight {key!r} has shape {tuple(value.shape)}; the config builds {tuple(expected[key].shape)}",
                fix="the config and the weights come from different models",
            )
    dit.load_state_dict({k: v.float() for k, v in state.items()})
    return dit


def import_provenance(source: str, ema: bool | None) -> dict:
    extra = {"source": source, "network": "the release's DiT"}
    if ema is not None:
        extra["weights"] = "EMA" if ema else "raw"
    return extra


def build_release_family(
    family: str,
    state: dict,
    *,
    shape: dict,
    backbone,
    model_keys: dict,
    source: str,
    where: str,
    extra_keys: list,
    ema: bool | None,
    d_model: int = 8,
    **finish,
):
    """Our ``family`` (found by name in the model registry) around the release's DiT loaded strictly
    from ``state``: built with a placeholder network and ``model_keys`` (its family's settings, also
    written into the config), then ``backbone(dit)`` put in place by :func:`finish_import` with ``finish``."""

    Family = family_class(family)
    dit = load_dit(state, shape, where=where, extra_keys=extra_keys)
    model = Family(
        vocab_size=finish["C"], seq_len=shape["model_length"], d_model=d_model, n_layers=1, n_heads=2, **model_keys
    )
    model.hparams.update(import_provenance(source, ema))
    config_keys = {k: v for k, v in model_keys.items() if k != "time_conditioning"}
    return finish_import(model, backbone(dit), Family.config_class, shape=shape, where=where, **finish, **config_keys)


def finish_import(
    model,
    backbone,
    config_class,
    *,
    shape,
    time_conditioning,
    tokenizer_folder,
    C,
    where,
    device,
    tokenizer=None,
    **model_keys,
):
    """Swap the placeholder network for the release's, and describe the model as our configs do."""

    tokenizer = tokenizer if tokenizer is not None else release_tokenizer(tokenizer_folder, C)

    known = {f.name for f in fields(config_class)}
    time_keys = {"time_conditioning": time_conditioning, "cond_dim": shape["cond_dim"]}
    cfg = Config(
        model=config_class(
            family=model.family,
            d_model=shape["hidden_dim"],
            n_layers=shape["n_blocks"],
            n_heads=shape["n_heads"],
            **{k: v for k, v in time_keys.items() if k in known},
            **model_keys,
        ),
        data=DataConfig(tokenizer=tokenizer.spec, seq_len=shape["model_length"]),
        name=Path(where).stem,
    )
    model.hparams.update(d_model=shape["hidden_dim"], n_layers=shape["n_blocks"], n_heads=shape["n_heads"])
    model.backbone = backbone  # the placeholder built by the family's constructor is dropped
    return model.to(device).eval(), tokenizer, cfg


def release_tokenizer(folder: Path, C: int, spec: str | None = None, *, saved: str | None = None):
    """The tokenizer of a release checkpoint: ``spec`` when given (any ``--tokenizer`` spec), else
    the tokenizer files beside the weights, else GPT-2's for C = 50257 (MDLM's and MDM-Prime's
    OpenWebText models); its size must be C. ``saved`` is the tokenizer the checkpoint pickled in
    its hyper-parameters (``tokenizers`` JSON): when present, the chosen tokenizer must map every
    token to the same id, so a checkpoint is never scored through another vocabulary."""

    if spec is not None:
        tokenizer, chosen = get_tokenizer(spec), f"--tokenizer {spec}"
    elif (folder / "tokenizer.json").is_file() or (folder / "tokenizer_config.json").is_file():
        tokenizer, chosen = (
            load_transformers(folder.resolve(), spec=f"hf:{folder.resolve()}"),
            f"the tokenizer files in {folder}",
        )
    elif C == 50257:
        tokenizer, chosen = get_tokenizer("gpt2"), "GPT-2's tokenizer (the default for C = 50257)"
    else:
        held = " (the tokenizer pickled in its hyper-parameters is checked against the one you name)" if saved else ""
        raise CheckpointError(
            f"{str(folder)!r} has no tokenizer files and C = {C} is not GPT-2's vocabulary{held}",
            fix="name the release's tokenizer (harness.load(..., tokenizer=SPEC), "
            "primebench import --tokenizer SPEC) or save its tokenizer.json into the folder",
        )
    if tokenizer.vocab_size != C:
        raise CheckpointError(
            f"the tokenizer has {tokenizer.vocab_size} ids but the model has C = {C} (V = C + 1 with the mask)",
            fix="pass the tokenizer the release was trained with",
        )
    if saved is not None:
        _check_saved_vocabulary(tokenizer, saved, chosen=chosen)
    return tokenizer


def _check_saved_vocabulary(tokenizer, saved: str, *, chosen: str) -> None:
    """Refuse ``tokenizer`` when it maps a token of the checkpoint's own tokenizer to another id."""
    from tokenizers import Tokenizer as Backend  # deferred: only a release that pickled its tokenizer needs it

    try:
        theirs = Backend.from_str(saved).get_vocab(with_added_tokens=True)
    except Exception:  # noqa: BLE001 - the tokenizers library raises a bare Exception for bad JSON
        return  # an unreadable saved tokenizer cannot be compared; the chosen one stands, as without it
    check_same_vocabulary(tokenizer, theirs, chosen=chosen, other="the tokenizer saved in the checkpoint")


def check_same_vocabulary(tokenizer, theirs: dict[str, int], *, chosen: str, other: str) -> None:
    """Refuse ``tokenizer`` (described as ``chosen``) when it maps a token of ``theirs`` (token -> id,
    the vocabulary of ``other``) to another id; a byte-level tokenizer, without a vocabulary to
    compare, passes (its size was checked)."""
    backend = getattr(tokenizer, "_backend", None)
    if backend is None or not hasattr(backend, "get_vocab"):
        return
    ours = backend.get_vocab()
    differ = sorted((i, tok) for tok, i in theirs.items() if ours.get(tok) != i)
    if differ:
        examples = ", ".join(f"{tok!r} (id {i})" for i, tok in differ[:3])
        raise CheckpointError(
            f"{chosen} differs from {other} at {len(differ)} of {len(theirs)} tokens: {examples}",
            fix="pass the tokenizer the release was trained with (--tokenizer SPEC, or its "
            "tokenizer.json beside the checkpoint)",
        )


__all__ = [
    "LOGLINEAR_EPS",
    "OWN_FOLDER",
    "ReleaseCkpt",
    "build_release_family",
    "check_same_vocabulary",
    "check_ckpt_prefix",
    "check_heads",
    "check_token_ids",
    "ckpt_prefix",
    "ema_state",
    "finish_import",
    "import_provenance",
    "load_dit",
    "model_shape",
    "prefix_description",
    "read_release_ckpt",
    "release_sigma",
    "release_tokenizer",
    "wrong_prefix",
]
