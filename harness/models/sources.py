"""Which load prefix a file or folder needs, so that a wrong prefix is an error naming the right one.

:func:`harness.load` dispatches on the prefix of its source (``hf:``, ``mdlm-hf:``, ``mdlm-ckpt:``,
``prime-ckpt:``, ``ar-ckpt:``, none for our own folders). Given the wrong one, a loader would fail
somewhere deep inside (a tokenizer of the wrong size, EMA tensors that do not match, a missing
``config.yaml``) with a message that names neither the mix-up nor the way out. Here the file is
looked at first, cheaply: a folder by its ``config.yaml`` / ``config.json``, a Lightning ``.ckpt`` by
its keys and Hydra config (memory mapped, never unpickled beyond plain data), and a source whose
prefix does not fit gets a :class:`~harness.errors.CheckpointError` naming the file, what it is, and
the source to pass instead.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.models.release_ckpt import OWN_FOLDER, check_ckpt_prefix, ckpt_prefix, wrong_prefix
from harness.models.release_ckpt import prefix_description as what
from harness.models.releases import format_of, release_formats, release_prefixes
from harness.models.transfer import is_transfer_folder
from harness.safe_load import load_lightning_checkpoint, plain


def prefixes() -> tuple[str, ...]:
    """Every load prefix, from the registry of release formats (:mod:`harness.models.releases`)."""

    return release_prefixes()


def ckpt_prefixes() -> tuple[str, ...]:
    """The prefixes of Lightning checkpoint files, which their loaders check themselves."""

    return tuple(f.prefix for f in release_formats() if f.checkpoint_file)


def split_source(source: str) -> tuple[str, str]:
    """``"mdlm-ckpt:x.ckpt"`` -> ``("mdlm-ckpt:", "x.ckpt")``; an unprefixed path -> ``("", path)``."""

    fmt = format_of(source)
    prefix = fmt.prefix if fmt is not None else ""
    return prefix, source[len(prefix) :]


def folder_prefixes(folder: Path) -> tuple[str, ...] | None:
    """The prefixes a folder loads with (the first is the one to suggest); None when unknown.

    Folders written by ``primebench import`` / ``export`` are left to their loader (None)."""

    if (folder / "config.yaml").is_file():
        return ("",)
    if is_transfer_folder(folder) or not (folder / "config.json").is_file():
        return None
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None  # the loader reports a damaged config.json
    if not isinstance(config, dict):
        return None
    formats = release_formats()
    by_type = [f.prefix for f in formats if f.model_type is not None and f.model_type == config.get("model_type")]
    if by_type:
        return tuple(by_type)
    keyed = [f for f in formats if f.config_keys and all(k in config for k in f.config_keys)]
    if keyed:  # the most specific layout first (BD3-LM's keys include MDLM's)
        return (max(keyed, key=lambda f: len(f.config_keys)).prefix,)
    if "model_type" in config or "architectures" in config:
        return ("hf:",)
    return None


def file_prefix(path: Path) -> str | None:
    """The prefix of a Lightning ``.ckpt`` (read memory mapped, plain data only); None for other files
    or a file that is not a release checkpoint (its loader says why)."""
    if path.suffix != ".ckpt":
        return None

    blob = load_lightning_checkpoint(path, what="checkpoint", mmap=True)  # refuses code, as every load does
    if not isinstance(blob, dict) or not isinstance(blob.get("state_dict"), dict):
        return None
    hp = plain(blob.get("hyper_parameters") or {})
    config = hp.get("config", hp) if isinstance(hp, dict) else {}
    state = {k.removeprefix("backbone."): None for k in blob["state_dict"] if k.startswith("backbone.")}
    return ckpt_prefix(state, config if isinstance(config, dict) else {}) if state else None


def check_source(source: str) -> None:
    """Refuse a source whose prefix does not fit the file or folder it names (see the module
    docstring). Sources that do not exist, hub names and unknown layouts pass: their loader reports
    them. A ``*-ckpt:`` prefix on a file is checked by the loader itself, which reads the file anyway
    (:func:`check_ckpt_prefix`)."""
    used, body = split_source(str(source))
    path = Path(body.partition("#")[0] if used == "hf:" else body).expanduser()
    if path.is_dir():
        fits = folder_prefixes(path)
    elif path.is_file() and used not in ckpt_prefixes():
        right = file_prefix(path)
        fits = None if right is None else (right,)
    else:
        return
    if fits is None or used in fits:
        return
    raise wrong_prefix(path, used, fits[0])


__all__ = [
    "OWN_FOLDER",
    "check_ckpt_prefix",
    "check_source",
    "ckpt_prefix",
    "file_prefix",
    "folder_prefixes",
    "ckpt_prefixes",
    "prefixes",
    "split_source",
    "what",
]
