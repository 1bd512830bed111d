"""``wiki-embedded``: the Wikipedia articles shipped inside gensim's test data.

The file is ``gensim/test/test_data/``
``enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2``, extracted with gensim's
own ``extract_pages`` (main namespace only) and ``filter_wiki``. Redirects are skipped,
``'''``/``''`` marks stripped, runs of spaces inside a line collapsed, empty list items dropped,
and runs of blank lines reduced to one so that paragraphs (and the ``==Heading==`` lines) stay
separated by ``\\n\\n``. Articles under 200 characters are dropped. Split by article: ``validation``
holds the articles whose title hashes (SHA-256) into the lowest 10 % (never empty), ``train`` the
rest. Measured with gensim 4.4.0: 106 articles, 3,059,116 characters in all; ``train`` 98
articles, 2,730,778 characters (612,715 GPT-2 tokens); ``validation`` 8 articles, 328,338
characters (73,169 GPT-2 tokens). The extraction is cached as JSON under the cache dir, keyed by
the SHA-256 of the gensim file and the extraction version, so later loads take well under a
second and do not import gensim.
"""

from __future__ import annotations

import bz2
import importlib.util
import json
import re
from pathlib import Path

from harness.data.cache import cache_dir
from harness.data.corpora.base import CORPUS_KINDS, Corpus, hash_split, make_corpus
from harness.errors import DataError
from harness.io import atomic_write_text, file_sha256

MIN_ARTICLE_CHARS = 200
WIKI_EXTRACT_VERSION = 1  # bump when the cleaning below changes: invalidates the cache
WIKI_RELPATH = "test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


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
    # deferred: gensim is needed only to extract a Wikipedia dump
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
