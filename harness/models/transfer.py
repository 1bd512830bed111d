"""``primebench import`` and ``primebench export``: checkpoints in and out of the harness.

:func:`import_checkpoint` converts a published checkpoint (``mdlm-hf:``, ``mdlm-ckpt:``,
``prime-ckpt:``, ``ar-ckpt:``, ``bd3lm-hf:``, ``bd3lm-ckpt:``, ``hf:``) into a folder of
safetensors weights, a ``config.json`` and a tokenizer, which every command then takes as a plain
path: a pickled ``.ckpt`` is read once, safely, and never again. The folder's ``config.json`` holds
``primebench_import`` (format, source, EMA or raw) and the network's shape.
:func:`export_checkpoint` writes one of our own checkpoints as an HF-style folder
(``model.safetensors`` + ``config.json`` with the resolved config), which :func:`harness.load`
reads back to the same log-probabilities.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from safetensors.torch import load_file

import harness
from harness.checkpoint import resolved_block
from harness.config import config_from_dict
from harness.data import load_tokenizer
from harness.errors import CheckpointError, PrimebenchError
from harness.io import atomic_write_bytes, atomic_write_text, safetensors_bytes
from harness.models import family_class, family_names, model_from_config
from harness.models.hf_causal import hf_arm, is_hf_source
from harness.models.mdlm_import import build_ar, build_mdlm, load_dit
from harness.models.release_config import config_flag, config_size
from harness.models.releases import format_of, release_formats


def formats() -> dict[str, str]:
    """``--source-format`` name -> load prefix, for every registered release format."""

    return {f.name: f.prefix for f in release_formats()}


IMPORT_KEY = "primebench_import"
EXPORT_KEY = "primebench_export"
WEIGHTS = "model.safetensors"


def source_for(fmt: str | None, src: str) -> str:
    """``--source-format F SRC`` or a prefixed SRC -> the prefixed source :func:`harness.load` takes."""
    known = formats()
    if fmt is None:
        if any(src.startswith(prefix) for prefix in known.values()):
            return src
        raise PrimebenchError(f"{src!r}: say which format it is", fix=f"pass --source-format {'|'.join(known)}")
    if fmt not in known:
        raise PrimebenchError(f"unknown format {fmt!r}", fix=f"use one of {', '.join(known)}")
    return known[fmt] + src.removeprefix(known[fmt])


def _prepare(out: Path) -> None:
    if out.exists() and any(out.iterdir()):
        raise CheckpointError(f"--out {str(out)!r} is not empty", fix="choose a new folder")
    out.mkdir(parents=True, exist_ok=True)


def import_checkpoint(source: str, out: str | Path, *, ema: bool = True, tokenizer: str | None = None) -> Path:
    """Convert ``source`` (a prefixed published checkpoint) into the folder ``out``; returns ``out``.
    ``tokenizer`` names the tokenizer of a release checkpoint without tokenizer files."""

    out = Path(out)
    model, tokenizer, cfg = harness.load(source, ema=ema, tokenizer=tokenizer)  # validates all before writing
    _prepare(out)
    info: dict[str, Any] = {
        "format": format_of(source).name,
        "source": source,
        "weights": "EMA" if ema else "raw",
        "family": model.family,
    }
    if is_hf_source(source):
        model.backbone.hf.save_pretrained(str(out), safe_serialization=True)
        tokenizer._backend.save_pretrained(str(out))
        config = json.loads((out / "config.json").read_text())
        config[IMPORT_KEY] = info
        atomic_write_text(out / "config.json", json.dumps(config, indent=2, sort_keys=True))
        return out
    dit = model.backbone.dit
    shape = {
        "vocab_size": int(dit.vocab_embed.embedding.shape[0]),
        "model_length": cfg.data.seq_len,
        "hidden_dim": cfg.model.d_model,
        "cond_dim": int(dit.sigma_map.mlp[0].out_features) if hasattr(dit, "sigma_map") else 0,
        "n_blocks": cfg.model.n_layers,
        "n_heads": cfg.model.n_heads,
        "time_conditioning": bool(model.time_conditioning),
    }
    if dit.causal:
        shape.update(causal=True)
    else:  # the family's own section (BD3-LM's block size, Prime's ell and carry-over)
        shape.update(model.transfer_keys())
    tensors = {f"backbone.{k}": v for k, v in dit.state_dict().items()}
    atomic_write_bytes(out / WEIGHTS, safetensors_bytes(tensors, {"format": "primebench-import/1"}))
    tokenizer.save(out / "tokenizer")
    atomic_write_text(out / "config.json", json.dumps(dict(shape, **{IMPORT_KEY: info}), indent=2, sort_keys=True))
    return out


def is_transfer_folder(path) -> bool:
    config = Path(str(path)) / "config.json"
    if not config.is_file():
        return False
    try:
        doc = json.loads(config.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return isinstance(doc, dict) and (IMPORT_KEY in doc or EXPORT_KEY in doc)


def load_transfer_folder(path, *, ema: bool = True, device: str = "cpu"):
    """Load a folder written by :func:`import_checkpoint` or :func:`export_checkpoint`."""
    folder = Path(str(path))
    doc = json.loads((folder / "config.json").read_text())
    if EXPORT_KEY in doc:
        return _load_export(folder, doc, ema=ema, device=device)
    info = doc[IMPORT_KEY]
    if info.get("format") == "hf-causal":
        return hf_arm(f"hf:{folder}", device=device)

    tensors = load_file(str(folder / WEIGHTS))
    state = {k.removeprefix("backbone."): v for k, v in tensors.items() if k.startswith("backbone.")}
    tokenizer = load_tokenizer(folder / "tokenizer")
    where = str(folder / "config.json")
    shape = {
        k: config_size(doc, k, where=where, minimum={"vocab_size": 2, "cond_dim": 0}.get(k, 1))
        for k in ("vocab_size", "model_length", "hidden_dim", "cond_dim", "n_blocks", "n_heads")
    }
    time_conditioning = config_flag(doc, "time_conditioning", where=where, default=False)
    common = dict(
        time_conditioning=time_conditioning,
        tokenizer_folder=folder,
        source=str(folder),
        where=str(folder),
        device=device,
        tokenizer=tokenizer,
    )
    if config_flag(doc, "causal", where=where, default=False):
        shape.update(causal=True)
        return build_ar(
            load_dit(state, shape, where=str(folder), extra_keys=[]),
            shape=shape,
            tokenizer=tokenizer,
            source=str(folder),
            ema=None,
            device=device,
            name=folder.name,
        )

    for name in family_names():  # a section named after a family: that family builds the model
        if name in doc:
            family = family_class(name)
            return family.load_transfer(state, shape=shape, section=doc[name], doc=doc, where=where, common=common)
    return build_mdlm(state, shape=shape, extra_keys=[], **common)


def export_checkpoint(checkpoint, out: str | Path, *, ema: bool = True) -> Path:
    """Write our checkpoint ``checkpoint`` as an HF-style folder ``out`` (safetensors + config.json)."""

    out = Path(out)
    model, tokenizer, cfg = harness.load(checkpoint, ema=ema)
    if not hasattr(model.backbone, "blocks"):
        raise PrimebenchError(
            f"{checkpoint}: only checkpoints trained by primebench can be exported",
            fix="an imported checkpoint's folder already is the exported form",
        )
    _prepare(out)
    tensors = {k: v for k, v in model.state_dict().items()}
    atomic_write_bytes(out / WEIGHTS, safetensors_bytes(tensors, {"format": "primebench-export/1"}))
    doc = {
        EXPORT_KEY: {"family": model.family, "weights": "EMA" if ema else "raw", "source": str(checkpoint)},
        "config": cfg.to_dict(),
        "resolved": resolved_block(model, tokenizer),
        "model_type": f"primebench-{model.family}",
        "vocab_size": model.vocab_size,
        "max_position_embeddings": model.seq_len,
    }
    atomic_write_text(out / "config.json", json.dumps(doc, indent=2, sort_keys=True))
    if tokenizer is not None:
        tokenizer.save(out / "tokenizer")
    return out


def _load_export(folder: Path, doc: dict, *, ema: bool, device: str):

    cfg = config_from_dict(doc["config"])
    resolved = doc["resolved"]
    model = model_from_config(cfg.model, vocab_size=int(resolved["vocab_size"]), seq_len=int(resolved["seq_len"]))
    state = load_file(str(folder / WEIGHTS))
    missing, unexpected = sorted(set(model.state_dict()) - set(state)), sorted(set(state) - set(model.state_dict()))
    if missing or unexpected:
        raise CheckpointError(
            f"weights in {str(folder)!r} do not fit the exported config (missing {missing[:3]}, "
            f"unexpected {unexpected[:3]})",
            fix="export the checkpoint again",
        )
    model.load_state_dict(state)
    tokenizer = load_tokenizer(folder / "tokenizer") if (folder / "tokenizer").is_dir() else None
    return model.to(device).eval(), tokenizer, cfg


__all__ = [
    "formats",
    "source_for",
    "import_checkpoint",
    "export_checkpoint",
    "is_transfer_folder",
    "load_transfer_folder",
]
