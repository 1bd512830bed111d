"""The rows a training run learns from: packed text, or one image per row for ``image:`` corpora,
and the config checks an image corpus needs before a model is built."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from harness.config import Config
from harness.data import get_packed
from harness.data.images import IMAGE_SPLITS, get_image_dataset, is_image_spec, parse_image_spec
from harness.errors import ConfigError
from harness.models import family_class


@dataclass(frozen=True)
class ImageRows:
    """One image per row: ``input_ids`` (N, H*W*ch) pixel levels, ``attention_mask`` all ones."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor


def resolve_image_config(cfg: Config) -> Config:
    """Fill in what an ``image:`` corpus determines and check what it constrains; returns ``cfg`` itself
    for a text corpus, else a copy with ``data.tokenizer`` ``pixels`` -> ``pixels:LEVELS`` and
    ``model.image_shape`` ``HxWxC``.

    Raises :class:`harness.errors.ConfigError` unless ``seq_len == H*W*ch``, both splits are the
    dataset's, the tokenizer is ``pixels`` (of the dataset's levels), a given ``model.image_shape``
    matches, and the family's own check passes (the ARM needs ``model.start_token``: without it the
    first pixel would go unscored and bits/dim would not cover every dimension).
    """

    if not is_image_spec(cfg.data.corpus):
        return cfg
    d, m = cfg.data, cfg.model
    for key in ("train_split", "valid_split"):
        if getattr(d, key) not in IMAGE_SPLITS:
            raise ConfigError(
                f"data.{key}={getattr(d, key)!r}: image datasets have the splits {', '.join(IMAGE_SPLITS)}",
                fix=f"set data.{key} to one of them (train for training, test for validation)",
            )
    ds = get_image_dataset(parse_image_spec(cfg.data.corpus).with_split(d.train_split))
    if d.seq_len != ds.seq_len:
        raise ConfigError(
            f"data.seq_len={d.seq_len} but {cfg.data.corpus} images are {ds.height}x{ds.width}x{ds.channels} "
            f"= {ds.seq_len} tokens (one image per row)",
            fix=f"set data.seq_len={ds.seq_len}",
        )
    kind, _, levels = d.tokenizer.partition(":")
    if kind != "pixels" or (levels and levels != str(ds.levels)):
        raise ConfigError(
            f"data.tokenizer={d.tokenizer!r} does not fit {cfg.data.corpus} ({ds.levels} levels)",
            fix="set data.tokenizer=pixels (the levels come from the dataset)",
        )
    shape = f"{ds.height}x{ds.width}x{ds.channels}"
    if m.image_shape and m.image_shape != shape:
        raise ConfigError(
            f"model.image_shape={m.image_shape!r} but {cfg.data.corpus} images are {shape}",
            fix="leave model.image_shape empty: training fills it in",
        )
    family_class(m.family).check_image_config(m)
    return replace(cfg, data=replace(d, tokenizer=f"pixels:{ds.levels}"), model=replace(m, image_shape=shape))


def load_text_data(cfg: Config, tokenizer, corpus):
    """Pack the train and validation splits of the corpus ``corpus`` (from :func:`harness.data.get_corpus`)
    with ``tokenizer`` as ``cfg.data`` says. Returns (train, valid) Packed."""

    d = cfg.data
    kw = dict(
        tokenizer=tokenizer, seq_len=d.seq_len, wrap=d.wrap, eos_between_docs=d.eos_between_docs, remainder=d.remainder
    )
    return get_packed(corpus, d.train_split, **kw), get_packed(corpus, d.valid_split, **kw)


def load_training_data(cfg: Config, tokenizer, corpus=None):
    """(train, valid) rows with ``.input_ids``/``.attention_mask``: packed text, or one image per row.

    For ``image:`` corpora ``data.train_split``/``data.valid_split`` are the dataset's own splits
    (``train``/``test``); ``cfg`` must have been through :func:`resolve_image_config`.
    """

    if not is_image_spec(cfg.data.corpus):
        return load_text_data(cfg, tokenizer, corpus)
    image = parse_image_spec(cfg.data.corpus)

    def rows(split: str) -> ImageRows:
        ds = get_image_dataset(image.with_split(split))
        if ds.levels != tokenizer.vocab_size:
            raise ConfigError(
                f"{ds.spec} has {ds.levels} levels but the tokenizer {tokenizer.spec!r} has {tokenizer.vocab_size}"
            )
        return ImageRows(ds.tokens, torch.ones_like(ds.tokens))

    return rows(cfg.data.train_split), rows(cfg.data.valid_split)
