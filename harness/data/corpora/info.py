"""What a corpus holds: documents, characters and (with a tokenizer) tokens per split."""

from __future__ import annotations

from collections import Counter
from typing import Any

from harness.data.corpora.base import Corpus


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
    info["top_tokens"] = [{"id": i, "text": tokenizer.decode([i]), "count": n} for i, n in counts.most_common(top_k)]
    return info
