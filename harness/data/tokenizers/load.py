"""Rebuild a tokenizer from the folder :meth:`Tokenizer.save` wrote (offline)."""

from __future__ import annotations

from pathlib import Path

import yaml

from harness.data.tokenizers.base import CONFIG_FILE, Tokenizer
from harness.data.tokenizers.bpe import BPE_FILE, BPETokenizer
from harness.data.tokenizers.hf import HF_DIR, load_transformers
from harness.data.tokenizers.simple import ByteTokenizer, PixelTokenizer
from harness.errors import DataError


def load_tokenizer(directory: str | Path) -> Tokenizer:
    """Rebuild the tokenizer that :meth:`Tokenizer.save` wrote to ``directory`` (offline)."""
    # deferred: the tokenizers library loads only when a BPE tokenizer is built or read
    from tokenizers import Tokenizer as Backend

    directory = Path(directory)
    config_path = directory / CONFIG_FILE
    if not config_path.is_file():
        raise DataError(f"no {CONFIG_FILE} in {directory}", fix="point at a folder written by save()")
    try:
        config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise DataError(
            f"{config_path} is not valid YAML ({type(exc).__name__})",
            fix="restore the tokenizer folder from the run that wrote it",
        ) from exc
    if not isinstance(config, dict) or "kind" not in config or "spec" not in config:
        raise DataError(f"{config_path} is not a tokenizer config", fix="re-save the tokenizer")
    kind = config["kind"]
    if kind == "bytes":
        tokenizer: Tokenizer = ByteTokenizer()
    elif kind == "pixels":
        tokenizer = PixelTokenizer(int(config["vocab_size"]))
    elif kind in ("bpe", "gpt2", "gpt2-pad"):
        path = directory / BPE_FILE
        if not path.is_file():
            raise DataError(f"{path} is missing (needed by {config_path})", fix="re-save the tokenizer")
        meta = {k: config[k] for k in ("trained_on", "corpus_sha256", "split") if k in config}
        try:
            backend = Backend.from_file(str(path))
        except Exception as exc:  # the tokenizers library raises a bare Exception for a bad file
            raise DataError(
                f"{path} is not a valid tokenizer file ({str(exc).splitlines()[0][:120]})",
                fix="restore the tokenizer folder from the run that wrote it",
            ) from exc
        tokenizer = BPETokenizer(spec=config["spec"], kind=kind, backend=backend, meta=meta)
    elif kind == "hf":
        tokenizer = load_transformers(directory / HF_DIR, spec=config["spec"])
    else:
        raise DataError(f"{config_path}: unknown tokenizer kind {kind!r}", fix="re-save the tokenizer")
    for field in ("vocab_size", "bos_id", "eos_id", "pad_id"):
        if field in config and getattr(tokenizer, field) != config[field]:
            raise DataError(
                f"{config_path} says {field}={config[field]} but the rebuilt tokenizer has {getattr(tokenizer, field)}",
                fix="the folder's files are inconsistent; re-save the tokenizer",
            )
    return tokenizer
