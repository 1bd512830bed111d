"""The corpus type, its deterministic splits, and the registry of corpus kinds.

A corpus spec names a kind and its argument (``KIND[:ARG]``); :func:`get_corpus` looks the kind up
in :data:`CORPUS_KINDS` and builds a :class:`Corpus`. Call sites that take ``CORPUS[:SPLIT]``
use :func:`parse_corpus_split`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from harness.errors import DataError
from harness.registry import Registry

SPLIT_NAMES = ("train", "validation", "test", "all")
VALIDATION_FRACTION = 0.1


@dataclass(frozen=True, eq=False)
class Corpus:
    """Documents per split. ``sha256`` identifies the content (split names and documents)."""

    name: str
    spec: str
    splits: Mapping[str, tuple[str, ...]]
    sha256: str

    def documents(self, split: str) -> list[str]:
        """The documents of ``split``; an unknown or empty split is an error."""
        if split not in self.splits:
            raise DataError(
                f"corpus {self.spec!r} has no split {split!r}",
                fix=f"use one of: {', '.join(self.splits)}",
            )
        docs = self.splits[split]
        if not docs:
            raise DataError(
                f"split {split!r} of corpus {self.spec!r} is empty",
                fix=f"use a non-empty split ({', '.join(s for s, d in self.splits.items() if d)})",
            )
        return list(docs)

    def info(self) -> dict[str, Any]:
        """Documents and characters per split."""
        return {
            "name": self.name,
            "spec": self.spec,
            "sha256": self.sha256,
            "splits": {
                split: {"documents": len(docs), "characters": sum(len(d) for d in docs)}
                for split, docs in self.splits.items()
            },
        }


def make_corpus(name: str, spec: str, splits: Mapping[str, list[str] | tuple[str, ...]]) -> Corpus:
    """Freeze ``splits`` and hash them into a :class:`Corpus`."""
    frozen = {split: tuple(docs) for split, docs in splits.items()}
    digest = hashlib.sha256()
    for split in sorted(frozen):
        docs = frozen[split]
        digest.update(f"{split}\0{len(docs)}\0".encode())
        for doc in docs:
            raw = doc.encode("utf-8")
            digest.update(len(raw).to_bytes(8, "little"))
            digest.update(raw)
    return Corpus(name=name, spec=spec, splits=MappingProxyType(frozen), sha256=digest.hexdigest())


def stable_unit(key: str) -> float:
    """A number in [0, 1) from the SHA-256 of ``key``: the same on every machine and version."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") / 2.0**64


def hash_split(keys: list[str], fraction: float = VALIDATION_FRACTION) -> tuple[list[int], list[int]]:
    """Indices ``(kept, held_out)`` with ``held_out`` = keys hashing below ``fraction``.

    Order is preserved. With two or more keys both parts are non-empty (the lowest-hashing key is
    held out if none is, the highest-hashing one kept if all are).
    """
    units = [stable_unit(k) for k in keys]
    held = {i for i, u in enumerate(units) if u < fraction}
    if len(keys) >= 2:
        if not held:
            held = {min(range(len(keys)), key=units.__getitem__)}
        if len(held) == len(keys):
            held.discard(max(range(len(keys)), key=units.__getitem__))
    kept = [i for i in range(len(keys)) if i not in held]
    return kept, sorted(held)


CORPUS_KINDS: Registry[Callable[[str], Corpus]] = Registry("corpus kind")


def parse_corpus_split(spec: str, default_split: str) -> tuple[str, str]:
    """Split ``CORPUS[:SPLIT]`` into ``(corpus_spec, split)``.

    A trailing ``:train``, ``:validation``, ``:test`` or ``:all`` is the split (so a path may
    contain ``:`` elsewhere); otherwise ``default_split``. ``hf:`` specs carry their split inside
    the corpus spec: ``hf:NAME:SPLIT`` -> ``(spec, SPLIT)``; a bare ``hf:NAME`` gets
    ``default_split`` appended.
    """
    if spec.startswith("hf:"):
        body, hash_, field = spec[3:].partition("#")
        parts = split_hf_body(body)
        if len(parts) == 1:
            return f"hf:{body}:{default_split}{hash_}{field}", default_split
        return spec, parts[-1]
    match = re.fullmatch(r"(.+):(" + "|".join(SPLIT_NAMES) + r")", spec)
    if match:
        return match.group(1), match.group(2)
    return spec, default_split


def split_hf_body(body: str) -> list[str]:
    """``NAME[:CONFIG]:SPLIT`` on ':' outside brackets, so slices like ``train[:1000]`` survive."""
    return re.split(r":(?![^\[]*\])", body)


def get_corpus(spec: str) -> Corpus:
    """Build the corpus named by ``spec`` (see the module docstring for the kinds)."""
    kind, _, arg = spec.partition(":")
    loader = CORPUS_KINDS.get(kind)
    if kind != "hf" and arg in SPLIT_NAMES:
        raise DataError(
            f"corpus spec {spec!r} includes a split",
            fix=f"pass {kind!r} and choose the split with documents({arg!r}) or parse_corpus_split",
        )
    return loader(arg)
