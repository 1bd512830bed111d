"""Turn tokenized documents into fixed-length rows, with the packing protocol recorded.

Two layouts (as in MDLM's ``get_dataset``):

* ``wrap=True`` (MDLM wrapping). Documents are concatenated in order, each followed by EOS when
  ``eos_between_docs`` (MDLM/Prime code: True; DUO/BD3 zero-shot practice: False). The stream is
  cut into chunks of ``seq_len - 2`` tokens and every chunk becomes ``[BOS] chunk [EOS]``. The
  final partial chunk is dropped (``remainder="drop"``, MDLM) or padded with PAD after its EOS
  and masked out (``remainder="pad"``). Unlike MDLM's code, which concatenates per ``map`` batch
  of 1000 documents and drops a remainder per batch (and per worker), the concatenation here is
  global, so the rows never depend on a batch size or a worker count: at most one partial chunk
  exists.
* ``wrap=False``: one document per row, ``[BOS] doc [EOS]`` then PAD up to ``seq_len``. A
  document longer than ``seq_len - 2`` is truncated to its first ``seq_len - 2`` tokens and still
  ends in EOS (as HF truncation with special tokens does in MDLM's unwrapped datasets); the
  number of such documents and of cut tokens is recorded. ``eos_between_docs`` and
  ``remainder`` do not apply and are recorded as None.

In both layouts ``attention_mask`` is 1 on BOS, EOS and document tokens and 0 on padding.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from harness.data.corpora import Corpus, get_corpus, parse_corpus_split
from harness.data.tokenizers import Tokenizer, get_tokenizer
from harness.errors import DataError

REMAINDER_POLICIES = ("drop", "pad")


@dataclass(frozen=True, eq=False)
class Packed:
    """Rows ready for a model. ``input_ids``/``attention_mask``: int64 ``(N, L)``; ``protocol``:
    every packing choice and count, copied into result records."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    protocol: dict[str, Any]

    @property
    def rows(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def seq_len(self) -> int:
        return int(self.input_ids.shape[1])


def pack(
    docs_ids: list[list[int]],
    *,
    seq_len: int,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    wrap: bool = True,
    eos_between_docs: bool = True,
    remainder: str = "drop",
) -> Packed:
    """Pack tokenized documents into ``(N, seq_len)`` rows (see the module docstring)."""
    if remainder not in REMAINDER_POLICIES:
        raise DataError(f"unknown remainder policy {remainder!r}", fix="use 'drop' or 'pad'")
    if seq_len < 3:
        raise DataError(
            f"seq_len={seq_len} leaves no room for text between BOS and EOS",
            fix="use seq_len >= 3",
        )
    if wrap:
        ids, mask, counts = _pack_wrapped(docs_ids, seq_len, bos_id, eos_id, pad_id, eos_between_docs, remainder)
    else:
        ids, mask, counts = _pack_rows(docs_ids, seq_len, bos_id, eos_id, pad_id)
    if ids.shape[0] == 0:
        raise DataError(
            f"corpus split too small for seq_len={seq_len}: {counts['tokens_in']} tokens "
            f"in {len(docs_ids)} documents give no row",
            fix="lower --seq-len or use remainder='pad'",
        )
    protocol = {
        "wrap": wrap,
        "eos_between_docs": eos_between_docs if wrap else None,
        "remainder": remainder if wrap else None,
        "seq_len": seq_len,
        "bos_id": bos_id,
        "eos_id": eos_id,
        "pad_id": pad_id,
        "documents": len(docs_ids),
        **counts,
        "rows": int(ids.shape[0]),
        "tokens_out": int(mask.sum()),
    }
    return Packed(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), protocol=protocol)


def _pack_wrapped(docs_ids, seq_len, bos_id, eos_id, pad_id, eos_between_docs, remainder):
    pieces = []
    eos = np.array([eos_id], dtype=np.int64)
    for doc in docs_ids:
        pieces.append(np.asarray(doc, dtype=np.int64).reshape(-1))
        if eos_between_docs:
            pieces.append(eos)
    stream = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    chunk = seq_len - 2
    n_full, left = divmod(stream.size, chunk)
    body = stream[: n_full * chunk].reshape(n_full, chunk)
    ids = np.concatenate(
        [np.full((n_full, 1), bos_id, np.int64), body, np.full((n_full, 1), eos_id, np.int64)],
        axis=1,
    )
    mask = np.ones_like(ids)
    if remainder == "pad" and left:
        last = np.full((1, seq_len), pad_id, dtype=np.int64)
        last[0, 0] = bos_id
        last[0, 1 : 1 + left] = stream[n_full * chunk :]
        last[0, 1 + left] = eos_id
        last_mask = np.zeros((1, seq_len), dtype=np.int64)
        last_mask[0, : left + 2] = 1
        ids = np.concatenate([ids, last])
        mask = np.concatenate([mask, last_mask])
    counts = {
        "document_tokens": int(sum(len(d) for d in docs_ids)),
        "tokens_in": int(stream.size),
        "tokens_dropped": int(left) if remainder == "drop" else 0,
        "truncated_docs": 0,
        "padded_rows": int(remainder == "pad" and left > 0),
    }
    return ids, mask, counts


def _pack_rows(docs_ids, seq_len, bos_id, eos_id, pad_id):
    room = seq_len - 2
    ids = np.full((len(docs_ids), seq_len), pad_id, dtype=np.int64)
    mask = np.zeros((len(docs_ids), seq_len), dtype=np.int64)
    truncated = dropped = 0
    for row, doc in enumerate(docs_ids):
        doc = np.asarray(doc, dtype=np.int64).reshape(-1)
        if doc.size > room:
            truncated += 1
            dropped += doc.size - room
            doc = doc[:room]
        ids[row, 0] = bos_id
        ids[row, 1 : 1 + doc.size] = doc
        ids[row, 1 + doc.size] = eos_id
        mask[row, : doc.size + 2] = 1
    total = int(sum(len(d) for d in docs_ids))
    counts = {
        "document_tokens": total,
        "tokens_in": total,
        "tokens_dropped": int(dropped),
        "truncated_docs": truncated,
        "padded_rows": int((mask == 0).any(axis=1).sum()),
    }
    return ids, mask, counts


def tokenize_corpus(corpus: Corpus, split: str, tokenizer: Tokenizer) -> list[list[int]]:
    """Token ids of every document of ``split`` (no special ids)."""
    return tokenizer.encode_batch(corpus.documents(split))


def get_packed(
    corpus_spec: str | Corpus,
    split: str,
    tokenizer: Tokenizer | str,
    *,
    seq_len: int,
    wrap: bool = True,
    eos_between_docs: bool = True,
    remainder: str = "drop",
) -> Packed:
    """Load, tokenize and pack one split; the protocol also records corpus and tokenizer.

    ``corpus_spec`` may carry the split (``wiki-embedded:validation``); it must then agree with
    ``split``.
    """
    if isinstance(corpus_spec, Corpus):
        corpus = corpus_spec
    else:
        base, named = parse_corpus_split(corpus_spec, split)
        if named != split:
            raise DataError(
                f"corpus spec {corpus_spec!r} names split {named!r} but split={split!r} was asked",
                fix="give the split once",
            )
        corpus = get_corpus(base)
    if isinstance(tokenizer, str):
        tokenizer = get_tokenizer(tokenizer)
    packed = pack(
        tokenize_corpus(corpus, split, tokenizer),
        seq_len=seq_len,
        bos_id=tokenizer.bos_id,
        eos_id=tokenizer.eos_id,
        pad_id=tokenizer.pad_id,
        wrap=wrap,
        eos_between_docs=eos_between_docs,
        remainder=remainder,
    )
    source = {
        "corpus": corpus.spec,
        "corpus_sha256": corpus.sha256,
        "split": split,
        "tokenizer": tokenizer.spec,
        "vocab_size": tokenizer.vocab_size,
    }
    return replace(packed, protocol={**source, **packed.protocol})
