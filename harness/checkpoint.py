"""Checkpoint folders: write atomically, load with clear errors.

A checkpoint folder holds

* ``model.safetensors``: the weights under ``model.*`` and the EMA weights under ``ema.*``, with
  metadata (format version, family, step, vocabulary size, sequence length);
* ``config.yaml``: the fully resolved run config plus a ``resolved`` block (vocabulary size, mask id,
  sequence length, tokenizer spec) so the model can be rebuilt without the training data;
* ``trainer_state.pt``: optimizer state and step for exact resume (loaded with ``weights_only=True``);
* ``tokenizer/``: what the tokenizer needs to rebuild offline (a trained BPE's ``tokenizer.json``).

Every file is written with :func:`harness.io.atomic_write` (a temporary name, then ``os.replace``); the weights and
the trainer state carry the same step so a torn write is detected rather than silently resumed.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch
import yaml

from harness.config import Config, config_from_dict, drop_legacy_model_keys
from harness.errors import CheckpointError, PrimebenchError
from harness.io import atomic_write, atomic_write_text

FORMAT = "primebench-checkpoint/1"
WEIGHTS = "model.safetensors"
CONFIG = "config.yaml"
STATE = "trainer_state.pt"
TOKENIZER_DIR = "tokenizer"


def resolved_block(model, tokenizer) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "family": model.family,
        "vocab_size": model.vocab_size,
        "seq_len": model.seq_len,
        "mask_id": getattr(model, "mask_id", None),
        "tokenizer": tokenizer.spec if tokenizer is not None else None,
    }


def save_checkpoint(
    out: Path,
    *,
    model,
    ema_state: dict[str, torch.Tensor] | None,
    cfg: Config,
    tokenizer,
    step: int,
    trainer_state: dict[str, Any] | None = None,
) -> None:
    """Write (or overwrite) a checkpoint folder. Weights first, then state, then config."""
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {f"model.{k}": v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    if ema_state is not None:
        tensors.update({f"ema.{k}": v.detach().contiguous().cpu() for k, v in ema_state.items()})
    meta = {k: str(v) for k, v in resolved_block(model, tokenizer).items()}
    meta["step"] = str(step)
    atomic_write(out / WEIGHTS, lambda p: save_file(tensors, str(p), metadata=meta))
    if trainer_state is not None:
        state = dict(trainer_state, step=step)
        atomic_write(out / STATE, lambda p: torch.save(state, p))
    if tokenizer is not None and not (out / TOKENIZER_DIR).exists():
        tmp = Path(tempfile.mkdtemp(dir=out, prefix=".tokenizer."))
        tokenizer.save(tmp)
        os.replace(tmp, out / TOKENIZER_DIR)
    doc = cfg.to_dict()
    doc["resolved"] = resolved_block(model, tokenizer)
    atomic_write_text(out / CONFIG, yaml.safe_dump(doc, sort_keys=False))


def read_checkpoint_config(path: Path) -> tuple[Config, dict[str, Any]]:
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint folder {str(path)!r} does not exist", fix="pass the --out folder of `primebench train`")
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {str(path)!r} is not a folder", fix="pass the folder that holds model.safetensors and config.yaml")
    cfg_path = path / CONFIG
    if not cfg_path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} has no {CONFIG}", fix="the folder is not a primebench checkpoint, or training never saved")
    try:
        doc = yaml.safe_load(cfg_path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise CheckpointError(f"{cfg_path} is not valid YAML: {exc}") from exc
    resolved = doc.pop("resolved", None)
    if not isinstance(resolved, dict):
        raise CheckpointError(f"{cfg_path} has no 'resolved' block", fix="re-save the checkpoint with this version of primebench")
    try:
        cfg = config_from_dict(drop_legacy_model_keys(doc))
    except PrimebenchError as exc:
        raise CheckpointError(f"{cfg_path}: {exc.problem}", fix=exc.fix) from exc
    return cfg, resolved


def _read_weights(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    from safetensors import safe_open

    wpath = path / WEIGHTS
    if not wpath.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} has no {WEIGHTS}", fix="training did not save weights; re-run or resume it")
    try:
        with safe_open(str(wpath), framework="pt") as fh:
            meta = fh.metadata() or {}
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    except Exception as exc:  # safetensors raises several types for truncated/garbled files
        raise CheckpointError(
            f"weights file {str(wpath)!r} is corrupt or truncated ({type(exc).__name__}: {exc})",
            fix="restore the file from a copy or re-train",
        ) from exc
    return tensors, meta


def load_checkpoint(path, *, ema: bool = True, device: str = "cpu"):
    """Return ``(model, tokenizer, config)``; the EMA weights are loaded when ``ema`` and present."""
    from harness.data import load_tokenizer
    from harness.models import model_from_config

    path = Path(path)
    cfg, resolved = read_checkpoint_config(path)
    tensors, meta = _read_weights(path)
    try:
        model = model_from_config(cfg.model, vocab_size=int(resolved["vocab_size"]), seq_len=int(resolved["seq_len"]))
    except PrimebenchError as exc:
        raise CheckpointError(f"{path / CONFIG}: {exc.problem}", fix=exc.fix) from exc
    prefix = "ema." if ema and any(k.startswith("ema.") for k in tensors) else "model."
    state = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"weights in {str(path / WEIGHTS)!r} do not match the {cfg.model.family!r} model in config.yaml "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]})",
            fix="the config and weights come from different runs",
        )
    for key, value in state.items():
        if value.shape != expected[key].shape:
            raise CheckpointError(
                f"weight {key!r} has shape {tuple(value.shape)} but the config builds {tuple(expected[key].shape)}",
                fix="the config and weights come from different runs (vocabulary or model size differ)",
            )
    model.load_state_dict(state)
    model.to(device).eval()
    tokenizer = None
    tok_dir = path / TOKENIZER_DIR
    if tok_dir.is_dir():
        try:
            tokenizer = load_tokenizer(tok_dir)
        except PrimebenchError as exc:
            raise CheckpointError(f"tokenizer in {str(tok_dir)!r} cannot be loaded: {exc.problem}", fix=exc.fix) from exc
        if tokenizer.vocab_size != model.vocab_size:
            raise CheckpointError(
                f"tokenizer vocabulary ({tokenizer.vocab_size}) does not match the weights' vocabulary ({model.vocab_size})",
                fix="the tokenizer folder belongs to a different run; copy the right one or re-train",
            )
    return model, tokenizer, cfg


def load_trainer_state(path: Path) -> dict[str, Any] | None:
    spath = Path(path) / STATE
    if not spath.is_file():
        return None
    try:
        return torch.load(spath, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointError(f"trainer state {str(spath)!r} is corrupt ({exc})", fix="delete it to restart, or restore it") from exc
