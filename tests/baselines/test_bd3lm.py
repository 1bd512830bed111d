"""BD3-LM against known answers: enumeration per block, block size 1 (an ARM) and block size L (MDLM).

Per block b the model is MDLM's any-order model of x^b given the clean blocks before it, so
``prime.bounds`` (ell = 1) enumerates each block's exact likelihood and NELBO with a denoiser that
holds x^{<b} fixed; the model's likelihood is their sum. Weights are random, mixers on, so every
check could fail.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from baselines.bd3lm import block_causal_mask, block_diffusion_mask, mixer_sources
from harness.backbone import KVCache
from harness.models import build_model
from prime.bounds import exact_nll, subtoken_bound
from tests.toys import randomize

SIZES = dict(d_model=16, n_layers=2, n_heads=2, mixer_width=3, mixer_placement="blocks")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def bd3(C: int, L: int, block_size: int, seed: int = 0, **kwargs):
    return randomize(
        build_model("bd3lm", vocab_size=C, seq_len=L, block_size=block_size, **{**SIZES, **kwargs}), seed, 0.3
    )


def block_denoiser(model, prefix: torch.Tensor):
    """Block b's network given the clean ``prefix`` x^{<b} (1, P): y_t (B, n, 1) -> raw logits (B, n, C),
    computed on the sampling layout (block-causal mask over prefix + block)."""

    def call(y_t: torch.Tensor) -> torch.Tensor:
        z = torch.cat((prefix.expand(y_t.shape[0], -1), y_t[..., 0]), 1)
        mask = block_causal_mask(z.shape[1], model.block_size)
        left = model.backbone.block_mixers[0].left
        sources = mixer_sources(z.shape[1], model.block_size, 3, left, doubled=False)
        logits = model.backbone(z, None, None, attn_mask=mask, mixer_sources=sources)
        return logits[:, prefix.shape[1] :].double()

    return call


@torch.no_grad()
def enumerated(model, x: torch.Tensor) -> tuple[float, float]:
    """(exact NLL, exact NELBO) of one row x (1, L), summed over blocks by enumeration."""
    C, bs, L = model.vocab_size, model.block_size, x.shape[1]
    exact = bound = 0.0
    for start in range(0, L, bs):
        den = block_denoiser(model, x[:, :start])
        block = x[:, start : start + bs]
        exact += float(exact_nll(den, block, C=C, ell=1)[0])
        bound += float(subtoken_bound(den, block, C=C, ell=1)[0])
    return exact, bound


def test_block_diffusion_mask_is_the_papers_three_parts():
    mask = block_diffusion_mask(4, 2)
    noisy_block1 = mask[2]  # noisy position 2 (block 1): noisy 2-3 and clean 0-1
    assert noisy_block1.tolist() == [False, False, True, True, True, True, False, False]
    clean_block0 = mask[4]  # clean position 0 (block 0): clean 0-1 only
    assert clean_block0.tolist() == [False, False, False, False, True, True, False, False]
    assert block_causal_mask(4, 2).tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1]]


def test_mixer_sources_follow_the_attention_rule():
    L, bs = 6, 2
    src = mixer_sources(L, bs, width=3, left=1, doubled=True)
    attend = block_diffusion_mask(L, bs)
    for q in range(2 * L):
        for s in src[q].tolist():
            assert s == -1 or bool(attend[q, s]), (q, s)
    # noisy position 2 (first of block 1): clean 1 on its left, noisy 2 and 3
    assert src[2].tolist() == [L + 1, 2, 3]
    # noisy position 1 (last of block 0) never reads block 1
    assert src[1].tolist() == [0, 1, -1]


@pytest.mark.parametrize("C, L, bs, seed", [(3, 4, 2, 0), (3, 6, 3, 1), (4, 4, 3, 2)])
def test_block_nelbo_is_above_the_exact_likelihood_and_the_sampler_is_a_distribution(C, L, bs, seed):
    model = bd3(C, L, bs, seed)
    rows = torch.tensor(list(itertools.product(range(C), repeat=L)))
    pairs = [enumerated(model, rows[i : i + 1]) for i in range(len(rows))]
    exact = torch.tensor([p[0] for p in pairs], dtype=torch.float64)
    bound = torch.tensor([p[1] for p in pairs], dtype=torch.float64)
    assert float(torch.exp(-exact).sum()) == pytest.approx(1.0, abs=1e-9)  # p(x) sums to one
    assert (bound >= exact - 1e-9).all()
    assert float((bound - exact).max()) > 1e-4  # in-block order matters: the bound is not tight


def test_monte_carlo_block_nelbo_agrees_with_enumeration():
    C, L, bs = 4, 6, 3
    model = bd3(C, L, bs, seed=3)
    x = torch.randint(0, C, (2, L), generator=_gen(4))
    expected = torch.tensor([enumerated(model, x[i : i + 1])[1] for i in range(2)], dtype=torch.float64)
    copies = 200
    for sampler in ("n", "t"):
        res = model.nll(x.repeat_interleave(copies, 0), num_samples=8, generator=_gen(5), time_sampler=sampler)
        nats = res.nats.view(2, copies).mean(1)
        se = (res.stderr.view(2, copies) ** 2).sum(1).sqrt() / copies
        assert res.kind == "bound" and (se > 0).all()
        slack = 0 if sampler == "n" else 5e-3 * expected  # t in [1e-3, 1]: MDLM's O(eps) truncation
        assert ((nats - expected).abs() < 4 * se + slack).all(), (sampler, nats, expected, se)


def test_block_size_one_is_the_exact_autoregressive_nll_of_its_network():
    C, L = 5, 6
    model = bd3(C, L, 1, seed=5)
    x = torch.randint(0, C, (3, L), generator=_gen(6))
    res = model.nll(x, num_samples=3, generator=_gen(7), time_sampler="n")
    assert torch.equal(res.stderr, torch.zeros(3, dtype=torch.float64))  # no Monte-Carlo variance
    with torch.no_grad():  # token by token on the sampling layout: p(x^i | x^{<i}, mask at i)
        expected = torch.zeros(3, dtype=torch.float64)
        for i in range(L):
            z = torch.cat((x[:, :i], torch.full((3, 1), model.mask_id)), 1)
            log_p = model.log_probs(z)[:, i].double()
            expected -= log_p.gather(-1, x[:, i : i + 1])[:, 0]
    assert torch.allclose(res.nats, expected, rtol=1e-5), (res.nats, expected)


@pytest.mark.parametrize("sampler, k, per_row", [("t", 1, False), ("t", 4, False), ("n", 4, False), ("t", 2, True)])
def test_block_size_l_is_mdlms_estimator_on_the_same_draws(sampler, k, per_row):
    C, L = 6, 8
    block = bd3(C, L, L, seed=8)
    mdlm = build_model("mdlm", vocab_size=C, seq_len=L, schedule="linear", **SIZES)
    mdlm.load_state_dict(block.state_dict())
    mdlm.eval()
    x = torch.randint(0, C, (4, L), generator=_gen(9))
    gens = (lambda: [_gen(20 + r) for r in range(4)]) if per_row else (lambda: _gen(10))
    a = block.nll(x, num_samples=k, generator=gens(), time_sampler=sampler)
    b = mdlm.nll(x, num_samples=k, generator=gens(), time_sampler=sampler)
    assert torch.allclose(a.nats, b.nats, rtol=1e-6, atol=1e-9), (a.nats, b.nats)
    assert torch.allclose(a.stderr, b.stderr, rtol=1e-5, atol=1e-9, equal_nan=True)


def test_loss_is_the_nelbo_per_token_and_clipping_moves_it():
    C, L = 5, 8
    model = bd3(C, L, 4, seed=11)
    x = torch.randint(0, C, (1, L), generator=_gen(12))
    expected = enumerated(model, x)[1] / L
    batch = x.expand(256, L).contiguous()
    with torch.no_grad():
        losses = torch.tensor([float(model.loss(batch, generator=_gen(s))) for s in range(8)], dtype=torch.float64)
    se = float(losses.std() / len(losses) ** 0.5)
    assert abs(float(losses.mean()) - expected) < 4 * se + 5e-3 * expected
    clipped = bd3(C, L, 4, seed=11, train_clip_min=0.3, train_clip_max=0.8)
    with torch.no_grad():
        spread = torch.tensor([float(clipped.loss(batch[:16], generator=_gen(s))) for s in range(8)])
    assert float(spread.std()) < float(
        torch.tensor([float(model.loss(batch[:16], generator=_gen(s))) for s in range(8)]).std()
    )


def test_the_cache_gives_the_block_causal_forward():
    C, L, bs = 7, 8, 3  # a short last block too
    model = bd3(C, L, bs, seed=13)
    x = torch.randint(0, C, (2, L), generator=_gen(14))
    z = x.clone()
    z[:, 7] = model.mask_id
    full = model.log_probs(z[:, :8])
    cache = KVCache()
    with torch.no_grad():
        model.finish_block(x[:, 0:3], cache)
        model.finish_block(x[:, 3:6], cache)
        last = model.block_log_probs(z[:, 6:8], cache)
        first_row = model.block_log_probs(z[:1, 6:8], cache, rows=torch.tensor([True, False]))
    assert cache.length == 6
    assert torch.allclose(last, full[:, 6:8], atol=1e-5)
    assert torch.allclose(first_row, full[:1, 6:8], atol=1e-5)


def test_bad_configs_are_refused():
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match="block_size"):
        build_model("bd3lm", vocab_size=5, seq_len=8, block_size=0)
    with pytest.raises(ConfigError, match="train_clip"):
        build_model("bd3lm", vocab_size=5, seq_len=8, train_clip_min=0.9, train_clip_max=0.5)
    with pytest.raises(ConfigError, match="time input"):
        build_model("bd3lm", vocab_size=5, seq_len=8, time_conditioning=True)
