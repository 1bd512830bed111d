"""Diversity across samples: what per-sample entropy cannot see.

Per-sample unigram entropy (:mod:`harness.metrics.entropy`) looks at one sample at a time, so a batch
made of one real row repeated as every sample keeps the row's entropy (and its Gen PPL). The numbers
here pool the samples, so duplication across samples lowers them:

* ``pooled_entropy``: the unigram entropy of all samples' tokens counted together,
  H = log N - (1/N) sum_k c_k log c_k (c_k the count of id k, N the number of tokens);
* ``distinct_n``: distinct n-grams over all samples / n-grams over all samples (n-grams never cross
  a sample's boundary; Li et al. 2016 pool them the same way);
* ``cross_repeat_n``: the share of n-gram occurrences whose n-gram also occurs in another sample
  (0 when no two samples share an n-gram, 1 for a batch of copies).

Each comes with a delete-one jackknife standard error over samples, computed from the counts (each
leave-one-out value in O(sample length)), so the cost is linear in the number of tokens.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from harness.errors import InputError
from harness.metrics.entropy import log_base

#: the n of distinct-n reported by :func:`diversity`
ORDERS = (1, 2, 3, 4)
#: the n-gram order of the cross-sample repeat rate
REPEAT_ORDER = 4


@dataclass(frozen=True)
class Pooled:
    """A pooled statistic and its delete-one jackknife standard error (None for fewer than 2 samples)."""

    value: float
    stderr: float | None


def _samples(samples) -> list[tuple[int, ...]]:
    rows = [tuple(int(t) for t in (s.tolist() if hasattr(s, "tolist") else s)) for s in samples]
    if not rows or not any(rows):
        raise InputError("diversity needs at least one sample with tokens", fix="pass the generated token ids")
    return rows


def _ngrams(row: tuple[int, ...], n: int) -> Counter:
    return Counter(row[i : i + n] for i in range(len(row) - n + 1))


def _jackknife(full: float, loo: Sequence[float]) -> float | None:
    m = len(loo)
    if m < 2:
        return None
    mean = sum(loo) / m
    return math.sqrt((m - 1) / m * sum((v - mean) ** 2 for v in loo))


def _xlogx(c: float) -> float:
    return c * math.log(c) if c > 0 else 0.0


def pooled_entropy(samples, *, base: str | int = "e") -> Pooled:
    """Unigram entropy of all samples' tokens counted together (nats for base "e", bits for 2)."""

    scale = log_base(base)
    rows = _samples(samples)
    per = [Counter(r) for r in rows]
    total = Counter()
    for c in per:
        total.update(c)
    n_all = sum(total.values())
    s_all = sum(_xlogx(c) for c in total.values())

    def h(n: float, s: float) -> float:
        return (math.log(n) - s / n) / scale if n > 0 else 0.0

    loo = []
    for c, row in zip(per, rows, strict=True):
        if len(rows) < 2:
            break
        s = s_all - sum(_xlogx(total[k]) - _xlogx(total[k] - v) for k, v in c.items())
        loo.append(h(n_all - len(row), s))
    return Pooled(h(n_all, s_all), _jackknife(h(n_all, s_all), loo))


def distinct_n(samples, n: int) -> Pooled:
    """Distinct n-grams / all n-grams over the pooled samples (1.0 when every n-gram is new)."""
    if n < 1:
        raise InputError(f"distinct-n needs n >= 1, got {n}")
    rows = _samples(samples)
    per = [_ngrams(r, n) for r in rows]
    total = Counter()
    for c in per:
        total.update(c)
    grams = sum(total.values())
    if grams == 0:
        raise InputError(f"no sample is {n} tokens long", fix="use longer samples or a smaller n")
    value = len(total) / grams
    loo = []
    if len(rows) > 1:
        for c in per:
            left = grams - sum(c.values())
            unique = len(total) - sum(1 for g, v in c.items() if total[g] == v)
            loo.append(unique / left if left else value)
    return Pooled(value, _jackknife(value, loo))


def cross_repeat_n(samples, n: int = REPEAT_ORDER) -> Pooled:
    """Share of n-gram occurrences whose n-gram occurs in at least one other sample."""
    if n < 1:
        raise InputError(f"the repeat rate needs n >= 1, got {n}")
    rows = _samples(samples)
    per = [_ngrams(r, n) for r in rows]
    total, df = Counter(), Counter()
    for c in per:
        total.update(c)
        df.update(c.keys())
    grams = sum(total.values())
    if grams == 0:
        raise InputError(f"no sample is {n} tokens long", fix="use longer samples or a smaller n")
    repeated = sum(v for g, v in total.items() if df[g] >= 2)
    value = repeated / grams
    loo = []
    if len(rows) > 1:
        for c in per:
            own = sum(v for g, v in c.items() if df[g] >= 2)  # this sample's repeated occurrences leave
            orphaned = sum(total[g] - v for g, v in c.items() if df[g] == 2)  # the one other sample's stop counting
            left = grams - sum(c.values())
            loo.append((repeated - own - orphaned) / left if left else value)
    return Pooled(value, _jackknife(value, loo))


def diversity(samples, *, base: str | int = "e") -> dict[str, Pooled]:
    """Every cross-sample number, keyed as the records name them: ``pooled_entropy``, ``distinct_1``
    .. ``distinct_4`` and ``cross_repeat_4``. ``samples``: token-id rows (lists or 1-D tensors)."""
    out = {"pooled_entropy": pooled_entropy(samples, base=base)}
    for n in ORDERS:
        out[f"distinct_{n}"] = distinct_n(samples, n)
    out[f"cross_repeat_{REPEAT_ORDER}"] = cross_repeat_n(samples, REPEAT_ORDER)
    return out


__all__ = ["ORDERS", "REPEAT_ORDER", "Pooled", "cross_repeat_n", "distinct_n", "diversity", "pooled_entropy"]
