"""Block-by-block sampling (BD3-LM) against enumerated laws on a tiny model with random weights.

First-hitting draws from the model's own distribution p(x) = prod_b p(x^b | x^{<b}), each block's
any-order law enumerated by ``prime.bounds.exact_nll``; the ancestral sampler with one step per
block draws every token of a block at once from the all-masked block's denoiser. Both are checked
by a chi-square statistic over all C^L sequences, so a leak across blocks (cache, mixer) or a wrong
in-block law fails them.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from harness.sampling import generate
from tests.baselines.test_bd3lm import bd3, enumerated

C, L, BS = 3, 4, 2


def _chi_square(tokens: torch.Tensor, probs: torch.Tensor) -> float:
    index = (tokens * (C ** torch.arange(L - 1, -1, -1))).sum(-1)
    counts = torch.bincount(index, minlength=C**L).double()
    expected = probs * tokens.shape[0]
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.fixture(scope="module")
def model():
    return bd3(C, L, BS, seed=21)


@pytest.fixture(scope="module")
def sequences():
    return torch.tensor(list(itertools.product(range(C), repeat=L)))


def _threshold() -> float:
    dof = C**L - 1
    return dof + 6 * (2 * dof) ** 0.5  # a chi-square far in its tail: fails only for a wrong law


def test_first_hitting_draws_the_models_distribution(model, sequences):
    exact = torch.tensor([enumerated(model, sequences[i : i + 1])[0] for i in range(len(sequences))])
    probs = torch.exp(-exact.double())
    out = generate(model, "first-hitting", num_samples=8000, batch_size=8000, generator=0)
    assert _chi_square(out.tokens, probs) < _threshold()
    assert out.nfe.tolist() == [L] * 8000 and out.idle_steps.sum() == 0
    assert out.protocol["block_size"] == BS and out.stats["cache_fills"] == 8000 * (L // BS - 1)


@pytest.mark.parametrize("draw", ["two-stage", "joint"])
def test_one_ancestral_step_per_block_draws_each_block_from_its_all_masked_denoiser(model, sequences, draw):
    with torch.no_grad():
        probs = torch.ones(len(sequences), dtype=torch.float64)
        for start in range(0, L, BS):
            z = sequences[:, : start + BS].clone()
            z[:, start:] = model.mask_id
            log_p = model.log_probs(z)[:, start:].double()
            probs *= log_p.gather(-1, sequences[:, start : start + BS, None]).squeeze(-1).exp().prod(-1)
    out = generate(model, "ancestral", num_samples=8000, batch_size=8000, steps=1, generator=1, draw=draw)
    assert _chi_square(out.tokens, probs) < _threshold()
    assert out.steps.tolist() == [L // BS] * 8000 and out.nfe.tolist() == [L // BS] * 8000


def test_prefix_seed_and_counts(model):
    prefix = torch.tensor([[2, 1, 0]])  # one whole block and the first token of the next
    a = generate(model, "ancestral", num_samples=5, batch_size=2, steps=4, generator=3, prefix=prefix)
    b = generate(model, "ancestral", num_samples=5, batch_size=2, steps=4, generator=3, prefix=prefix)
    assert torch.equal(a.tokens, b.tokens)
    assert (a.tokens[:, :3] == prefix).all() and a.tokens.max() < C
    assert a.steps.tolist() == [4] * 5  # only the second block is sampled
    assert (a.nfe <= 4).all() and (a.nfe + a.idle_steps == 4).all()
    assert a.protocol["steps"] == 4 and a.protocol["prefix_len"] == 3


def test_maskgit_is_refused(model):
    from harness.errors import PrimebenchError

    with pytest.raises(PrimebenchError, match="does not support the 'bd3lm'"):
        generate(model, "maskgit", num_samples=2, generator=0)
