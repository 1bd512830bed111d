"""Checkpoint folders: write atomically, load with clear errors.

A checkpoint folder holds

* ``model.safetensors``: the weights under ``model.*`` and the EMA weights under ``ema.*``, with
  metadata (format version, family, step, vocabulary size, sequence length);
* ``config.yaml``: the fully resolved run config plus a ``resolved`` block (vocabulary size, mask id,
  sequence length, tokenizer spec) so the model can be rebuilt without the training data, and the
  SHA-256 of the tokenizer folder and of the weights, which a load checks;
* ``trainer_state.pt``: optimizer state and step for exact resume (loaded with ``weights_only=True``);
* ``tokenizer/``: what the tokenizer needs to rebuild offline (a trained BPE's ``tokenizer.json``).

A save replaces the weights, the trainer state and the config together with
:func:`harness.io.replace_together` (staged and fsynced in ``.pending/``, then moved into place), so a
crash or a full disk never leaves weights and state of different saves; :func:`recover_interrupted_save`
completes (or discards) a save a crash interrupted. The weights and the trainer state carry the same step,
so a torn pair (e.g. from an older version) is still detected rather than silently resumed.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors import safe_open

from harness import stopping
from harness.config import Config, config_from_dict, drop_legacy_model_keys
from harness.data import get_tokenizer, load_tokenizer
from harness.errors import CheckpointError, PrimebenchError
from harness.io import file_sha256, finish_replace_together, replace_together, safetensors_bytes
from harness.models import model_from_config
from harness.safe_load import load_torch_file

FORMAT = "primebench-checkpoint/1"
WEIGHTS = "model.safetensors"
CONFIG = "config.yaml"
STATE = "trainer_state.pt"
#: the SHA-256 of the trainer state as saved, replaced with it (checked at resume); a file of its own
#: so that config.yaml keeps the same bytes whether or not a run was resumed
STATE_HASH = "trainer_state.sha256"
TOKENIZER_DIR = "tokenizer"


def resolved_block(model, tokenizer) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "family": model.family,
        "vocab_size": model.vocab_size,
        "seq_len": model.seq_len,
        "mask_id": model.mask_id,
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
    """Write (or overwrite) a checkpoint folder: the tokenizer once, then weights, state and config
    replaced together (a crash leaves all three of the previous save or all three of this one).

    The same tensors and settings give the same bytes (and so the same ``checkpoint_sha256``). A
    SIGINT/SIGTERM waits until the save is done (:func:`harness.stopping.critical`)."""
    with stopping.critical():
        _save_checkpoint(
            out, model=model, ema_state=ema_state, cfg=cfg, tokenizer=tokenizer, step=step, trainer_state=trainer_state
        )


def _save_checkpoint(out, *, model, ema_state, cfg, tokenizer, step, trainer_state) -> None:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {f"model.{k}": v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    if ema_state is not None:
        tensors.update({f"ema.{k}": v.detach().contiguous().cpu() for k, v in ema_state.items()})
    meta = {k: str(v) for k, v in resolved_block(model, tokenizer).items()}
    meta["step"] = str(step)
    files = {WEIGHTS: safetensors_bytes(tensors, meta)}
    if trainer_state is not None:
        # saved through a buffer: torch.save names its archive after the file, and a staging file
        # name would otherwise end up inside the bytes
        buffer = io.BytesIO()
        torch.save(dict(trainer_state, step=step), buffer)
        files[STATE] = buffer.getvalue()
    if tokenizer is not None and not (out / TOKENIZER_DIR).exists():
        tmp = Path(tempfile.mkdtemp(dir=out, prefix=".tokenizer."))
        tokenizer.save(tmp)
        os.replace(tmp, out / TOKENIZER_DIR)
    doc = cfg.to_dict()
    doc["resolved"] = resolved_block(model, tokenizer)
    if (out / TOKENIZER_DIR).is_dir():
        doc["resolved"]["tokenizer_sha256"] = folder_sha256(out / TOKENIZER_DIR)
    doc["resolved"]["weights_sha256"] = hashlib.sha256(files[WEIGHTS]).hexdigest()  # checked at load
    if STATE in files:  # checked at resume
        files[STATE_HASH] = (hashlib.sha256(files[STATE]).hexdigest() + "\n").encode("ascii")
    files[CONFIG] = yaml.safe_dump(doc, sort_keys=False).encode("utf-8")
    replace_together(out, files, note=f"step {step}")


def recover_interrupted_save(out: Path) -> str | None:
    """Complete (or discard) a save that a crash interrupted in ``out``; a sentence for the user, or
    None when there was none. Call it under the run folder's lock before reading the checkpoint."""
    found = finish_replace_together(out)
    if found is None:
        return None
    if found.completed:
        return f"{out}: completed the save ({found.note or 'step unknown'}) that an interrupted run had fully written"
    if found.reason:
        return (
            f"{out}: discarded the staged save ({found.note or 'step unknown'}) because {found.reason}; "
            "the checkpoint is the save before it"
        )
    return f"{out}: discarded an incomplete save that an interrupted run left; the checkpoint is the save before it"


def read_checkpoint_config(path: Path) -> tuple[Config, dict[str, Any]]:
    path = Path(path)
    if not path.exists():
        raise CheckpointError(
            f"checkpoint folder {str(path)!r} does not exist", fix="pass the --out folder of `primebench train`"
        )
    if not path.is_dir():
        raise CheckpointError(
            f"checkpoint {str(path)!r} is not a folder",
            fix="pass the folder that holds model.safetensors and config.yaml",
        )
    cfg_path = path / CONFIG
    if not cfg_path.is_file():
        raise CheckpointError(
            f"checkpoint {str(path)!r} has no {CONFIG}",
            fix="the folder is not a primebench checkpoint, or training never saved",
        )
    try:
        doc = yaml.safe_load(cfg_path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise CheckpointError(f"{cfg_path} is not valid YAML: {exc}") from exc
    resolved = doc.pop("resolved", None)
    if not isinstance(resolved, dict):
        raise CheckpointError(
            f"{cfg_path} has no 'resolved' block", fix="re-save the checkpoint with this version of primebench"
        )
    try:
        cfg = config_from_dict(drop_legacy_model_keys(doc))
    except PrimebenchError as exc:
        raise CheckpointError(f"{cfg_path}: {exc.problem}", fix=exc.fix) from exc
    return cfg, resolved


def _read_weights(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:

    wpath = path / WEIGHTS
    if not wpath.is_file():
        raise CheckpointError(
            f"checkpoint {str(path)!r} has no {WEIGHTS}", fix="training did not save weights; re-run or resume it"
        )
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

    path = Path(path)
    cfg, resolved = read_checkpoint_config(path)
    tensors, meta = _read_weights(path)
    try:
        model = model_from_config(cfg.model, vocab_size=int(resolved["vocab_size"]), seq_len=int(resolved["seq_len"]))
    except PrimebenchError as exc:
        raise CheckpointError(f"{path / CONFIG}: {exc.problem}", fix=exc.fix) from exc
    check_family(path, cfg.model.family, meta)
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
    bad = non_finite(state)
    if bad:
        raise CheckpointError(
            f"the {'EMA ' if prefix == 'ema.' else ''}weights in {str(path / WEIGHTS)!r} are not finite "
            f"({len(bad)} tensors hold NaN or inf, e.g. {bad[0]!r}); any number computed from them is meaningless",
            fix="evaluate a checkpoint saved before training diverged (training never saves non-finite weights)",
        )
    check_weights_sha256(path, resolved)
    model.load_state_dict(state)
    model.to(device).eval()
    tokenizer = None
    tok_dir = path / TOKENIZER_DIR
    if tok_dir.is_dir():
        try:
            tokenizer = load_tokenizer(tok_dir)
        except PrimebenchError as exc:
            raise CheckpointError(
                f"tokenizer in {str(tok_dir)!r} cannot be loaded: {exc.problem}", fix=exc.fix
            ) from exc
        check_tokenizer_identity(tokenizer, tok_dir, resolved)
        if tokenizer.vocab_size != model.vocab_size:
            raise CheckpointError(
                f"tokenizer vocabulary ({tokenizer.vocab_size}) does not match the weights' vocabulary "
                f"({model.vocab_size})",
                fix="the tokenizer folder belongs to a different run; copy the right one or re-train",
            )
    return model, tokenizer, cfg


def non_finite(*states: dict[str, torch.Tensor]) -> list[str]:
    """Names of the floating-point tensors that hold NaN or inf (the weights must never be saved or used)."""
    return [
        k
        for state in states
        for k, v in state.items()
        if v.dtype.is_floating_point and not bool(torch.isfinite(v).all())
    ]


def folder_sha256(folder: Path) -> str:
    """SHA-256 over a folder's files (relative names and bytes, in name order)."""

    digest = hashlib.sha256()
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def check_tokenizer_identity(tokenizer, folder: Path, resolved: dict[str, Any]) -> None:
    """Refuse a tokenizer folder that is not the one the weights were trained with.

    A tokenizer of the same vocabulary size trained on another corpus would score every token with
    the wrong id and give a silently wrong number. The spec the checkpoint names must be the folder's,
    and where the checkpoint recorded the folder's hash the files must still have it."""
    wanted = resolved.get("tokenizer")
    if wanted and tokenizer.spec != wanted:
        raise CheckpointError(
            f"the tokenizer in {str(folder)!r} is {tokenizer.spec!r} but the checkpoint was trained with {wanted!r}",
            fix="restore the run's own tokenizer folder (a tokenizer of the same size from another corpus gives "
            "wrong numbers)",
        )
    digest = resolved.get("tokenizer_sha256")
    found = folder_sha256(folder) if digest else None
    if digest and found != digest:
        raise CheckpointError(
            f"the files in {str(folder)!r} are not the tokenizer this checkpoint was trained with: "
            f"{CONFIG} records tokenizer_sha256 {digest}, the folder hashes to {found}",
            fix=f"restore the {TOKENIZER_DIR}/ folder from the training run "
            "(a tokenizer of the same size from another corpus gives wrong numbers)",
        )


def tokenizer_sha256(tokenizer) -> str:
    """The hash :func:`save_checkpoint` records as ``tokenizer_sha256``: :func:`folder_sha256` of the
    folder ``tokenizer.save`` writes."""
    with tempfile.TemporaryDirectory(prefix="primebench-tokenizer-") as tmp:
        tokenizer.save(tmp)
        return folder_sha256(Path(tmp))


def rebuild_tokenizer(path, spec: str, *, corpus=None):
    """The tokenizer of a checkpoint folder that lacks its ``tokenizer/`` folder, rebuilt from ``spec``.

    A ``bpe:V`` is trained on ``corpus`` (by default the default corpus), which need not be the text
    the run trained its tokenizer on: the same V from another corpus maps text to other ids and gives
    a silently wrong number. So the rebuilt tokenizer must hash (as saved) to the ``tokenizer_sha256``
    that training recorded in config.yaml; a checkpoint saved before that hash existed is held to the
    tokenizer spec it recorded. A folder that is not a primebench checkpoint (an exported one) recorded
    neither and gets the rebuilt tokenizer as is."""

    tokenizer = get_tokenizer(spec, corpus=corpus)
    path = Path(str(path))
    if not (path / CONFIG).is_file():
        return tokenizer
    _, resolved = read_checkpoint_config(path)
    wanted, expected = resolved.get("tokenizer"), resolved.get("tokenizer_sha256")
    fix = (
        f"restore the {TOKENIZER_DIR}/ folder from the training run into {str(path)!r} "
        "(a tokenizer rebuilt from another corpus gives wrong numbers)"
    )
    if expected:
        found = tokenizer_sha256(tokenizer)
        if found != expected:
            raise CheckpointError(
                f"checkpoint {str(path)!r} has no {TOKENIZER_DIR}/ folder, and the tokenizer rebuilt from {spec!r} "
                f"is not the one it was trained with ({wanted!r}): {CONFIG} records "
                f"tokenizer_sha256 {expected}, the rebuilt tokenizer hashes to {found}",
                fix=fix,
            )
    elif wanted and tokenizer.spec != wanted:
        raise CheckpointError(
            f"checkpoint {str(path)!r} has no {TOKENIZER_DIR}/ folder, and the tokenizer rebuilt from {spec!r} is "
            f"{tokenizer.spec!r} but the checkpoint was trained with {wanted!r}",
            fix=fix,
        )
    return tokenizer


def check_family(path: Path, family: str, meta: dict[str, str]) -> None:
    """Refuse a config.yaml whose ``model.family`` is not the family the weights were saved by (the
    ``family`` in the safetensors metadata). MDLM and the masked model share a network, so one's weights
    load into the other without a missing key; scored as the other family they give a wrong number."""
    saved = meta.get("family")
    if saved and saved != family:
        raise CheckpointError(
            f"checkpoint {str(path)!r}: {CONFIG} says model.family {family!r} but the weights in {WEIGHTS} "
            f"were saved by a {saved!r} model",
            fix=f"set model.family back to {saved!r} in {str(path / CONFIG)!r} (or restore {CONFIG} from the "
            f"training run); to score a {family!r} model, train one",
        )


def check_weights_sha256(path: Path, resolved: dict[str, Any]) -> None:
    """Refuse weights whose bytes changed since the save that wrote config.yaml.

    ``weights_sha256`` is the SHA-256 of ``model.safetensors`` as saved (what records call
    ``checkpoint_sha256``); checkpoints saved before it was recorded load unchecked. Hashing reads the
    file once more (milliseconds for the tiny and small models)."""
    expected = resolved.get("weights_sha256")
    if not expected:
        return

    found = file_sha256(path / WEIGHTS)
    if found != expected:
        raise CheckpointError(
            f"the weights file {str(path / WEIGHTS)!r} changed since training saved it: its sha256 is {found}, "
            f"{CONFIG} recorded {expected}",
            fix="restore model.safetensors from the training run (or a copy of it), or re-train",
        )


def load_trainer_state(path: Path) -> dict[str, Any] | None:
    """The trainer state of the checkpoint folder ``path`` (None without one), checked against the
    SHA-256 in ``trainer_state.sha256``, saved with it (states saved before that file existed are
    read unchecked): a corrupted or replaced state is refused, never resumed from."""
    spath = Path(path) / STATE
    if not spath.is_file():
        return None

    hpath = Path(path) / STATE_HASH
    expected = hpath.read_text(errors="replace").strip() if hpath.is_file() else None
    if expected is not None and file_sha256(spath) != expected:
        raise CheckpointError(
            f"trainer state {str(spath)!r} is not the one saved with this checkpoint (its SHA-256 differs from "
            f"the one in {STATE_HASH})",
            fix="restore it from a copy, or pass --restart to start the run over in this folder",
        )

    try:
        state = load_torch_file(
            spath,
            what="trainer state",
            fix="restore it from a copy, or pass --restart to "
            "start the run over in this folder (its checkpoint is discarded)",
        )
    except PrimebenchError as exc:
        raise CheckpointError(exc.problem, fix=exc.fix) from exc
    if not isinstance(state, dict) or "step" not in state or "optimizer" not in state:
        raise CheckpointError(
            f"trainer state {str(spath)!r} is not a primebench trainer state",
            fix="restore it from a copy, or pass --restart to start the run over in this folder",
        )
    return state
