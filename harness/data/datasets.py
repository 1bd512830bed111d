"""One ``--data`` spec for every evaluation: a plain corpus or a zero-shot preset.

:func:`resolve_dataset` turns a spec into a :class:`ResolvedDataset`: a corpus whose documents
are already detokenized, the split to pack, and the packing convention the spec implies. Forms:

``PRESET`` and ``PRESET@PATH``
    A zero-shot set of the MDLM line of work, from the Hugging Face Hub or a local copy (see
    :mod:`harness.data.zeroshot`), detokenized as MDLM does, with its own split and
    ``eos_between_docs=True``.
``wiki-embedded[:SPLIT]``, ``text:PATH[:SPLIT]``, ``hf:NAME[:CONFIG]:SPLIT[#FIELD]``
    Plain corpora (see :mod:`harness.data.corpora`), passed through unchanged: no detokenizer,
    and no packing convention of their own (``eos_between_docs`` is ``None``, so the caller uses
    the checkpoint's data config).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.data.corpora import CORPUS_KINDS, Corpus, get_corpus, parse_corpus_split
from harness.data.zeroshot import LOCAL_SPLIT, ZEROSHOT_PRESETS, ZeroShotPreset, load_local, load_online
from harness.errors import DataError, PrimebenchError
from harness.registry import Registry

SPEC_FORMS = "PRESET, PRESET@PATH, wiki-embedded[:SPLIT], text:PATH[:SPLIT], hf:NAME[:CONFIG]:SPLIT[#FIELD]"


@dataclass(frozen=True)
class ResolvedDataset:
    """A resolved ``--data`` spec.

    ``corpus`` holds detokenized documents; pack ``split`` of it. ``name`` is the preset name
    (or the corpus name for plain specs), ``detokenizer`` the name of what was applied
    (``"none"`` for plain corpora). ``eos_between_docs`` is the preset's default packing
    convention, or ``None`` for plain corpora (use the checkpoint's data config).
    """

    name: str
    corpus: Corpus
    split: str
    detokenizer: str
    eos_between_docs: bool | None


def resolve_dataset(spec: str, default_split: str) -> ResolvedDataset:
    """Resolve a ``--data`` spec (see the module docstring for the forms).

    ``default_split`` is used only by plain corpus specs that name no split.
    """
    if not spec:
        raise DataError("empty dataset spec", fix=f"use one of the forms: {SPEC_FORMS}")
    kind = spec.partition(":")[0]
    if kind in CORPUS_KINDS:
        base, split = parse_corpus_split(spec, default_split)
        corpus = get_corpus(base)
        return ResolvedDataset(name=corpus.name, corpus=corpus, split=split, detokenizer="none", eos_between_docs=None)
    name, at, path = spec.partition("@")
    preset = _lookup_preset(name)
    if at:
        corpus = load_local(preset, path)
        split = LOCAL_SPLIT
    else:
        corpus = load_online(preset)
        split = preset.split
    return ResolvedDataset(
        name=preset.name,
        corpus=corpus,
        split=split,
        detokenizer=preset.detokenizer,
        eos_between_docs=preset.eos_between_docs,
    )


def _lookup_preset(name: str) -> ZeroShotPreset:
    """The preset ``name``; a typo gets did-you-mean against presets and corpus kinds."""
    key, colon, _ = name.partition(":")
    if key in ZEROSHOT_PRESETS:
        if colon:
            preset = ZEROSHOT_PRESETS.get(key)
            raise DataError(
                f"zero-shot preset {key!r} has a fixed split ({preset.split!r}); got {name!r}",
                fix=f"use {key!r} (or {key}@PATH for a local copy, which uses every document)",
            )
        return ZEROSHOT_PRESETS.get(key)
    if key in CORPUS_KINDS:  # e.g. "text@file.txt": the '@' form is for presets only
        raise DataError(
            f"dataset spec '{name}@...' puts '@' after the corpus kind {key!r}; 'PRESET@PATH' is for zero-shot presets",
            fix=f"write {key}:... for a plain corpus; spec forms: {SPEC_FORMS}",
        )
    known: Registry[str] = Registry("zero-shot preset or corpus kind")
    for known_name in [*ZEROSHOT_PRESETS.names(), *CORPUS_KINDS.names()]:
        known.register(known_name, known_name)
    try:
        known.get(key)
    except PrimebenchError as exc:
        raise PrimebenchError(exc.problem, fix=f"{exc.fix}; spec forms: {SPEC_FORMS}") from None
    raise AssertionError("unreachable: key is neither a preset nor a corpus kind")
