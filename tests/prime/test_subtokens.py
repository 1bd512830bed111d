"""Sub-token encoding: known bases, round trips, and V(y_t) against a brute-force definition."""

from __future__ import annotations

import itertools

import pytest
import torch

from harness.errors import PrimebenchError
from prime.subtokens import consistent, decode, digit_table, encode, mask_id, subtoken_base

GPT2 = {2: 225, 3: 37, 4: 15, 6: 7, 8: 4}
IMAGES = {2: 16, 3: 7, 4: 4, 8: 2}


@pytest.mark.parametrize("ell, base", sorted(GPT2.items()))
def test_gpt2_bases(ell, base):
    assert subtoken_base(50257, ell) == base


@pytest.mark.parametrize("ell, base", sorted(IMAGES.items()))
def test_image_bases(ell, base):
    assert subtoken_base(256, ell) == base


def test_base_is_minimal_and_round_trip_for_all_small_vocabularies():
    for C in range(1, 301):
        x = torch.arange(C)
        for ell in range(1, 9):
            b = subtoken_base(C, ell)
            assert b**ell >= C
            if b > 1:
                assert (b - 1) ** ell < C
            else:
                assert C == 1
            if ell == 1:
                assert b == C
            y = encode(x, b, ell)
            assert y.shape == (C, ell)
            assert int(y.min()) >= 0 and int(y.max()) < max(b, 1)
            assert torch.equal(decode(y, b), x)


def test_encode_is_most_significant_first():
    y = encode(torch.tensor([[0, 5, 13]]), 3, 3)
    assert y.tolist() == [[[0, 0, 0], [0, 1, 2], [1, 1, 1]]]
    assert torch.equal(digit_table(14, 3, 3), encode(torch.arange(14), 3, 3))


def test_bad_arguments_raise():
    for C, ell in [(0, 2), (5, 0), (-1, 1)]:
        with pytest.raises(PrimebenchError):
            subtoken_base(C, ell)
    with pytest.raises(PrimebenchError, match="\\[0, 9\\)"):
        encode(torch.tensor([9]), 3, 2)
    with pytest.raises(PrimebenchError, match="mask id is 3"):
        decode(torch.tensor([[0, mask_id(3)]]), 3)


def _brute_consistent(y_t, C, base, ell):
    """V(y_t) straight from the definition, with Python integers."""
    out = []
    for c in range(C):
        digits = [(c // base ** (ell - j)) % base for j in range(1, ell + 1)]
        out.append(all(v == base or v == d for v, d in zip(y_t, digits)))
    return out


@pytest.mark.parametrize("C, ell", [(5, 2), (7, 3), (8, 3), (4, 1), (10, 2), (1, 2)])
def test_consistent_matches_definition(C, ell):
    base = subtoken_base(C, ell)
    states = list(itertools.product(range(base + 1), repeat=ell))
    got = consistent(torch.tensor(states).reshape(len(states), 1, ell), C, base, ell)
    assert got.shape == (len(states), 1, C)
    for row, state in zip(got[:, 0].tolist(), states):
        assert row == _brute_consistent(state, C, base, ell)
    # The all-mask state allows every valid class; a fully revealed valid code allows only itself.
    assert got[-1, 0].all()
    full = encode(torch.arange(C), base, ell)[:, None, :]
    assert torch.equal(consistent(full, C, base, ell)[:, 0], torch.eye(C, dtype=torch.bool))
