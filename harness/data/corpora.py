"""Text corpora: named collections of documents with fixed splits.

A corpus spec names a kind and its argument; ``get_corpus(spec)`` builds a :class:`Corpus`:

``wiki-embedded``
    The Wikipedia articles shipped inside gensim's test data
    (``gensim/test/test_data/``
    ``enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2``),
    extracted with gensim's own ``extract_pages`` (main namespace only) and ``filter_wiki``.
    Redirects are skipped, ``'''``/``''`` marks stripped, runs of spaces inside a line collapsed,
    empty list items dropped, and runs of blank lines reduced to one so that paragraphs (and the
    ``==Heading==`` lines) stay separated by ``\\n\\n``. Articles under 200 characters are dropped.
    Split by article: ``validation`` holds the articles whose title hashes (SHA-256) into the
    lowest 10 % (never empty), ``train`` the rest. Measured with gensim 4.4.0:
    106 articles, 3,059,116 characters in all; ``train`` 98 articles, 2,730,778 characters
    (612,715 GPT-2 tokens); ``validation`` 8 articles, 328,338 characters (73,169 GPT-2 tokens).
    The extraction is cached as JSON under the cache dir, keyed by the SHA-256 of the gensim file
    and the extraction version, so later loads take well under a second and do not import gensim.

``text:PATH``
    A local file. ``.txt``: documents are separated by one or more blank lines (whitespace-only
    lines count as blank); each document is stripped of surrounding whitespace. ``.jsonl``: one
    JSON object per non-empty line with a string ``text`` field (errors name the line number).
    Splits: ``all`` (every document, file order) and a deterministic ~90/10 ``train``/
    ``validation`` split by a SHA-256 hash of the document index (validation is non-empty when
    the file has at least two documents).

``hf:NAME[:CONFIG]:SPLIT[#FIELD]``
    A Hugging Face dataset, loaded with ``datasets.load_dataset`` (needs the network or the HF
    cache; refused with :class:`OfflineError` when ``HF_DATASETS_OFFLINE``/``HF_HUB_OFFLINE`` is
    set). The corpus has one split, named ``SPLIT``. The text column is ``FIELD`` if given, else
    ``text``, else the first string column. Documents are kept as they are (no detokenizer).

Call sites that take ``CORPUS[:SPLIT]`` use :func:`parse_corpus_split`.
"""

from __future__ import annotations

import bz2
import hashlib
import importlib.util
import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

from harness.data.cache import atomic_write_text, cache_dir, file_sha256
from harness.errors import DataError, OfflineError
from harness.registry import Registry

SPLIT_NAMES = ("train", "validation", "test", "all")
VALIDATION_FRACTION = 0.1
MIN_ARTICLE_CHARS = 200
WIKI_EXTRACT_VERSION = 1  # bump when the cleaning below changes: invalidates the cache
WIKI_RELPATH = (
    "test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
)


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


def hash_split(
    keys: list[str], fraction: float = VALIDATION_FRACTION
) -> tuple[list[int], list[int]]:
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


# ---------------------------------------------------------------------------------------------
# Spec parsing and the registry of kinds


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
        parts = _split_hf_body(body)
        if len(parts) == 1:
            return f"hf:{body}:{default_split}{hash_}{field}", default_split
        return spec, parts[-1]
    match = re.fullmatch(r"(.+):(" + "|".join(SPLIT_NAMES) + r")", spec)
    if match:
        return match.group(1), match.group(2)
    return spec, default_split


def _split_hf_body(body: str) -> list[str]:
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


# ---------------------------------------------------------------------------------------------
# wiki-embedded


def _gensim_wiki_path() -> Path:
    spec = importlib.util.find_spec("gensim")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise DataError(
            "corpus 'wiki-embedded' needs the gensim package (its test data holds the articles)",
            fix="pip install gensim",
        )
    path = Path(list(spec.submodule_search_locations)[0]) / WIKI_RELPATH
    if not path.is_file():
        raise DataError(
            f"gensim is installed but its Wikipedia test file is missing: {path}",
            fix="reinstall gensim from a wheel (pip install --force-reinstall gensim)",
        )
    return path


_INLINE_SPACE = re.compile(r"[^\S\n]+")
_BLANK_RUNS = re.compile(r"\n{3,}")


def clean_wiki_text(text: str) -> str:
    """Strip bold/italic marks and normalise whitespace, keeping paragraphs (``\\n\\n``)."""
    text = text.replace("'''", "").replace("''", "")
    lines = []
    for line in text.split("\n"):
        line = _INLINE_SPACE.sub(" ", line).strip()
        if not line.strip("*#:; "):  # empty line or a list item whose content was filtered out
            line = ""
        lines.append(line)
    return _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip()


def _extract_wiki(path: Path) -> list[dict[str, str]]:
    from gensim.corpora.wikicorpus import extract_pages, filter_wiki

    articles = []
    with bz2.open(path, "rb") as handle:
        for title, raw, _page_id in extract_pages(handle, filter_namespaces=("0",)):
            if raw.lstrip().lower().startswith("#redirect"):
                continue
            text = clean_wiki_text(filter_wiki(raw))
            if len(text) >= MIN_ARTICLE_CHARS:
                articles.append({"title": title, "text": text})
    return articles


@CORPUS_KINDS.register("wiki-embedded")
def _load_wiki_embedded(arg: str) -> Corpus:
    if arg:
        raise DataError(
            f"corpus 'wiki-embedded' takes no argument, got {arg!r}",
            fix="use 'wiki-embedded' or 'wiki-embedded:train' / 'wiki-embedded:validation'",
        )
    source = _gensim_wiki_path()
    source_sha = file_sha256(source)
    cached = cache_dir("corpora") / f"wiki-embedded-v{WIKI_EXTRACT_VERSION}-{source_sha[:16]}.json"
    articles = None
    if cached.is_file():
        try:
            payload = json.loads(cached.read_text(encoding="utf-8"))
            if payload.get("source_sha256") == source_sha:
                articles = payload["articles"]
        except (OSError, ValueError, KeyError):
            articles = None  # a corrupt cache entry is rebuilt below
    if articles is None:
        articles = _extract_wiki(source)
        payload = {
            "source": str(source),
            "source_sha256": source_sha,
            "extract_version": WIKI_EXTRACT_VERSION,
            "articles": articles,
        }
        atomic_write_text(cached, json.dumps(payload, ensure_ascii=False))
    titles = [a["title"] for a in articles]
    train, validation = hash_split(titles)
    return make_corpus(
        "wiki-embedded",
        "wiki-embedded",
        {
            "train": [articles[i]["text"] for i in train],
            "validation": [articles[i]["text"] for i in validation],
        },
    )


# ---------------------------------------------------------------------------------------------
# text:PATH


def _read_text_file(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{path} is not valid UTF-8 (byte {exc.start})", fix="re-encode the file as UTF-8"
        ) from exc


def _read_txt(path: Path) -> list[str]:
    text = _read_text_file(path).replace("\r\n", "\n").replace("\r", "\n")
    blocks = re.split(r"\n(?:[^\S\n]*\n)+", text)
    return [block.strip() for block in blocks if block.strip()]


def _read_jsonl(path: Path) -> list[str]:
    docs = []
    for lineno, line in enumerate(_read_text_file(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(
                f"{path}: line {lineno} is not valid JSON ({exc.msg})",
                fix='write one JSON object per line, e.g. {"text": "..."}',
            ) from exc
        if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
            raise DataError(
                f"{path}: line {lineno} has no string 'text' field",
                fix='write one JSON object per line, e.g. {"text": "..."}',
            )
        docs.append(obj["text"])
    return docs


@CORPUS_KINDS.register("text")
def _load_text(arg: str) -> Corpus:
    if not arg:
        raise DataError("corpus spec 'text:' needs a path", fix="text:/path/to/file.txt or .jsonl")
    path = Path(arg).expanduser().resolve()
    if not path.is_file():
        base, split = parse_corpus_split(f"text:{arg}", "")
        fix = (
            f"{split!r} is a split: pass text:{base[5:]} and choose the split separately"
            if split and Path(base[5:]).expanduser().is_file()
            else "check the path after 'text:'"
        )
        raise DataError(f"text corpus file not found: {path}", fix=fix)
    suffix = path.suffix.lower()
    if suffix == ".txt":
        docs = _read_txt(path)
    elif suffix == ".jsonl":
        docs = _read_jsonl(path)
    else:
        raise DataError(
            f"text corpus {path} has suffix {suffix!r}; expected .txt or .jsonl",
            fix="rename it: .txt (documents separated by blank lines) or .jsonl ('text' field)",
        )
    if not docs:
        raise DataError(f"text corpus {path} has no documents", fix="check the file's contents")
    train, validation = hash_split([str(i) for i in range(len(docs))])
    return make_corpus(
        path.name,
        f"text:{path}",
        {
            "all": docs,
            "train": [docs[i] for i in train],
            "validation": [docs[i] for i in validation],
        },
    )


# ---------------------------------------------------------------------------------------------
# hf:NAME[:CONFIG]:SPLIT[#FIELD]


def env_flag(name: str) -> bool:
    """Whether an environment flag such as ``HF_HUB_OFFLINE`` is set to a true value."""
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def hf_offline() -> bool:
    """Whether the Hugging Face offline switches are on."""
    return env_flag("HF_HUB_OFFLINE") or env_flag("HF_DATASETS_OFFLINE")


def is_network_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or anything in its cause chain) looks like a failed connection."""
    seen = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        names = [cls.__name__ for cls in type(current).__mro__]
        if isinstance(current, (ConnectionError, TimeoutError)) or any(
            key in name for name in names for key in ("Connect", "Timeout", "Offline", "Resolution")
        ):
            return True
        current = current.__cause__ or current.__context__
    return False


@CORPUS_KINDS.register("hf")
def _load_hf(arg: str) -> Corpus:
    body, _, field = arg.partition("#")
    parts = _split_hf_body(body)
    if len(parts) not in (2, 3) or not all(parts):
        raise DataError(
            f"bad Hugging Face corpus spec 'hf:{arg}'",
            fix="use hf:NAME:SPLIT or hf:NAME:CONFIG:SPLIT, optionally with #FIELD",
        )
    name, config, split = (parts[0], None, parts[1]) if len(parts) == 2 else parts
    offline_fix = "connect to the network, or save the text locally and use text:PATH (.jsonl)"
    if hf_offline():
        raise OfflineError(
            f"corpus 'hf:{arg}' needs the network (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE is set)",
            fix=offline_fix,
        )
    try:
        import datasets
    except ImportError as exc:
        raise DataError(
            f"corpus 'hf:{arg}' needs the datasets package", fix="pip install datasets"
        ) from exc
    try:
        dataset = datasets.load_dataset(name, config, split=split)
    except Exception as exc:  # noqa: BLE001 - turned into a user-facing error either way
        if is_network_error(exc):
            raise OfflineError(
                f"corpus 'hf:{arg}' could not be downloaded: {exc}", fix=offline_fix
            ) from exc
        raise DataError(
            f"could not load Hugging Face dataset 'hf:{arg}': {exc}",
            fix="check the dataset name, config and split",
        ) from exc
    columns = list(dataset.column_names)
    if field:
        if field not in columns:
            raise DataError(
                f"dataset 'hf:{body}' has no column {field!r}", fix=f"columns: {columns}"
            )
    elif "text" in columns:
        field = "text"
    else:
        string_columns = [
            c
            for c in columns
            if getattr(dataset.features[c], "dtype", None) in ("string", "large_string")
        ]
        if not string_columns:
            raise DataError(f"dataset 'hf:{body}' has no string column", fix=f"columns: {columns}")
        field = string_columns[0]
    docs = [str(x) for x in dataset[field]]
    spec = f"hf:{body}#{field}"
    return make_corpus(spec, spec, {split: docs})


# ---------------------------------------------------------------------------------------------
# info


def corpus_info(corpus: Corpus, tokenizer: Any = None, *, top_k: int = 10) -> dict[str, Any]:
    """Documents and characters per split; with a tokenizer also tokens per split (no specials),
    its vocabulary size and the ``top_k`` most frequent tokens of the first split."""
    info = corpus.info()
    if tokenizer is None:
        return info
    info["tokenizer"] = tokenizer.spec
    info["vocab_size"] = tokenizer.vocab_size
    counts: Counter[int] = Counter()
    for index, (split, docs) in enumerate(corpus.splits.items()):
        ids = tokenizer.encode_batch(list(docs))
        info["splits"][split]["tokens"] = sum(len(x) for x in ids)
        chars = info["splits"][split]["characters"]
        info["splits"][split]["characters_per_token"] = (
            chars / info["splits"][split]["tokens"] if info["splits"][split]["tokens"] else None
        )
        if index == 0:
            for row in ids:
                counts.update(row)
    info["top_tokens"] = [
        {"id": i, "text": tokenizer.decode([i]), "count": n} for i, n in counts.most_common(top_k)
    ]
    return info
