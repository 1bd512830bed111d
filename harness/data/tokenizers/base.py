"""The tokenizer interface every kind implements, and the registry of kinds.

See :mod:`harness.data.tokenizers` for the kinds and the conventions they share.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import yaml

from harness.errors import DataError
from harness.io import atomic_write_text
from harness.registry import Registry

if TYPE_CHECKING:
    from harness.data.corpora import Corpus

ENDOFTEXT = "<|endoftext|>"
CONFIG_FILE = "tokenizer.yaml"


class Tokenizer(ABC):
    """Text <-> ids. See the module docstring for the conventions every kind follows."""

    kind: ClassVar[str]
    mask_appended: ClassVar[bool] = True
    """Diffusion models append a mask id ``vocab_size`` beyond the vocabulary."""

    def __init__(self, *, spec: str, vocab_size: int, bos_id: int | None, eos_id: int | None, pad_id: int | None):
        self.spec = spec
        self.vocab_size = vocab_size
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.pad_id = pad_id

    @property
    def mask_id(self) -> int:
        """The id a masked diffusion model uses for the mask: one past the vocabulary."""
        return self.vocab_size

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Ids of ``text``; no special ids added."""

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """``[encode(t) for t in texts]`` (kinds with a faster batch path override it)."""
        return [self.encode(t) for t in texts]

    def decode(self, ids: list[int]) -> str:
        """Text of ``ids``; specials are rendered as text, out-of-range ids are an error."""
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            hint = " (the mask id: unmask the sequence first)" if bad[0] == self.mask_id else ""
            raise DataError(
                f"cannot decode id {bad[0]} with tokenizer {self.spec!r}: valid ids are 0..{self.vocab_size - 1}{hint}",
                fix="decode only ids the tokenizer produced",
            )
        return self._decode(ids)

    @abstractmethod
    def _decode(self, ids: list[int]) -> str: ...

    def config(self) -> dict[str, Any]:
        """What ``tokenizer.yaml`` records."""
        return {
            "spec": self.spec,
            "kind": self.kind,
            "vocab_size": self.vocab_size,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
            "pad_id": self.pad_id,
            "mask_appended": self.mask_appended,
            "mask_id": self.mask_id,
        }

    def save(self, directory: str | Path) -> None:
        """Write ``tokenizer.yaml`` and the files :func:`load_tokenizer` needs to ``directory``."""

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self._save_files(directory)
        atomic_write_text(directory / CONFIG_FILE, yaml.safe_dump(self.config(), sort_keys=False))

    def _save_files(self, directory: Path) -> None:  # noqa: B027 (an optional hook, empty by default)
        """Extra files needed to rebuild offline (none by default)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(spec={self.spec!r}, vocab_size={self.vocab_size})"


TOKENIZER_KINDS: Registry[Callable[[str, Corpus | None], Tokenizer]] = Registry("tokenizer kind")


def get_tokenizer(spec: str, *, corpus: Corpus | None = None) -> Tokenizer:
    """Build the tokenizer named by ``spec``. ``corpus`` only matters for ``bpe:V`` (training)."""
    kind, _, arg = spec.partition(":")
    return TOKENIZER_KINDS.get(kind)(arg, corpus)


def no_arg(kind: str, arg: str) -> None:
    """Refuse an argument to a kind that takes none (``bytes:x``)."""
    if arg:
        raise DataError(f"tokenizer {kind!r} takes no argument, got {kind}:{arg}", fix=f"use {kind!r}")
