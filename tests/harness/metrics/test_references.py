"""The unigram and bigram references: counts and probabilities on a corpus small enough to check by
hand, normalisation, and the scored-token convention of each family."""

from __future__ import annotations

import math

import pytest
import torch

from harness.metrics.references import (
    BIGRAM_DISCOUNT,
    bigram_log_probs,
    fit_counts,
    no_better_than_unigram,
    reference_nlls,
    references_block,
    unigram_log_probs,
)

# train: two rows over C = 3 classes; the last position of the second row is padding
TRAIN = torch.tensor([[0, 1, 0, 1], [2, 0, 1, 2]])
TRAIN_MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])


def test_counts_by_hand():
    c = fit_counts(TRAIN, TRAIN_MASK, vocab_size=3)
    # real tokens: 0 1 0 1 | 2 0 1  -> n = (3, 3, 1); pairs: 01 10 01 | 20 01 (the pad's pair is not counted)
    assert c.n.tolist() == [3, 3, 1] and c.tokens == 7
    assert c.n_ctx.tolist() == [3, 1, 1]  # contexts: 0 three times, 1 once, 2 once
    assert c.succ.tolist() == [1, 1, 1]  # 0 -> {1}, 1 -> {0}, 2 -> {0}
    assert dict(zip(c.pair_keys.tolist(), c.pair_counts.tolist())) == {0 * 3 + 1: 3, 1 * 3 + 0: 1, 2 * 3 + 0: 1}


def test_probabilities_by_hand_and_normalised():
    c = fit_counts(TRAIN, TRAIN_MASK, vocab_size=3)
    uni = torch.exp(unigram_log_probs(c, torch.arange(3)))
    assert torch.allclose(uni, torch.tensor([4 / 10, 4 / 10, 2 / 10], dtype=torch.float64))
    d = BIGRAM_DISCOUNT
    # p(1 | 0) = (3 - d + d * 1 * 0.4) / 3; p(2 | 0) = d * 1 * 0.2 / 3
    p10 = math.exp(float(bigram_log_probs(c, torch.tensor([0]), torch.tensor([1]))))
    p20 = math.exp(float(bigram_log_probs(c, torch.tensor([0]), torch.tensor([2]))))
    assert p10 == pytest.approx((3 - d + d * 0.4) / 3) and p20 == pytest.approx(d * 0.2 / 3)
    for a in range(3):
        total = torch.exp(bigram_log_probs(c, torch.full((3,), a), torch.arange(3))).sum()
        assert float(total) == pytest.approx(1.0)
    # no context (-1), and a context never seen, fall back to the unigram
    assert torch.allclose(torch.exp(bigram_log_probs(c, torch.full((3,), -1), torch.arange(3))), uni)
    unseen = fit_counts(torch.tensor([[0, 1]]), None, vocab_size=3)
    assert torch.allclose(
        bigram_log_probs(unseen, torch.full((3,), 2), torch.arange(3)), unigram_log_probs(unseen, torch.arange(3))
    )


def test_nlls_on_the_scored_positions_only():
    c = fit_counts(TRAIN, TRAIN_MASK, vocab_size=3)
    ids = torch.tensor([[0, 1, 2]])
    all_scored = torch.ones(1, 3, dtype=torch.bool)
    out = reference_nlls(c, ids, all_scored)
    uni = [0.4, 0.4, 0.2]
    d = BIGRAM_DISCOUNT
    p_1_after_0 = (3 - d + d * 0.4) / 3
    p_2_after_1 = d * 1 * 0.2 / 1  # context 1 seen once, followed by 0 only
    assert out["tokens"] == 3
    assert out["unigram"] == pytest.approx(-(math.log(0.4) + math.log(0.4) + math.log(0.2)) / 3)
    # position 0 has no predecessor in its row: the unigram
    assert out["bigram"] == pytest.approx(-(math.log(uni[0]) + math.log(p_1_after_0) + math.log(p_2_after_1)) / 3)
    shifted = all_scored.clone()
    shifted[:, 0] = False  # the ARM's convention: the first token is given
    out = reference_nlls(c, ids, shifted)
    assert out["tokens"] == 2 and out["bigram"] == pytest.approx(-(math.log(p_1_after_0) + math.log(p_2_after_1)) / 2)


def test_block_and_flag():
    c = fit_counts(TRAIN, TRAIN_MASK, vocab_size=3)
    block = references_block(c, torch.tensor([[0, 1, 2]]), torch.ones(1, 3, dtype=torch.bool), None, fit_on="toy:train")
    u = block["unigram"]["nll"]["value"]
    assert block["unigram"]["nll"]["kind"] == "exact" and block["unigram"]["ppl"]["value"] == pytest.approx(math.exp(u))
    assert block["fit_on"] == "toy:train" and block["train_tokens"] == 7 and block["tokens_scored"] == 3
    assert no_better_than_unigram(u, block) and no_better_than_unigram(u + 1, block)
    assert not no_better_than_unigram(u - 1e-3, block) and not no_better_than_unigram(u, None)
