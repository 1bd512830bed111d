"""Offline lm-eval tasks built at runtime from the embedded Wikipedia text, and task loading.

Two local tasks, written as JSONL under ``cache_dir("lmeval", ...)`` and described to lm-eval as
inline config dicts with absolute data paths (relative ``data_files`` would resolve against the
working directory), loaded with ``TaskManager(include_defaults=False)`` so nothing is fetched:

``wiki_rolling``
    Rolling perplexity (``loglikelihood_rolling``) over the 8 ``wiki-embedded`` validation
    articles, one document per article; metrics ``word_perplexity``, ``byte_perplexity``,
    ``bits_per_byte`` (words and bytes of the article text, as lm-eval's wikitext task counts).
``wiki_lastword``
    A LAMBADA-style last-word task over the same articles. Passages, in article order: every text
    line of an article that is not a heading or a list item is split into sentences, whole
    consecutive sentences are packed greedily into windows of at most
    :data:`LASTWORD_MAX_WORDS` words, and a window of at least :data:`LASTWORD_MIN_WORDS` words
    whose last word is alphabetic becomes a passage (its closing punctuation dropped). The first
    :data:`LASTWORD_PER_ARTICLE` passages of each article are kept. Context = all but the last
    word, target = ``' ' + last word``; metrics ``perplexity`` and ``acc`` (greedy check).

Any other name is looked up in lm-eval's own task registry; those tasks read Hugging Face datasets
and need the network (or the HF cache). Offline they fail with an :class:`OfflineError` that names
the task and the local tasks.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.data.cache import cache_dir
from harness.data.corpora import get_corpus
from harness.errors import OfflineError, PrimebenchError
from harness.io import atomic_write_text, file_sha256
from harness.offline import (
    hf_cache_holds_datasets,
    hf_offline,
    hub_reachable,
    hub_unreachable_reason,
    is_network_error,
    offline_mode,
)

TASKS_VERSION = 1  # bump when a task's data or config changes: new cache folder, new hashes
LOCAL_TASKS = ("wiki_rolling", "wiki_lastword")
SOURCE = "wiki-embedded:validation"
LASTWORD_MIN_WORDS = 40
LASTWORD_MAX_WORDS = 120
LASTWORD_PER_ARTICLE = 25

_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_LAST_WORD = re.compile(r"(?P<context>.*\S)\s+(?P<word>[A-Za-z](?:[A-Za-z'-]*[A-Za-z])?)[.!?\"')\]]*", re.S)


@dataclass(frozen=True)
class LocalTask:
    """A local task's data file and its lm-eval config dict."""

    name: str
    path: Path
    sha256: str
    documents: int
    config: dict[str, Any]

    def protocol(self) -> dict[str, Any]:
        return {
            "source": SOURCE,
            "path": str(self.path),
            "sha256": self.sha256,
            "documents": self.documents,
            "version": TASKS_VERSION,
        }


def lastword_passages(
    articles: list[str],
    *,
    per_article: int = LASTWORD_PER_ARTICLE,
    min_words: int = LASTWORD_MIN_WORDS,
    max_words: int = LASTWORD_MAX_WORDS,
) -> list[dict[str, Any]]:
    """Deterministic last-word passages of ``articles`` (see the module docstring)."""
    out: list[dict[str, Any]] = []
    for a, article in enumerate(articles):
        kept = 0
        for line in article.split("\n"):
            line = line.strip()
            if not line or line.startswith(("=", "*", "#", ":", ";", "|", "{")):
                continue
            sentences = [s.strip() for s in _SENTENCE_BREAK.split(line) if s.strip()]
            i = 0
            while i < len(sentences) and kept < per_article:
                j, words = i, 0
                while j < len(sentences) and words + len(sentences[j].split()) <= max_words:
                    words += len(sentences[j].split())
                    j += 1
                if j == i:  # one sentence longer than max_words: skip it
                    i += 1
                    continue
                match = _LAST_WORD.fullmatch(" ".join(sentences[i:j]))
                if words >= min_words and match:
                    context, word = match["context"], match["word"]
                    out.append({"article": a, "context": context, "target": " " + word, "text": f"{context} {word}"})
                    kept += 1
                i = j
            if kept >= per_article:
                break
    return out


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        atomic_write_text(path, text)


def _dataset_kwargs(path: Path) -> dict[str, Any]:
    return {"data_files": {"test": str(path)}, "cache_dir": str(cache_dir("lmeval", "hf-datasets"))}


def _local_task(
    name: str,
    path: Path,
    *,
    output_type: str,
    doc_to_text: str,
    doc_to_target: str,
    metrics: list[tuple[str, str, bool]],
) -> dict[str, Any]:
    """An lm-eval task config over a local JSONL file (absolute path), no hub access.

    ``metrics``: (metric, aggregation, higher_is_better) triples.
    """
    return {
        "task": name,
        "dataset_path": "json",
        "dataset_kwargs": _dataset_kwargs(path),
        "output_type": output_type,
        "test_split": "test",
        "doc_to_text": doc_to_text,
        "doc_to_target": doc_to_target,
        "metric_list": [{"metric": m, "aggregation": a, "higher_is_better": h} for m, a, h in metrics],
        "metadata": {"version": TASKS_VERSION},
    }


def rolling_config(name: str, path: Path) -> dict[str, Any]:
    """lm-eval config of a rolling-perplexity task over a JSONL file with a ``text`` field per line."""
    return _local_task(
        name,
        path,
        output_type="loglikelihood_rolling",
        doc_to_text="",
        doc_to_target="text",
        metrics=[
            ("word_perplexity", "weighted_perplexity", False),
            ("byte_perplexity", "weighted_perplexity", False),
            ("bits_per_byte", "bits_per_byte", False),
        ],
    )


def lastword_config(name: str, path: Path) -> dict[str, Any]:
    """lm-eval config of a last-word task over a JSONL file with ``context`` and ``target`` fields."""
    return _local_task(
        name,
        path,
        output_type="loglikelihood",
        doc_to_text="context",
        doc_to_target="target",
        metrics=[("perplexity", "perplexity", False), ("acc", "mean", True)],
    )


def local_task(name: str) -> LocalTask:
    """Write (if needed) the data of local task ``name`` and return it with its config."""

    corpus = get_corpus("wiki-embedded")
    articles = corpus.documents("validation")
    folder = cache_dir("lmeval", f"v{TASKS_VERSION}-{corpus.sha256[:16]}")
    if name == "wiki_rolling":
        rows = [{"text": a} for a in articles]
        path = folder / "wiki_rolling.jsonl"
        config = rolling_config(name, path)
    elif name == "wiki_lastword":
        rows = lastword_passages(articles)
        path = folder / "wiki_lastword.jsonl"
        config = lastword_config(name, path)
    else:
        raise PrimebenchError(f"{name!r} is not a local task", fix=f"local tasks: {', '.join(LOCAL_TASKS)}")
    _write_jsonl(path, rows)
    return LocalTask(name=name, path=path, sha256=file_sha256(path), documents=len(rows), config=config)


def parse_tasks(spec: str | list[str]) -> list[str]:
    """``"a,b"`` or ``["a", "b"]`` -> ordered unique names; empty is an error."""
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[str] = []
    for n in (n.strip() for n in names):
        if n and n not in out:
            out.append(n)
    if not out:
        raise PrimebenchError("no task given", fix=f"pass --tasks, e.g. {','.join(LOCAL_TASKS)}")
    return out


def load_tasks(names: list[str]) -> tuple[dict[str, Any], dict[str, LocalTask]]:
    """Build lm-eval's task dict (``TaskManager.load``) for ``names``; return it and the local tasks.

    Local tasks need nothing but the installed packages. Registry tasks build a full TaskManager
    (it indexes lm-eval's task folders) and load their datasets here, so that a dataset that needs
    the network fails with an :class:`OfflineError` naming the task. With the hub switched off or not
    answering (:func:`harness.offline.hub_reachable`), lm-eval runs with the libraries offline, so a
    cached dataset loads and any other fails at once rather than after the libraries' retries; with
    nothing in the Hugging Face cache it fails before lm-eval even indexes its tasks.
    """

    remote = [n for n in names if n not in LOCAL_TASKS]
    switched_off = hf_offline()
    why = None
    if remote and (switched_off or not hub_reachable()):
        why = (
            "switched off (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE)"
            if switched_off
            else f"unreachable: {hub_unreachable_reason()}"
        )
    fix = f"use the local tasks ({', '.join(LOCAL_TASKS)}), or connect to the network" + (
        " and unset HF_HUB_OFFLINE/HF_DATASETS_OFFLINE" if switched_off else ""
    )
    if why and not hf_cache_holds_datasets():  # nothing could load: say so before lm-eval indexes its tasks
        for name in remote:
            close = difflib.get_close_matches(name, LOCAL_TASKS, n=1, cutoff=0.6)
            if close:
                raise PrimebenchError(
                    f"unknown task {name!r}", fix=f"did you mean {close[0]!r}? local tasks: {', '.join(LOCAL_TASKS)}"
                )
        several = len(remote) > 1
        raise OfflineError(
            f"task{'s' if several else ''} {', '.join(repr(n) for n in remote)} {'are' if several else 'is'} not "
            f"local: lm-eval's tasks read their datasets from the Hugging Face Hub, which is {why}, and the Hugging "
            "Face cache holds no dataset",
            fix=fix,
        )
    with offline_mode() if why else contextlib.nullcontext():  # cached datasets load; the rest fail at once
        return _load_tasks(names, remote, offline_why=why, offline_fix=fix)


def _load_tasks(
    names: list[str], remote: list[str], *, offline_why: str | None, offline_fix: str
) -> tuple[dict[str, Any], dict[str, LocalTask]]:
    # deferred: lm-eval is slow to import and only zero-shot runs need it
    from lm_eval.tasks import TaskManager

    local = {n: local_task(n) for n in names if n in LOCAL_TASKS}
    manager = TaskManager(include_defaults=bool(remote))
    if remote:
        known = set(manager.all_tasks)
        for name in remote:
            if name not in known:
                close = difflib.get_close_matches(name, [*LOCAL_TASKS, *known], n=3, cutoff=0.6)
                hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
                raise PrimebenchError(
                    f"unknown task {name!r}",
                    fix=f"{hint}local tasks: {', '.join(LOCAL_TASKS)}; or any lm-eval task name",
                )
    specs: list[Any] = []
    for name in names:
        spec = local[name].config if name in local else name
        try:
            loaded = manager.load([spec])
        except Exception as exc:  # noqa: BLE001 - a dataset that cannot be fetched becomes an OfflineError
            if name in local:
                raise
            if offline_why or is_network_error(exc):
                where = (
                    f"the Hugging Face Hub, which is {offline_why}, and it is not in the Hugging Face cache"
                    if offline_why
                    else "the Hugging Face Hub, which cannot be reached"
                )
                raise OfflineError(
                    f"task {name!r} reads its dataset from {where} "
                    f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})",
                    fix=offline_fix,
                ) from exc
            raise PrimebenchError(
                f"lm-eval could not load task {name!r}: {type(exc).__name__}: {exc}",
                fix="check the task name and its dataset",
            ) from exc
        specs.extend([*loaded["groups"].values()] if loaded["groups"] else [*loaded["tasks"].values()])
    return {"specs": specs, "manager": manager}, local


__all__ = [
    "LOCAL_TASKS",
    "LocalTask",
    "lastword_passages",
    "load_tasks",
    "local_task",
    "parse_tasks",
    "rolling_config",
    "lastword_config",
]
