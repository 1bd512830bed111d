"""UDLM, the uniform-process family: its Monte-Carlo ELBO is unbiased for the integral of the process's
integrand, and that integral bounds the exact likelihood of the model's own reverse chain, both by
enumeration over every state of a C = 3, L = 2 toy (9 states)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from harness.models import build_model
from harness.sampling import generate
from tests.toys import randomize

C, L = 3, 2
F64 = torch.float64


@pytest.fixture(scope="module")
def model():
    m = build_model("udlm", vocab_size=C, seq_len=L, d_model=16, n_layers=1, n_heads=2)
    return randomize(m, 0, 0.2).eval()


STATES = torch.tensor(list(itertools.product(range(C), repeat=L)))  # (C^L, L)


def _x_theta(model, z: torch.Tensor, t: float) -> torch.Tensor:
    with torch.no_grad():
        return model.log_probs(z, torch.full((z.shape[0],), t, dtype=torch.float32)).double()


def _elbo_by_quadrature(model, x0: torch.Tensor, lo: float, nodes: int = 160) -> float:
    """int_lo^1 sum over states z of q_t(z | x0) * sum_i integrand dt (Gauss-Legendre)."""
    t_nodes, w = np.polynomial.legendre.leggauss(nodes)
    t_nodes, w = lo + (1 - lo) * (t_nodes + 1) / 2, (1 - lo) * w / 2
    total = 0.0
    for t, wt in zip(t_nodes, w):
        tt = torch.tensor(float(np.float32(t)), dtype=F64)
        alpha, dalpha = model.schedule.alpha(tt), model.schedule.alpha_prime(tt)
        q = model.process.marginal(x0, alpha)  # (L, C)
        prob = q[torch.arange(L), STATES].prod(-1)  # (C^L,)
        rate = model.process.elbo_integrand(
            _x_theta(model, STATES, float(tt)), x0.expand(len(STATES), L), STATES, alpha, dalpha
        )
        total += wt * float((prob * rate.sum(-1)).sum())
    return total


def test_monte_carlo_nll_is_unbiased_for_the_integral(model):
    x0 = torch.tensor([[2, 0]])
    want = _elbo_by_quadrature(model, x0[0], 1e-3)
    got = model.nll(x0.expand(2, L), num_samples=1500, generator=torch.Generator().manual_seed(0))
    mean = float(got.nats.mean())
    se = float(got.stderr.max())
    assert abs(mean - want) < 4 * se + 1e-3, (mean, want, se)
    assert got.kind == "bound"


def _chain_nll(model, T: int) -> torch.Tensor:
    """-log p_T(x) for every x (C^L,), the model's T-step posterior chain from pi, by enumeration."""
    proc, sched = model.process, model.schedule
    grid = torch.linspace(1, 0, T + 1, dtype=F64)
    alpha = sched.alpha(grid)
    row = torch.full((len(STATES),), 1.0 / len(STATES), dtype=F64)  # pi over the C^L states
    for k in range(T):
        probs = _x_theta(model, STATES, float(grid[k])).exp()  # (S, L, C)
        step = proc.posterior(STATES, probs, alpha[k], alpha[k + 1])  # (S, L, C): per position
        move = torch.ones(len(STATES), len(STATES), dtype=F64)
        for i in range(L):
            move = move * step[:, i, :][:, STATES[:, i]]
        row = row @ move
    return -torch.log(row)


def test_the_elbo_bounds_the_models_own_chain(model):
    exact = _chain_nll(model, 256)
    assert float(torch.exp(-exact).sum()) == pytest.approx(1.0)
    alpha_1 = model.schedule.alpha(torch.tensor(1.0, dtype=F64))
    for s, x0 in enumerate(STATES):
        q1 = model.process.marginal(x0, alpha_1)  # (L, C): the prior term KL(q_1 || pi), O(eps^2 C)
        prior = float((q1 * torch.log(q1 * C)).sum())
        elbo = _elbo_by_quadrature(model, x0, 0.0) + prior
        assert elbo >= float(exact[s]) - 5e-3, (x0, elbo, float(exact[s]))


@pytest.mark.parametrize("draw", ["two-stage", "joint"])
def test_sampler_draws_the_chain(model, draw):
    """The posterior sampler's law over the 9 states is the chain's (T = 4, float64, 4000 draws), with
    either draw of a step: the posterior's parts then a token, or the whole posterior."""
    T = 4
    out = generate(model, num_samples=4000, batch_size=4000, steps=T, generator=0, noise_removal="sample", draw=draw)
    assert out.protocol["sampler"] == "posterior" and out.protocol["draw"] == draw and bool((out.nfe == T).all())
    index = (out.tokens * torch.tensor([C, 1])).sum(-1)
    freq = torch.bincount(index, minlength=len(STATES)).double() / 4000
    want = torch.exp(-_chain_nll(model, T))
    assert torch.allclose(freq, want, atol=0.03), (freq, want)


def test_samplers_follow_the_process(model):
    """A sampler draws only from the processes it declares: no absorbing sampler for UDLM, no
    posterior sampler for MDLM."""
    from harness.errors import PrimebenchError

    with pytest.raises(PrimebenchError, match="does not support the 'udlm'"):
        generate(model, "ancestral", num_samples=1, steps=2)
    mdlm = build_model("mdlm", vocab_size=C, seq_len=L, d_model=16, n_layers=1, n_heads=2)
    with pytest.raises(PrimebenchError, match="does not support the 'mdlm'"):
        generate(mdlm, "posterior", num_samples=1, steps=2)
    # a prefix is kept at every step
    out = generate(model, num_samples=5, steps=3, generator=1, prefix=torch.tensor([[2]]), noise_removal="sample")
    assert bool((out.tokens[:, 0] == 2).all())
