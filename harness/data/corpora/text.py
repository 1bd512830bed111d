"""``text:PATH``: a local file of documents.

``.txt``: documents are separated by one or more blank lines (whitespace-only lines count as
blank); each document is stripped of surrounding whitespace. ``.jsonl``: one JSON object per
non-empty line with a string ``text`` field (errors name the line number). Splits: ``all`` (every
document, file order) and a deterministic ~90/10 ``train``/``validation`` split by a SHA-256 hash
of the document index (validation is non-empty when the file has at least two documents).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness.data.corpora.base import CORPUS_KINDS, Corpus, hash_split, make_corpus, parse_corpus_split
from harness.errors import DataError


def _read_text_file(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not valid UTF-8 (byte {exc.start})", fix="re-encode the file as UTF-8") from exc


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
