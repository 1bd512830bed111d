"""Diversity across samples: closed forms on hand-made batches, the jackknife against brute force,
and the case per-sample entropy cannot see (a batch of copies)."""

from __future__ import annotations

import math
import random

import pytest

from harness.errors import InputError
from harness.metrics.diversity import cross_repeat_n, distinct_n, diversity, pooled_entropy
from harness.metrics.entropy import MeanEntropy


def _brute_jackknife(fn, rows):
    loo = [fn(rows[:i] + rows[i + 1 :]).value for i in range(len(rows))]
    m = len(loo)
    mean = sum(loo) / m
    return math.sqrt((m - 1) / m * sum((v - mean) ** 2 for v in loo))


def test_closed_forms_by_hand():
    rows = [[1, 2, 3, 4], [1, 2, 5, 6]]
    # pooled counts: 1:2, 2:2, 3..6:1 -> N = 8
    want = -(2 * (2 / 8) * math.log(2 / 8) + 4 * (1 / 8) * math.log(1 / 8))
    assert pooled_entropy(rows).value == pytest.approx(want)
    assert pooled_entropy(rows, base=2).value == pytest.approx(want / math.log(2))
    assert distinct_n(rows, 1).value == pytest.approx(6 / 8)
    assert distinct_n(rows, 2).value == pytest.approx(5 / 6)  # (1,2) twice, (2,3) (3,4) (2,5) (5,6)
    assert distinct_n(rows, 4).value == 1.0
    assert cross_repeat_n(rows, 2).value == pytest.approx(2 / 6)  # both (1,2) occurrences are shared
    assert cross_repeat_n(rows, 3).value == 0.0
    # a repeat inside one sample is not a repeat across samples
    assert cross_repeat_n([[7, 7, 7, 7], [1, 2, 3, 4]], 2).value == 0.0


@pytest.mark.parametrize("fn", [pooled_entropy, lambda r: distinct_n(r, 2), lambda r: cross_repeat_n(r, 2)])
def test_the_jackknife_from_counts_is_the_brute_force_one(fn):
    rng = random.Random(0)
    rows = [[rng.randrange(6) for _ in range(rng.randrange(3, 12))] for _ in range(9)]
    rows[3] = list(rows[1])  # some shared n-grams, some seen in exactly two samples
    got = fn(rows)
    assert got.stderr == pytest.approx(_brute_jackknife(fn, rows), rel=1e-9, abs=1e-12)


def test_a_batch_of_copies_keeps_its_per_sample_entropy_but_not_its_pooled_diversity():
    rng = random.Random(1)
    real = [[rng.randrange(200) for _ in range(64)] for _ in range(16)]
    tiled = [list(real[0]) for _ in range(16)]
    per_sample = MeanEntropy()
    per_sample.update([real[0]])
    assert pooled_entropy(tiled).value == pytest.approx(per_sample.compute().mean)  # the row's own entropy
    real_d, tiled_d = diversity(real), diversity(tiled)
    assert tiled_d["cross_repeat_4"].value == 1.0 and real_d["cross_repeat_4"].value < 0.05
    assert tiled_d["distinct_4"].value <= 1 / 16 + 1e-12 < real_d["distinct_4"].value
    assert tiled_d["pooled_entropy"].value < real_d["pooled_entropy"].value - 0.5
    assert set(real_d) == {"pooled_entropy", "distinct_1", "distinct_2", "distinct_3", "distinct_4", "cross_repeat_4"}


def test_one_sample_has_no_standard_error_and_bad_input_is_named():
    assert pooled_entropy([[1, 2, 2]]).stderr is None
    with pytest.raises(InputError, match="at least one sample"):
        distinct_n([[], []], 1)
    with pytest.raises(InputError, match="no sample is 5 tokens long"):
        distinct_n([[1, 2]], 5)
    with pytest.raises(InputError, match="n >= 1"):
        cross_repeat_n([[1, 2]], 0)
