"""Zero-shot evaluation sets of the MDLM line of work: where each is loaded from and how its text
is normalised.

:func:`harness.data.datasets.resolve_dataset` turns a ``--data`` spec into a dataset; the preset
forms it accepts are loaded here:

``PRESET``
    One of :data:`ZEROSHOT_PRESETS` (``lambada``, ``wikitext2``, ``wikitext103``, ``ptb``,
    ``lm1b``, ``ag_news``, ``pubmed``, ``arxiv``), loaded from Hugging Face through the ``hf:``
    corpus kind, with the dataset, config, split and text field that MDLM's ``get_dataset``
    uses. The split is the preset's (``default_split`` is ignored): ``test`` for LM1B, AG News
    and LAMBADA, ``validation`` for the others. Needs the network (or the HF cache); offline it
    raises :class:`~harness.errors.OfflineError`. ``ptb``, ``lm1b`` and the scientific-papers
    sets were script datasets on the Hub (``trust_remote_code``); a ``datasets`` release that no
    longer runs scripts cannot load them, so use a local copy.
``PRESET@PATH``
    A local copy read with the ``text:`` reader (``.txt``: documents separated by blank lines;
    ``.jsonl``: a ``text`` field per line), every document (split ``all``), then the preset's
    detokenizer. To reproduce the Hub's document boundaries export one row per ``.jsonl`` line:
    WikiText rows are single lines (headings and blank rows included) and MDLM treats each row
    as a document; LAMBADA is OpenAI's ``lambada_test.jsonl`` as it is. The ``.txt`` reader
    strips each document, which changes how a document-final `` . `` is detokenized (the
    WikiText rules need the space after it), so ``.jsonl`` is the faithful form.

EOS between documents. MDLM's and MDM-Prime's code append EOS after every document (sentence,
for PTB and LM1B) before wrapping into 1024-token rows of ``[BOS] chunk [EOS]``, so every preset
defaults to ``eos_between_docs=True``. DUO (paper App. C.6) and the BD3 zero-shot scripts that
the MDLM authors point to (``data.insert_valid_eos=False``) wrap without EOS between documents:
pass ``--no-eos-between-docs`` to compare with those numbers. The choice matters most for PTB and
LM1B, whose documents are single short sentences, so EOS is a large share of their tokens; it
changes both what is predicted and the token count that divides the NLL.

Packing itself (wrap length, dropping the remainder) is the caller's, via
:func:`harness.data.packing.get_packed`. MDLM groups per ``datasets.map`` batch of 1000 rows and
drops a remainder per batch; we pack the whole split once, so small sets keep more tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.data.corpora import Corpus, get_corpus, make_corpus, parse_corpus_split
from harness.data.detokenizers import DETOKENIZERS, get_detokenizer
from harness.errors import DataError, InputError, OfflineError
from harness.registry import Registry

LOCAL_SPLIT = "all"


@dataclass(frozen=True)
class ZeroShotPreset:
    """One zero-shot set: where MDLM loads it from and how its text is normalised."""

    name: str
    hf_name: str  # Hugging Face dataset id
    config: str | None  # dataset config (None: the dataset's default)
    split: str
    field: str  # the text column
    detokenizer: str  # a name in harness.data.detokenizers.DETOKENIZERS
    description: str
    eos_between_docs: bool = True  # MDLM/Prime convention; DUO/BD3 use False

    def __post_init__(self) -> None:
        if self.detokenizer not in DETOKENIZERS:
            raise InputError(f"preset {self.name!r}: unknown detokenizer {self.detokenizer!r}")

    @property
    def hf_spec(self) -> str:
        """The ``hf:`` corpus spec that loads this set."""
        config = f":{self.config}" if self.config else ""
        return f"hf:{self.hf_name}{config}:{self.split}#{self.field}"

    def local_form(self) -> str:
        return f"{self.name}@PATH"


_PRESETS = (
    ZeroShotPreset(
        name="lambada",
        hf_name="EleutherAI/lambada_openai",
        config="default",
        split="test",
        field="text",
        detokenizer="lambada",
        description="OpenAI's LAMBADA test set (5,153 book passages), scored as wrapped-text "
        "perplexity, not last-word accuracy",
    ),
    ZeroShotPreset(
        name="wikitext2",
        hf_name="wikitext",
        config="wikitext-2-raw-v1",
        split="validation",
        field="text",
        detokenizer="wikitext",
        description="WikiText-2 (raw) validation; one row per line, each row a document",
    ),
    ZeroShotPreset(
        name="wikitext103",
        hf_name="wikitext",
        config="wikitext-103-raw-v1",
        split="validation",
        field="text",
        detokenizer="wikitext",
        description="WikiText-103 (raw) validation; the same articles as WikiText-2's",
    ),
    ZeroShotPreset(
        name="ptb",
        hf_name="ptb_text_only",
        config=None,
        split="validation",
        field="sentence",
        detokenizer="ptb",
        description="Penn Treebank (Mikolov's text-only version) validation; one sentence per document",
    ),
    ZeroShotPreset(
        name="lm1b",
        hf_name="lm1b",
        config=None,
        split="test",
        field="text",
        detokenizer="lm1b",
        description="One Billion Word benchmark, test split; one sentence per document",
    ),
    ZeroShotPreset(
        name="ag_news",
        hf_name="ag_news",
        config=None,
        split="test",
        field="text",
        detokenizer="none",
        description="AG News test split; MDLM's code applies no detokenizer (DUO App. C.6 "
        "says WikiText + LM1B detokenizers)",
    ),
    ZeroShotPreset(
        name="pubmed",
        hf_name="scientific_papers",
        config="pubmed",
        split="validation",
        field="article",
        detokenizer="scientific_papers",
        description="Scientific papers, PubMed articles, validation",
    ),
    ZeroShotPreset(
        name="arxiv",
        hf_name="scientific_papers",
        config="arxiv",
        split="validation",
        field="article",
        detokenizer="scientific_papers",
        description="Scientific papers, arXiv articles, validation",
    ),
)

ZEROSHOT_PRESETS: Registry[ZeroShotPreset] = Registry("zero-shot preset")
for _preset in _PRESETS:
    ZEROSHOT_PRESETS.register(_preset.name, _preset)
del _preset


def list_presets() -> list[ZeroShotPreset]:
    """Every preset, in the order of the MDLM zero-shot table (LAMBADA first)."""
    return list(_PRESETS)


def _detokenized(preset: ZeroShotPreset, docs: list[str]) -> list[str]:
    detokenize = get_detokenizer(preset.detokenizer)
    return [detokenize(doc) for doc in docs]


def load_local(preset: ZeroShotPreset, path: str) -> Corpus:
    """``PRESET@PATH``: every document of a local ``.txt``/``.jsonl`` copy, detokenized."""
    usage = (
        f"{preset.name}@/path/to/file.txt (documents separated by blank lines) or .jsonl "
        "(one JSON object with a 'text' field per line)"
    )
    if not path:
        raise DataError(f"dataset spec '{preset.name}@' has no path", fix=f"use {usage}")
    file = Path(path).expanduser()
    if not file.is_file():
        base, split = parse_corpus_split(path, "")
        if split and Path(base).expanduser().is_file():
            raise DataError(
                f"dataset spec '{preset.name}@{path}' names split {split!r}; a local copy of a "
                f"zero-shot set is used whole (split {LOCAL_SPLIT!r})",
                fix=f"use {preset.name}@{base}",
            )
        raise DataError(
            f"local copy of zero-shot set {preset.name!r} not found: {file.resolve()}",
            fix=f"check the path, or use {usage}",
        )
    raw = get_corpus(f"text:{path}")
    resolved = file.resolve()
    return make_corpus(
        f"{preset.name}@{resolved.name}",
        f"{preset.name}@{resolved}",
        {LOCAL_SPLIT: _detokenized(preset, raw.documents(LOCAL_SPLIT))},
    )


def load_online(preset: ZeroShotPreset) -> Corpus:
    """``PRESET``: the Hugging Face split MDLM uses, detokenized."""
    local = (
        f"save the {preset.field!r} column of {preset.hf_name}"
        f"{' (' + preset.config + ')' if preset.config else ''} split {preset.split!r} "
        f"as .jsonl (one {{\"text\": ...}} per document) and pass '{preset.local_form()}'"
    )
    try:
        raw = get_corpus(preset.hf_spec)
    except OfflineError as exc:
        raise OfflineError(
            f"zero-shot set {preset.name!r} is loaded from {preset.hf_spec} and needs the network: {exc.problem}",
            fix=f"connect to the network (unset HF_HUB_OFFLINE/HF_DATASETS_OFFLINE), or {local}",
        ) from exc
    except DataError as exc:
        raise DataError(
            f"zero-shot set {preset.name!r} could not be loaded from {preset.hf_spec}: {exc.problem}",
            fix=f"{local}" + (f" (loader said: {exc.fix})" if exc.fix else ""),
        ) from exc
    return make_corpus(
        preset.name,
        f"{preset.name}@{preset.hf_spec}",
        {preset.split: _detokenized(preset, raw.documents(preset.split))},
    )
