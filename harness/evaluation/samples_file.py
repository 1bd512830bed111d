"""Samples made elsewhere, scored under our Gen PPL protocol: ``eval genppl --samples-file FILE``.

FILE is JSON lines, one sample per line, each an object with either

* ``"tokens"``: the sample's ids in the checkpoint's tokenizer (optionally ``"tokenizer"``: its
  spec, checked against the checkpoint's), or
* ``"text"``: the sample as text, encoded with the checkpoint's tokenizer (no special ids added).

When a line has both, the ids are used. The samples files that ``eval genppl --out`` writes are of
this form, so a run's own samples round-trip to the same metrics. Every malformed line is an error
that names the line.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from harness.errors import InputError

FIX = 'write one JSON object per line with "tokens" (ids in the checkpoint\'s tokenizer) or "text"'


def _ids_of(row: dict, where: str, tokenizer) -> tuple[list[int], str]:
    """One sample's ids and the form it was given in (``tokens`` or ``text``)."""
    if row.get("tokenizer") is not None and row["tokenizer"] != tokenizer.spec:
        raise InputError(
            f"{where} was tokenized with {row['tokenizer']!r}, the checkpoint uses {tokenizer.spec!r}",
            fix='give the samples as "text", or score them with a checkpoint of that tokenizer',
        )
    ids = row.get("tokens")
    if ids is not None:
        if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise InputError(f'{where}: "tokens" must be a list of integer ids', fix=FIX)
        bad = [t for t in ids if not 0 <= t < tokenizer.vocab_size]
        if bad:
            raise InputError(
                f"{where}: id {bad[0]} is outside the tokenizer {tokenizer.spec!r} (0..{tokenizer.vocab_size - 1})",
                fix='give the samples as "text", or score them with a checkpoint of their tokenizer',
            )
        return ids, "tokens"
    if not isinstance(row.get("text"), str):
        raise InputError(f'{where} has neither "tokens" nor "text"', fix=FIX)
    try:
        row["text"].encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate ("\ud800") that JSON lets through
        raise InputError(
            f'{where}: "text" holds {row["text"][exc.start]!r} at character {exc.start}, which is not a '
            "character (a lone UTF-16 surrogate) and cannot be encoded",
            fix="write the text as real UTF-8 (surrogates come in pairs)",
        ) from None
    return tokenizer.encode(row["text"]), "text"


def read_samples_file(path, tokenizer) -> tuple[list[list[int]], dict]:
    """``(ids per sample, provenance)``; ``provenance`` names the file, its sha256 and the line form."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"samples file {str(path)!r} does not exist", fix="pass the JSONL file of samples")
    raw = path.read_bytes()
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise InputError(f"samples file {str(path)!r} is not UTF-8 text ({exc.reason})", fix=FIX) from None
    samples, forms = [], set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path.name} line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where} is not JSON ({exc.msg})", fix=FIX) from None
        if not isinstance(row, dict):
            raise InputError(f"{where} is a JSON {type(row).__name__}, not an object", fix=FIX)
        ids, form = _ids_of(row, where, tokenizer)
        if not ids:
            raise InputError(f"{where} is an empty sample", fix="drop empty samples from the file")
        samples.append(ids)
        forms.add(form)
    if not samples:
        raise InputError(f"samples file {str(path)!r} has no samples", fix=FIX)
    provenance = {
        "file": path.name,
        "sha256": hashlib.sha256(raw).hexdigest(),
        "samples": len(samples),
        "given_as": sorted(forms),
        "tokenizer": tokenizer.spec,
    }
    return samples, provenance


__all__ = ["read_samples_file"]
