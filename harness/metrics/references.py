"""Reference rows for perplexity: the exact cross-entropy of smoothed unigram and bigram models.

A model's NLL means little without them: a context-free model fitted on the train split reaches the
unigram cross-entropy without any training, so a diffusion bound that sits at it says the network
has not learned to use context. Both references are fitted on the train split's packed rows (same
tokenizer, same packing as the scored data) and scored on exactly the tokens the model's NLL counts
(the same rows, the family's token convention), so they share its denominator.

* unigram, add-one (Laplace) smoothing over the C classes: p(c) = (n_c + 1) / (N + C);
* bigram, interpolated absolute discounting (discount d = 0.75) down to that unigram, within a row:
  p(b | a) = (max(n_ab - d, 0) + d T_a p(b)) / n_a, with T_a the number of distinct successors of
  a; a context never seen in training (n_a = 0), and the first position of a row (which has no
  predecessor in the row), take p(b). Summed over a row this is the exact NLL of a first-order
  Markov chain, the same kind of number as an ARM's.

Nothing here is estimated: the two numbers are exact given the train split (kind ``exact``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from harness.errors import InputError

#: the discount of the bigram's interpolated absolute discounting
BIGRAM_DISCOUNT = 0.75
SMOOTHING = {
    "unigram": "add-one (Laplace) over the C classes",
    "bigram": f"interpolated absolute discounting (d = {BIGRAM_DISCOUNT}) to the add-one unigram, within a row; "
    "a row's first position and unseen contexts take the unigram",
}
#: the message and the margin of the "no better than a unigram model" flag (nats/token)
NOT_LEARNED = "no better than a unigram model: it has not learned to use context"


@dataclass(frozen=True)
class NgramCounts:
    """Counts of a train split: unigram ``n`` (C,), context totals ``n_ctx`` (C,) and distinct
    successors ``succ`` (C,) of the bigram, and its pair counts as sorted keys a * C + b with counts."""

    vocab_size: int
    n: torch.Tensor
    n_ctx: torch.Tensor
    succ: torch.Tensor
    pair_keys: torch.Tensor
    pair_counts: torch.Tensor

    @property
    def tokens(self) -> int:
        return int(self.n.sum())


def fit_counts(ids: torch.Tensor, mask: torch.Tensor | None, *, vocab_size: int) -> NgramCounts:
    """Unigram and within-row bigram counts of the real tokens of ``ids`` (N, L)."""
    ids = ids.long()
    real = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise InputError(f"token ids outside [0, {vocab_size})")
    n = torch.bincount(ids[real], minlength=vocab_size).double()
    pair = real[:, :-1] & real[:, 1:]
    keys = ids[:, :-1][pair] * vocab_size + ids[:, 1:][pair]
    pair_keys, pair_counts = torch.unique(keys, sorted=True, return_counts=True)
    n_ctx = torch.bincount(ids[:, :-1][pair], minlength=vocab_size).double()
    succ = torch.bincount(pair_keys // vocab_size, minlength=vocab_size).double()
    return NgramCounts(vocab_size, n, n_ctx, succ, pair_keys, pair_counts.double())


def unigram_log_probs(counts: NgramCounts, x: torch.Tensor) -> torch.Tensor:
    """log p(x) of the add-one unigram, elementwise (float64)."""
    return torch.log((counts.n[x] + 1.0) / (counts.tokens + counts.vocab_size))


def bigram_log_probs(counts: NgramCounts, prev: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """log p(x | prev) of the discounted bigram, elementwise (float64); ``prev`` < 0: no context."""
    uni = torch.exp(unigram_log_probs(counts, x))
    has = prev >= 0
    a = prev.clamp_min(0)
    keys = a * counts.vocab_size + x
    pos = torch.searchsorted(counts.pair_keys, keys).clamp_max(max(len(counts.pair_keys) - 1, 0))
    found = (counts.pair_keys[pos] == keys) if len(counts.pair_keys) else torch.zeros_like(has)
    n_ab = torch.where(found, counts.pair_counts[pos] if len(counts.pair_counts) else 0.0, 0.0)
    n_a = counts.n_ctx[a]
    seen = has & (n_a > 0)
    d = BIGRAM_DISCOUNT
    p = torch.where(seen, ((n_ab - d).clamp_min(0) + d * counts.succ[a] * uni) / n_a.clamp_min(1.0), uni)
    return torch.log(p)


def reference_nlls(
    counts: NgramCounts, ids: torch.Tensor, scored: torch.Tensor, mask: torch.Tensor | None = None
) -> dict[str, float]:
    """Mean nats per scored token of both references on ``ids`` (N, L) at the ``scored`` (N, L)
    positions; a position's bigram context is the previous real token of its row."""
    ids = ids.long()
    real = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()
    prev = torch.full_like(ids, -1)
    prev[:, 1:] = torch.where(real[:, :-1], ids[:, :-1], -1)
    scored = scored.bool()
    tokens = int(scored.sum())
    if tokens == 0:
        raise InputError("no scored tokens")
    x = ids[scored]
    return {
        "unigram": float(-unigram_log_probs(counts, x).sum() / tokens),
        "bigram": float(-bigram_log_probs(counts, prev[scored], x).sum() / tokens),
        "tokens": tokens,
    }


def references_block(counts: NgramCounts, ids, scored, mask, *, fit_on: str, note: str | None = None) -> dict:
    """The record's ``references``: each reference as an exact metric (nats/token and perplexity),
    the tokens scored, the split it was fitted on with its token count, and the smoothing."""
    values = reference_nlls(counts, ids, scored, mask)
    out = {
        name: {
            "nll": {"value": values[name], "stderr": 0.0, "kind": "exact", "units": "nats/token"},
            "ppl": {"value": math.exp(values[name]), "stderr": 0.0, "kind": "exact", "units": "perplexity"},
            "smoothing": SMOOTHING[name],
        }
        for name in ("unigram", "bigram")
    }
    out.update(tokens_scored=values["tokens"], fit_on=fit_on, train_tokens=counts.tokens)
    if note:
        out["note"] = note
    return out


def no_better_than_unigram(nll: float, references: dict | None) -> bool:
    """Whether an NLL (nats/token) is not below the unigram reference of the same tokens."""
    if not references or "unigram" not in references:
        return False
    return nll >= references["unigram"]["nll"]["value"]


__all__ = [
    "BIGRAM_DISCOUNT",
    "NOT_LEARNED",
    "NgramCounts",
    "SMOOTHING",
    "bigram_log_probs",
    "fit_counts",
    "no_better_than_unigram",
    "reference_nlls",
    "references_block",
    "unigram_log_probs",
]
