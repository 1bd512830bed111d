"""Prime likelihood, sub-token bound and token-joint objective against brute force and known answers.

The brute-force references here do not use the library's restriction or marginal code: they take
the raw logits of the denoiser, restrict and normalise them with Python loops over the classes, and
average over all N! reveal orders (for the bound and the likelihood) or over all 2^N mask patterns
with Python-computed Beta weights (for the token-joint objective).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from harness.errors import PrimebenchError
from prime.bounds import (
    exact_nll,
    restricted_log_probs,
    subtoken_bound,
    subtoken_log_marginals,
    subtoken_nll_terms,
    token_joint_nll_terms,
    token_joint_objective,
)
from prime.subtokens import encode, mask_id, subtoken_base
from prime.toy import ConstantDenoiser, TableDenoiser, data_entropy, worked_example

CASES = [(5, 2, 2), (7, 3, 2), (3, 1, 4), (10, 2, 3), (6, 3, 1)]  # (C, ell, L); N = L*ell <= 6
SEEDS = [0, 1, 2]


def _gen(seed):
    return torch.Generator().manual_seed(seed)


class _Brute:
    """Restricted joint and marginals of one sequence's states, from raw logits and Python loops."""

    def __init__(self, denoiser, C, ell, L):
        self.den, self.C, self.ell, self.L = denoiser, C, ell, L
        self.base = subtoken_base(C, ell)
        self.digits = [[(c // self.base ** (ell - j)) % self.base for j in range(1, ell + 1)] for c in range(C)]
        self._cache = {}

    def joint(self, state, i):
        """Restricted p(x^i = c | state) for all c, state = tuple of L*ell sub-token values."""
        key = (state, i)
        if key not in self._cache:
            y_t = torch.tensor(state).reshape(1, self.L, self.ell)
            logits = self.den(y_t)[0, i].tolist()
            token = state[i * self.ell : (i + 1) * self.ell]
            ok = [all(v == self.base or v == d for v, d in zip(token, self.digits[c])) for c in range(self.C)]
            top = max(z for z, a in zip(logits, ok) if a)
            w = [math.exp(z - top) if a else 0.0 for z, a in zip(logits, ok)]
            self._cache[key] = [x / sum(w) for x in w]
        return self._cache[key]

    def marginal(self, state, u, value):
        i, j = divmod(u, self.ell)
        return sum(p for p, d in zip(self.joint(state, i), self.digits) if d[j] == value)

    def orders(self, x0_row):
        """(exact NLL, sub-token bound) by averaging over all N! reveal orders."""
        y0 = [d for x in x0_row for d in self.digits[x]]
        N = len(y0)
        probs, losses = [], []
        for order in itertools.permutations(range(N)):
            state = [self.base] * N
            prob, loss = 1.0, 0.0
            for u in order:
                m = self.marginal(tuple(state), u, y0[u])
                prob *= m
                loss -= math.log(m)
                state[u] = y0[u]
            probs.append(prob)
            losses.append(loss)
        return -math.log(sum(probs) / len(probs)), sum(losses) / len(losses)

    def token_joint(self, x0_row):
        """Paper objective: sum over patterns of 1/(n binom(N, n)) * token-joint losses."""
        y0 = [d for x in x0_row for d in self.digits[x]]
        N = len(y0)
        total = 0.0
        for bits in itertools.product([False, True], repeat=N):
            n = sum(bits)
            if n == 0:
                continue
            state = tuple(self.base if b else v for b, v in zip(bits, y0))
            loss = sum(
                -math.log(self.joint(state, i)[x0_row[i]])
                for i in range(self.L)
                if any(bits[i * self.ell : (i + 1) * self.ell])
            )
            total += loss / (n * math.comb(N, n))
        return total


@pytest.mark.parametrize("C, ell, L", CASES)
@pytest.mark.parametrize("seed", SEEDS)
def test_exact_objectives_match_brute_force(C, ell, L, seed):
    den = TableDenoiser(C, ell, L, generator=_gen(seed), scale=2.0)
    x0 = torch.randint(0, C, (2, L), generator=_gen(100 + seed))
    nll = exact_nll(den, x0, C=C, ell=ell)
    sub = subtoken_bound(den, x0, C=C, ell=ell)
    tok = token_joint_objective(den, x0, C=C, ell=ell)
    brute = _Brute(den, C, ell, L)
    for b, row in enumerate(x0.tolist()):
        want_nll, want_sub = brute.orders(row)
        assert nll[b].item() == pytest.approx(want_nll, rel=1e-10, abs=1e-10)
        assert sub[b].item() == pytest.approx(want_sub, rel=1e-10, abs=1e-10)
        assert tok[b].item() == pytest.approx(brute.token_joint(row), rel=1e-10, abs=1e-10)
    assert (sub >= nll - 1e-12).all()
    assert (nll > 0).all()
    if ell == 1:
        assert torch.allclose(tok, sub, rtol=0, atol=1e-12)


def test_dependent_subtokens_make_token_joint_differ():
    den = TableDenoiser(5, 2, 2, generator=_gen(3), scale=2.0)
    x0 = torch.tensor([[4, 1]])
    assert abs(token_joint_objective(den, x0, C=5, ell=2) - subtoken_bound(den, x0, C=5, ell=2)) > 1e-3


def test_worked_example_reference_numbers():
    ex = worked_example()
    assert (ex.C, ex.ell, ex.base) == (4, 2, 2)
    H = data_entropy(ex.p)

    def expect(v):
        return float((ex.p * v).sum())

    nll = expect(exact_nll(ex.denoiser, ex.x0, C=4, ell=2))
    sub = expect(subtoken_bound(ex.denoiser, ex.x0, C=4, ell=2))
    tok = expect(token_joint_objective(ex.denoiser, ex.x0, C=4, ell=2))
    assert round(H, 4) == 1.0182
    assert round(nll, 4) == 1.0182 and nll == pytest.approx(H, abs=1e-12)
    assert round(sub, 4) == 1.0182
    assert round(tok, 4) == 0.8342
    joint = ex.p.reshape(2, 2)  # joint[y1, y2]
    p1, p2 = joint.sum(1), joint.sum(0)
    mutual = float((joint * torch.log(joint / (p1[:, None] * p2[None, :]))).sum())
    assert tok == pytest.approx(H - mutual / 2, abs=1e-12)
    assert tok < H  # below the entropy: not a valid bound


def test_restriction_and_marginals():
    C, ell = 5, 2  # base 3: codes 5..8 (digits 12, 20, 21, 22) are invalid
    base = subtoken_base(C, ell)
    m = mask_id(base)
    y_t = torch.tensor([[[1, m], [m, m], [m, 2], [1, 1]]])
    logits = torch.randn(1, 4, C, generator=_gen(0), dtype=torch.float64)
    lp = restricted_log_probs(logits, y_t, C=C, base=base, ell=ell)
    assert torch.allclose(lp.exp().sum(-1), torch.ones(1, 4, dtype=torch.float64))
    assert torch.isinf(lp[0, 0, [0, 1, 2]]).all()  # only 3 (10) and 4 (11) agree with "1 m"
    assert torch.isinf(lp[0, 2, [0, 1, 3, 4]]).all() and lp[0, 2, 2] == 0  # "m 2": 12, 22 invalid
    marg = subtoken_log_marginals(lp, base=base, ell=ell)  # (1, 4, 2, 3)
    assert torch.isinf(marg[0, 0, 1, 2])  # digit 2 after leading 1 would be code 5 >= C
    assert torch.allclose(marg.exp().sum(-1), torch.ones(1, 4, 2, dtype=torch.float64))
    digits = encode(torch.arange(C), base, ell)
    one_hot = torch.nn.functional.one_hot(digits, base).double()  # (C, ell, base)
    want = torch.einsum("blc,cjv->bljv", lp.exp(), one_hot)
    assert torch.allclose(marg.exp(), want, atol=1e-14)
    # Fully revealed token (1, 1) = code 4: log-prob and marginals exactly 0, no loss.
    assert lp[0, 3, 4].item() == 0.0 and (marg[0, 3, [0, 1], [1, 1]] == 0).all()
    y0 = torch.tensor([[[1, 1], [0, 2], [0, 2], [1, 1]]])
    masked = y_t == m
    x0 = torch.tensor([[4, 2, 2, 4]])
    assert subtoken_nll_terms(lp, y0, masked, base, ell)[0, 3].item() == 0.0
    assert token_joint_nll_terms(lp, x0, masked)[0, 3].item() == 0.0
    plain = restricted_log_probs(logits, y_t, C=C, base=base, ell=ell, carry_over=False)
    assert torch.equal(plain, torch.log_softmax(logits, -1))


def test_empty_consistent_set_raises():
    # C = 5, base 3: "2 m" is consistent with no code < 5 (20 = 6, 21 = 7, 22 = 8).
    y_t = torch.tensor([[[2, 3]]])
    with pytest.raises(PrimebenchError, match="V\\(y_t"):
        restricted_log_probs(torch.zeros(1, 1, 5), y_t, C=5, base=3, ell=2)


def test_marginals_do_not_underflow():
    lp = torch.tensor([[[-1e-300, -2000.0, -2001.0, -5000.0]]], dtype=torch.float64)
    marg = subtoken_log_marginals(lp, base=2, ell=2)  # digit 1 = 1 holds codes 2, 3 only
    assert marg[0, 0, 0, 1].item() == pytest.approx(-2001.0)  # codes 2, 3
    assert marg[0, 0, 1, 1].item() == pytest.approx(-2000.0)  # codes 1, 3
    assert marg[0, 0, 0, 0].item() == pytest.approx(0.0, abs=1e-12)  # codes 0, 1


@pytest.mark.parametrize("sampler", ["n", "t"])
@pytest.mark.parametrize("objective", [subtoken_bound, token_joint_objective])
def test_monte_carlo_agrees_with_exact(sampler, objective):
    C, ell, L = 7, 3, 2
    den = TableDenoiser(C, ell, L, generator=_gen(5), scale=1.5)
    x0 = torch.tensor([[6, 2], [0, 5]])
    exact = objective(den, x0, C=C, ell=ell)
    value, stderr = objective(
        den, x0, C=C, ell=ell, exact=False, num_samples=4000, generator=_gen(11), time_sampler=sampler
    )
    assert (stderr > 0).all()
    assert ((value - exact).abs() < 4 * stderr).all(), (value, exact, stderr)
    few = objective(den, x0, C=C, ell=ell, exact=False, num_samples=64, generator=_gen(12), time_sampler=sampler)
    many = objective(den, x0, C=C, ell=ell, exact=False, num_samples=1024, generator=_gen(12), time_sampler=sampler)
    assert (many.stderr < few.stderr / 2).all()


def test_monte_carlo_is_reproducible_and_validates():
    den = TableDenoiser(5, 2, 2, generator=_gen(0))
    x0 = torch.tensor([[1, 4]])
    a = subtoken_bound(den, x0, C=5, ell=2, exact=False, num_samples=16, generator=_gen(1))
    b = subtoken_bound(den, x0, C=5, ell=2, exact=False, num_samples=16, generator=_gen(1))
    assert torch.equal(a.value, b.value)
    with pytest.raises(PrimebenchError, match="num_samples"):
        subtoken_bound(den, x0, C=5, ell=2, exact=False)
    with pytest.raises(PrimebenchError, match="time_sampler"):
        subtoken_bound(den, x0, C=5, ell=2, exact=False, num_samples=4, time_sampler="x")
    with pytest.raises(PrimebenchError, match="\\[0, C=5\\)"):
        subtoken_bound(den, torch.tensor([[1, 5]]), C=5, ell=2)


def test_too_large_enumeration_names_the_size():
    den = ConstantDenoiser(torch.zeros(4))
    x0 = torch.zeros(1, 9, dtype=torch.long)  # L*ell = 18
    for fn in (exact_nll, subtoken_bound, token_joint_objective):
        with pytest.raises(PrimebenchError, match="L\\*ell = 9\\*2 = 18"):
            fn(den, x0, C=4, ell=2)
    with pytest.raises(PrimebenchError, match="3\\^12 = 531441 states"):
        TableDenoiser(4, 2, 6, generator=_gen(0))


@pytest.mark.parametrize("C,ell", [(7, 2), (50, 3), (16, 4), (300, 2)])
@pytest.mark.parametrize("carry_over", [True, False])
def test_fused_terms_equal_the_log_softmax_and_scatter_path(C, ell, carry_over):
    """One exp and reshaped sums give the numbers of restricted log-softmax + digit-group
    logsumexp, and the new marginals equal a per-class reference loop."""
    from prime.bounds import (
        fused_prime_terms,
        restricted_log_probs,
        subtoken_log_marginals,
        subtoken_nll_terms,
        token_joint_nll_terms,
    )
    from prime.subtokens import digit_table, encode, subtoken_base

    g = torch.Generator().manual_seed(C * ell)
    base = subtoken_base(C, ell)
    B, L = 3, 5
    logits = 3 * torch.randn(B, L, C, generator=g)
    x0 = torch.randint(0, C, (B, L), generator=g)
    y0 = encode(x0, base, ell)
    masked = torch.rand(B, L, ell, generator=g) < 0.5
    y_t = torch.where(masked, torch.full_like(y0, base), y0)
    log_p = restricted_log_probs(logits, y_t, C=C, base=base, ell=ell, carry_over=carry_over)
    sub, joint = fused_prime_terms(
        logits,
        y_t,
        x0,
        y0,
        masked,
        C=C,
        base=base,
        ell=ell,
        carry_over=carry_over,
        estimators=["subtoken", "token_joint"],
    )
    assert torch.allclose(sub, subtoken_nll_terms(log_p, y0, masked, base, ell), atol=1e-5)
    assert torch.allclose(joint, token_joint_nll_terms(log_p, x0, masked), atol=1e-5)
    # training's graph form (exp out of place) gives evaluation's numbers (exp in place) bit for bit
    kw = dict(C=C, base=base, ell=ell, carry_over=carry_over, estimators=["subtoken", "token_joint"])
    graph = fused_prime_terms(logits.clone().requires_grad_(), y_t, x0, y0, masked, **kw)
    assert all(g.requires_grad and torch.equal(g.detach(), f) for g, f in zip(graph, (sub, joint), strict=True))
    # the marginals against a loop over classes
    table = digit_table(C, base, ell)
    marg = subtoken_log_marginals(log_p, base=base, ell=ell)
    for j in range(ell):
        for v in range(base):
            members = table[:, j] == v
            want = torch.logsumexp(log_p[..., members], -1) if members.any() else torch.full((B, L), float("-inf"))
            got = marg[..., j, v]
            assert torch.equal(torch.isfinite(got), torch.isfinite(want))
            assert torch.allclose(got[torch.isfinite(want)], want[torch.isfinite(want)], atol=1e-5)


def test_fused_terms_recompute_an_underflowing_marginal_exactly():
    from prime.bounds import fused_prime_terms, restricted_log_probs, subtoken_nll_terms
    from prime.subtokens import encode

    C, ell, base = 9, 2, 3
    x0 = torch.tensor([[4]])  # digits (1, 1)
    y0 = encode(x0, base, ell)
    masked = torch.tensor([[[True, True]]])
    logits = torch.zeros(1, 1, C)
    logits[..., 0] = 200.0  # code 0 dominates: the true code's digit groups sit 200 nats below it
    y_t = torch.full_like(y0, base)
    log_p = restricted_log_probs(logits, y_t, C=C, base=base, ell=ell)
    (sub,) = fused_prime_terms(
        logits, y_t, x0, y0, masked, C=C, base=base, ell=ell, carry_over=True, estimators=["subtoken"]
    )
    want = subtoken_nll_terms(log_p, y0, masked, base, ell)
    assert torch.isfinite(sub).all() and torch.allclose(sub, want, rtol=1e-6)
    assert float(sub) > 300
