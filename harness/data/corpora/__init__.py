"""Text corpora: named collections of documents with fixed splits.

A corpus spec names a kind and its argument; ``get_corpus(spec)`` builds a :class:`Corpus`. Kinds,
one module each:

``wiki-embedded`` (:mod:`~harness.data.corpora.wiki`)
    The Wikipedia articles shipped inside gensim's test data; splits ``train``/``validation``.
``text:PATH`` (:mod:`~harness.data.corpora.text`)
    A local ``.txt`` or ``.jsonl`` file; splits ``all``, ``train``, ``validation``.
``hf:NAME[:CONFIG]:SPLIT[#FIELD]`` (:mod:`~harness.data.corpora.hf`)
    A Hugging Face dataset (needs the network or the HF cache); one split, ``SPLIT``.

The type, the hash splits and the registry are in :mod:`~harness.data.corpora.base`. Call sites
that take ``CORPUS[:SPLIT]`` use :func:`parse_corpus_split`.
"""

from __future__ import annotations

from harness.data.corpora import hf, text, wiki  # noqa: F401 - each registers its kind
from harness.data.corpora.base import (
    CORPUS_KINDS,
    SPLIT_NAMES,
    VALIDATION_FRACTION,
    Corpus,
    get_corpus,
    hash_split,
    make_corpus,
    parse_corpus_split,
    split_hf_body,
    stable_unit,
)
from harness.data.corpora.info import corpus_info
from harness.data.corpora.wiki import clean_wiki_text

__all__ = [
    "CORPUS_KINDS",
    "SPLIT_NAMES",
    "VALIDATION_FRACTION",
    "Corpus",
    "clean_wiki_text",
    "corpus_info",
    "get_corpus",
    "hash_split",
    "make_corpus",
    "parse_corpus_split",
    "split_hf_body",
    "stable_unit",
]
