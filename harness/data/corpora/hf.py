"""``hf:NAME[:CONFIG]:SPLIT[#FIELD]``: a Hugging Face dataset.

Loaded with ``datasets.load_dataset`` (needs the network or the HF cache: with
``HF_DATASETS_OFFLINE``/``HF_HUB_OFFLINE`` set, the cache alone, and a dataset that is not there is
refused with :class:`~harness.errors.OfflineError` naming ``primebench prefetch``). The
corpus has one split, named ``SPLIT``. The text column is ``FIELD`` if given, else ``text``, else
the first string column. Documents are kept as they are (no detokenizer).
"""

from __future__ import annotations

from harness.data.corpora.base import CORPUS_KINDS, Corpus, make_corpus, split_hf_body
from harness.errors import DataError, OfflineError
from harness.offline import hf_offline, hub_reachable, hub_unreachable_reason, is_network_error, offline_mode


@CORPUS_KINDS.register("hf")
def _load_hf(arg: str) -> Corpus:
    body, _, field = arg.partition("#")
    parts = split_hf_body(body)
    if len(parts) not in (2, 3) or not all(parts):
        raise DataError(
            f"bad Hugging Face corpus spec 'hf:{arg}'",
            fix="use hf:NAME:SPLIT or hf:NAME:CONFIG:SPLIT, optionally with #FIELD",
        )
    name, config, split = (parts[0], None, parts[1]) if len(parts) == 2 else parts
    offline_fix = "connect to the network, or save the text locally and use text:PATH (.jsonl)"
    offline = hf_offline()
    if not offline and not hub_reachable():  # fail now rather than after the library's retries
        raise OfflineError(
            f"corpus 'hf:{arg}' needs the Hugging Face hub, which cannot be reached ({hub_unreachable_reason()})",
            fix=offline_fix + "; with a cached copy, set HF_DATASETS_OFFLINE=1",
        )
    try:
        # deferred: the HF datasets library is optional and slow to import
        import datasets
    except ImportError as exc:
        raise DataError(f"corpus 'hf:{arg}' needs the datasets package", fix="pip install datasets") from exc
    try:
        if offline:  # the switches are on: the datasets cache alone (filled by `primebench prefetch`)
            with offline_mode():
                dataset = datasets.load_dataset(name, config, split=split)
        else:
            dataset = datasets.load_dataset(name, config, split=split)
    except Exception as exc:  # noqa: BLE001 - turned into a user-facing error either way
        if offline:
            raise OfflineError(
                f"corpus 'hf:{arg}' is not in the datasets cache, and reading the hub needs the network "
                "(HF_HUB_OFFLINE/HF_DATASETS_OFFLINE is set)",
                fix=f"run `primebench prefetch hf:{arg}` where the hub can be reached; or {offline_fix}",
            ) from None
        if is_network_error(exc):
            raise OfflineError(f"corpus 'hf:{arg}' could not be downloaded: {exc}", fix=offline_fix) from exc
        raise DataError(
            f"could not load Hugging Face dataset 'hf:{arg}': {exc}",
            fix="check the dataset name, config and split",
        ) from exc
    columns = list(dataset.column_names)
    if field:
        if field not in columns:
            raise DataError(f"dataset 'hf:{body}' has no column {field!r}", fix=f"columns: {columns}")
    elif "text" in columns:
        field = "text"
    else:
        string_columns = [
            c for c in columns if getattr(dataset.features[c], "dtype", None) in ("string", "large_string")
        ]
        if not string_columns:
            raise DataError(f"dataset 'hf:{body}' has no string column", fix=f"columns: {columns}")
        field = string_columns[0]
    docs = [str(x) for x in dataset[field]]
    spec = f"hf:{body}#{field}"
    return make_corpus(spec, spec, {split: docs})


#: MDLM's ``openwebtext-split``: the hub's single train split, the last 100k documents held out.
OWT_SOURCE = "Skylion007/openwebtext:train"
OWT_HOLDOUT = 100_000


@CORPUS_KINDS.register("openwebtext")
def _load_openwebtext(arg: str) -> Corpus:
    """``openwebtext``: OpenWebText as MDLM splits it, train = train[:-100000] and validation = the
    last 100k documents (``load_dataset('openwebtext', split='train[-100000:]')``). Needs the network."""
    if arg:
        raise DataError(
            f"corpus 'openwebtext:{arg}' takes no argument", fix="use openwebtext (splits train and validation)"
        )
    docs = _load_hf(OWT_SOURCE).documents("train")
    if len(docs) <= OWT_HOLDOUT:
        raise DataError(
            f"OpenWebText has only {len(docs)} documents, not more than the {OWT_HOLDOUT} held out",
            fix="check the dataset copy (the hub version has 8,013,769 documents)",
        )
    return make_corpus("openwebtext", "openwebtext", {"train": docs[:-OWT_HOLDOUT], "validation": docs[-OWT_HOLDOUT:]})
