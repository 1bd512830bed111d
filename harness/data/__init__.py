"""Data: text corpora, tokenizers, packing into rows, ``--data`` specs, and images as pixel tokens.

Everything runs offline by default (corpora and tokenizer files ship inside installed packages);
``hf:`` specs are the only ones that need the network.

The names below are re-exported lazily (PEP 562), so ``from harness.data import get_corpus``
does not import torch; only packing and images need it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.lazy import lazy_exports

_EXPORTS = {
    "cache_dir": "cache",
    "CORPUS_KINDS": "corpora",
    "Corpus": "corpora",
    "corpus_info": "corpora",
    "get_corpus": "corpora",
    "parse_corpus_split": "corpora",
    "ResolvedDataset": "datasets",
    "resolve_dataset": "datasets",
    "TOKENIZER_KINDS": "tokenizers",
    "Tokenizer": "tokenizers",
    "get_tokenizer": "tokenizers",
    "load_tokenizer": "tokenizers",
    "Packed": "packing",
    "get_packed": "packing",
    "pack": "packing",
    "tokenize_corpus": "packing",
    "IMAGE_DATASETS": "images",
    "ImageSpec": "images",
    "ImageTokens": "images",
    "get_image_dataset": "images",
    "is_image_spec": "images",
    "parse_image_spec": "images",
    "to_images": "images",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from harness.data.cache import cache_dir
    from harness.data.corpora import (
        CORPUS_KINDS,
        Corpus,
        corpus_info,
        get_corpus,
        parse_corpus_split,
    )
    from harness.data.datasets import ResolvedDataset, resolve_dataset
    from harness.data.images import (
        IMAGE_DATASETS,
        ImageSpec,
        ImageTokens,
        get_image_dataset,
        is_image_spec,
        parse_image_spec,
        to_images,
    )
    from harness.data.packing import Packed, get_packed, pack, tokenize_corpus
    from harness.data.tokenizers import TOKENIZER_KINDS, Tokenizer, get_tokenizer, load_tokenizer


__getattr__, __dir__ = lazy_exports("harness.data", _EXPORTS, globals(), __all__)
