"""Forward processes as parts: their laws by enumeration, and the continuous-time ELBO proven a bound.

The proof of the bound: for one position and a time-dependent denoiser, the T-step reverse chain's
exact likelihood is a product of V x V matrices; its discrete-time ELBO (a sum of posterior KLs) is
above it for every T, and converges to the continuous-time integral of ``elbo_integrand``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from harness import diffusion
from harness.errors import InputError, PrimebenchError
from harness.processes import PROCESSES, Absorbing, ForwardProcess, Hybrid, Interpolating, Uniform, make_process
from harness.schedules import get_schedule

C = 4
PROCESS_CASES = [Absorbing(C), Uniform(C), Interpolating(C, 0.3), Hybrid(C, 0.3)]
IDS = [p.name for p in PROCESS_CASES]
F64 = torch.float64


def test_registry_and_facts():
    assert PROCESSES.names() == ["absorbing", "hybrid", "interpolating", "uniform"]
    assert make_process("absorbing", 7) == Absorbing(7) and Absorbing(7).mask_id == 7 and Absorbing(7).states == 8
    assert Uniform(7).mask_id is None and Uniform(7).states == 7
    assert make_process("interpolating", 5, mask_weight=0.25).describe()["mask_weight"] == 0.25
    with pytest.raises(PrimebenchError, match="did you mean 'uniform'"):
        make_process("unifrom", 5)
    with pytest.raises(InputError, match="mask_weight"):
        Interpolating(5, 1.0)
    with pytest.raises(InputError, match="at least 2"):
        Uniform(1)


@pytest.mark.parametrize("process", PROCESS_CASES, ids=IDS)
def test_marginal_and_transition_compose(process: ForwardProcess):
    """q_t(. | x_0) = sum_v q_s(v | x_0) q(. | x_s = v) (the chain is Markov), endpoints as stated."""
    pi = process.prior()
    assert torch.isclose(pi.sum(), torch.tensor(1.0, dtype=F64))
    x0 = torch.arange(C)
    assert torch.equal(process.marginal(x0, torch.tensor(1.0)), torch.eye(process.states, dtype=F64)[:C])
    assert torch.allclose(process.marginal(x0, torch.tensor(0.0)), pi.expand(C, -1))
    a_s, a_t = torch.tensor(0.7, dtype=F64), torch.tensor(0.3, dtype=F64)
    q_s = process.marginal(x0, a_s)  # (C, V)
    z = torch.arange(process.states)
    trans = process.transition(z, a_t, a_s)  # (V z, V v): q(z | v)
    assert torch.allclose(trans.sum(0), torch.ones(process.states, dtype=F64))  # each column a law over z
    assert torch.allclose(q_s @ trans.T, process.marginal(x0, a_t))


@pytest.mark.parametrize("process", PROCESS_CASES, ids=IDS)
def test_posterior_is_bayes_by_enumeration(process: ForwardProcess):
    a_s, a_t = torch.tensor(0.8, dtype=F64), torch.tensor(0.35, dtype=F64)
    for x0 in range(C):
        q_s = process.marginal(torch.tensor(x0), a_s)  # (V,)
        for z in range(process.states):
            joint = torch.stack(
                [q_s[v] * process.transition(torch.tensor(z), a_t, a_s)[v] for v in range(process.states)]
            )
            if joint.sum() == 0:
                continue  # z cannot be reached from x0
            got = process.posterior(torch.tensor(z), torch.tensor(x0), a_t, a_s)
            assert torch.allclose(got, joint / joint.sum())
    # with probabilities in place of x0: Bayes with the mixture of marginals, a law over the V states
    probs = torch.softmax(torch.randn(6, C, dtype=F64), -1)
    z = torch.randint(process.states, (6,))
    post = process.posterior(z, probs, a_t, a_s)
    assert torch.allclose(post.sum(-1), torch.ones(6, dtype=F64)) and bool((post >= 0).all())


@pytest.mark.parametrize("process", PROCESS_CASES, ids=IDS)
def test_posterior_parts_make_the_posterior(process: ForwardProcess):
    """stay [v = z] + from_x0 x(v) + from_pi pi(v), normalised, is the posterior for ids and for
    probabilities, at every state z (a mask included); the weights sum to q_t(z | x)."""
    a_s, a_t = 0.8, 0.35
    probs = torch.softmax(torch.randn(process.states, C, dtype=F64), -1)
    z = torch.arange(process.states)
    at_z = torch.cat([probs.diagonal()[: min(C, process.states)], torch.zeros(process.states - C, dtype=F64)])
    stay, theta, prior = process.posterior_parts(z, at_z, a_t, a_s)
    x = F.pad(probs, (0, process.states - C))
    pi_s = process.prior(alpha=a_s)  # the law the noise part is redrawn from (pi_s when pi moves)
    mix = stay[:, None] * torch.eye(process.states, dtype=F64) + theta[:, None] * x + prior[:, None] * pi_s
    assert torch.allclose(mix / mix.sum(-1, keepdim=True), process.posterior(z, probs, a_t, a_s))
    q_t = process.marginal(probs, torch.tensor(a_t, dtype=F64)).gather(-1, z[:, None])[:, 0]
    assert torch.allclose(stay + theta + prior, q_t)


def test_absorbing_reverse_step_is_mdlms():
    """At a masked position the absorbing posterior with x_theta is MDLM's C + 1 outcomes: token c with
    p(c) (alpha_s - alpha_t), stay masked with 1 - alpha_s, over 1 - alpha_t."""
    p = Absorbing(C)
    probs = torch.softmax(torch.randn(5, C, dtype=F64), -1)
    a_s, a_t = 0.6, 0.2
    post = p.posterior(torch.full((5,), C), probs, torch.tensor(a_t, dtype=F64), torch.tensor(a_s, dtype=F64))
    want = torch.cat([probs * (a_s - a_t), torch.full((5, 1), 1 - a_s, dtype=F64)], -1) / (1 - a_t)
    assert torch.allclose(post, want)
    # an unmasked position stays as it is
    post = p.posterior(torch.tensor([2]), probs[:1], torch.tensor(a_t, dtype=F64), torch.tensor(a_s, dtype=F64))
    assert torch.equal(post[0], torch.eye(C + 1, dtype=F64)[2])


def _generic(process, *args):
    return ForwardProcess.elbo_integrand(process, *args)


@pytest.mark.parametrize("process", PROCESS_CASES, ids=IDS)
def test_integrand_is_a_divergence(process: ForwardProcess):
    g = torch.Generator().manual_seed(0)
    x0 = torch.randint(C, (50,), generator=g)
    z = torch.randint(process.states, (50,), generator=g)
    alpha = torch.rand(50, generator=g, dtype=F64) * 0.98 + 0.01
    log_x = torch.log_softmax(torch.randn(50, C, generator=g, dtype=F64), -1)
    got = process.elbo_integrand(log_x, x0, z, alpha, -torch.ones(50, dtype=F64))
    assert bool((got >= -1e-12).all())
    perfect = torch.log(torch.nn.functional.one_hot(x0, C).to(F64).clamp_min(1e-300))
    assert torch.allclose(
        process.elbo_integrand(perfect, x0, z, alpha, -torch.ones(50, dtype=F64)), torch.zeros(50, dtype=F64), atol=1e-9
    )
    # the absorbing closed form is the generic integrand; the generic one is what the others use
    assert torch.allclose(got, _generic(process, log_x, x0, z, alpha, -torch.ones(50, dtype=F64)))


def test_uniform_integrand_known_values():
    """UDLM's integrand at hand-checked points (C = 2, alpha = 1/2, alpha' = -1, sigma = 2):
    q_x = (3/4, 1/4) for x_0 = 0. z = 0, x_theta = (1/2, 1/2): q_theta = (1/2, 1/2), r_x(1) = 1/3,
    r_theta(1) = 1; integrand = 2 * 1/2 * (1 - 1/3 + (1/3) log((1/3) / 1)) = 2/3 - log(3)/3."""
    p = Uniform(2)
    got = p.elbo_integrand(
        torch.log(torch.tensor([[0.5, 0.5]], dtype=F64)),
        torch.tensor([0]),
        torch.tensor([0]),
        torch.tensor([0.5], dtype=F64),
        torch.tensor([-1.0], dtype=F64),
    )
    assert torch.allclose(got, torch.tensor([2 / 3 - np.log(3) / 3], dtype=F64))


def _denoiser(process: ForwardProcess, seed: int):
    """A time-dependent x_theta(z, t): softmax(A[z] + t B[z]) over the C categories."""
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(process.states, C, generator=g, dtype=F64)
    B = torch.randn(process.states, C, generator=g, dtype=F64)
    return lambda z, t: torch.log_softmax(A[z] + t * B[z], -1)


def _exact_and_elbo(process: ForwardProcess, log_x, T: int):
    """-log p_T(x_0) and the T-step discrete ELBO, (C,) each, for the linear schedule alpha = 1 - t."""
    V = process.states
    z = torch.arange(V)
    grid = torch.linspace(0, 1, T + 1, dtype=F64)
    row = process.prior()  # the law of x_{t_T} = x_1
    elbo = torch.zeros(C, dtype=F64)
    for k in range(T, 0, -1):
        a_t, a_s = 1 - grid[k], 1 - grid[k - 1]
        step = process.posterior(z, log_x(z, grid[k]).exp(), a_t, a_s).nan_to_num(
            0.0
        )  # (V z, V v); 0 rows: z unreachable
        row = row @ step
        for x0 in range(C):
            q_z = process.marginal(torch.tensor(x0), a_t)  # (V,)
            truth = process.posterior(z, torch.full((V,), x0), a_t, a_s)  # (V z, V v)
            kl = (torch.xlogy(truth, truth) - torch.xlogy(truth, step)).sum(-1)
            elbo[x0] += (q_z * torch.where(q_z > 0, kl, torch.zeros_like(kl))).sum()
    return -torch.log(row[:C]), elbo


def _continuous_elbo(process: ForwardProcess, log_x, nodes: int = 400):
    """int_0^1 sum_z q_t(z | x_0) elbo_integrand dt by Gauss-Legendre, (C,)."""
    t_nodes, w = np.polynomial.legendre.leggauss(nodes)
    t_nodes, w = (t_nodes + 1) / 2, w / 2
    z = torch.arange(process.states)
    out = torch.zeros(C, dtype=F64)
    for t, wt in zip(t_nodes, w):
        alpha = torch.tensor(1 - t, dtype=F64)
        for x0 in range(C):
            q_z = process.marginal(torch.tensor(x0), alpha)
            rate = process.elbo_integrand(
                log_x(z, float(t)), torch.full((process.states,), x0), z, alpha, torch.tensor(-1.0, dtype=F64)
            )
            out[x0] += wt * (q_z * rate).sum()
    return out


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("process", PROCESS_CASES, ids=IDS)
def test_continuous_elbo_is_a_bound_by_enumeration(process: ForwardProcess, seed: int):
    log_x = _denoiser(process, seed)
    limit = _continuous_elbo(process, log_x)
    gaps = []
    for T in (32, 128, 512):
        exact, elbo = _exact_and_elbo(process, log_x, T)
        assert bool((elbo >= exact - 1e-12).all()), (T, elbo, exact)  # the discrete ELBO bounds the chain
        assert bool((limit >= exact - 2e-3).all())  # and so does the continuous one, to the chain's O(1/T)
        gaps.append(float((elbo - limit).abs().max()))
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 5e-3  # the discrete ELBO converges to the integral
    assert float(torch.exp(-exact).sum()) == pytest.approx(1.0)  # the chain is a law over the C tokens


def test_corrupt_with_each_process():
    """The estimator's draw through a process: absorbing writes the mask id (the draw as it always
    was), uniform redraws the hit units from the C tokens; the mask count is absorbing-only."""
    g = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    x0 = torch.randint(C, (64, 16), generator=torch.Generator().manual_seed(0))
    valid = torch.ones_like(x0, dtype=torch.bool)
    u = torch.rand(64, dtype=F64, generator=torch.Generator().manual_seed(1))
    sched = get_schedule("loglinear")
    z, hit, w, t = diffusion.corrupt(x0, u, valid, sampler="t", schedule=sched, process=Absorbing(C), generator=g())
    assert torch.equal(z, torch.where(hit, C, x0)) and torch.equal(w, sched.weight(t))
    zu, hit_u, wu, _ = diffusion.corrupt(x0, u, valid, sampler="t", schedule=sched, process=Uniform(C), generator=g())
    assert torch.equal(hit_u, hit) and torch.equal(wu, torch.ones_like(wu))  # the same units are hit
    assert torch.equal(zu[~hit], x0[~hit]) and int(zu.max()) < C
    assert bool((zu[hit] != x0[hit]).any())
    with pytest.raises(InputError, match="absorbing"):
        diffusion.corrupt(x0, u, valid, sampler="n", schedule=sched, process=Uniform(C), generator=g())
    # a redraw law that moves with time is drawn at each block's own time (GIDD's process in blocks)
    hybrid, clock = Hybrid(C, 0.3), get_schedule("gidd:0.3")
    ub = torch.tensor([[0.1, 0.99]], dtype=F64).expand(64, 2)
    zb, hit_b, _, tb = diffusion.corrupt_blocks(
        x0, ub, valid, block_size=8, sampler="t", schedule=clock, process=hybrid, generator=g()
    )
    masks = (zb == C) & hit_b
    # the late block (t ~ 0.99) redraws mostly to the mask, the early one (t ~ 0.1) mostly to tokens
    assert masks[:, 8:].sum() / hit_b[:, 8:].sum() > 0.8 > 0.5 > masks[:, :8].sum() / hit_b[:, :8].sum().clamp_min(1)


@pytest.mark.parametrize("process", PROCESS_CASES, ids=IDS)
def test_noise_draws_from_the_prior(process: ForwardProcess):
    n = 200_000
    hit = torch.ones(n, dtype=torch.bool)
    draws = process.noise(torch.zeros(n, dtype=torch.long), hit, generator=torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=process.states).double() / n
    assert torch.allclose(freq, process.prior(), atol=4e-3)
    # per-row generators: a row's draw does not depend on the rows beside it
    clean = torch.zeros(3, 8, dtype=torch.long)
    rows = process.noise(
        clean, torch.ones_like(clean, dtype=torch.bool), generator=[torch.Generator().manual_seed(i) for i in range(3)]
    )
    alone = process.noise(
        clean[1:2], torch.ones_like(clean[1:2], dtype=torch.bool), generator=[torch.Generator().manual_seed(1)]
    )
    assert torch.equal(rows[1:2], alone)
    # the initial state of a sampler is all noise
    start = process.initial_state((2, 5), generator=torch.Generator().manual_seed(0))
    assert start.shape == (2, 5) and bool(process.unrevealed(start).all())


@pytest.mark.parametrize("C", [2, 3, 50, 1000])
def test_uniform_closed_form_is_the_generic_integrand(C):
    """UDLM's one-pass closed form (Uniform.elbo_integrand) equals the generic ratio form, with per-row
    and scalar alpha, every z (hit and not), and leaves its input untouched."""
    from harness.processes import ForwardProcess, Uniform

    g = torch.Generator().manual_seed(C)
    B, L = 5, 6
    x0 = torch.randint(C, (B, L), generator=g)
    z = torch.where(torch.rand(B, L, generator=g) < 0.5, torch.randint(C, (B, L), generator=g), x0)
    log_p = torch.log_softmax(torch.randn(B, L, C, generator=g, dtype=torch.float64), -1)
    kept = log_p.clone()
    t = torch.rand(B, 1, generator=g, dtype=torch.float64) * 0.98 + 0.01
    u = Uniform(C)
    for alpha, alpha_prime in (
        (1 - t, -torch.ones_like(t)),
        (torch.tensor(0.3, dtype=torch.float64), torch.tensor(-2.0)),
    ):
        fast = u.elbo_integrand(log_p, x0, z, alpha, alpha_prime)
        slow = ForwardProcess.elbo_integrand(u, log_p, x0, z, alpha, alpha_prime)
        torch.testing.assert_close(fast, slow, rtol=1e-12, atol=1e-12)
    assert torch.equal(log_p, kept)


# -- concrete scores (SEDD's parameterisation) ---------------------------------------------------------
def _score_case(process: ForwardProcess, seed: int, n: int = 64):
    g = torch.Generator().manual_seed(seed)
    x0 = torch.randint(0, C, (n,), generator=g)
    alpha = torch.tensor(0.37, dtype=F64)
    z = torch.multinomial(process.marginal(x0, alpha, dtype=F64), 1, generator=g)[:, 0]  # z ~ q_t(. | x0)
    x_theta = torch.softmax(torch.randn(n, C, generator=g, dtype=F64), -1)
    return x0, z, alpha, x_theta


@pytest.mark.parametrize("process", PROCESS_CASES, ids=IDS)
def test_scores_and_denoisers_are_each_others_inverse(process: ForwardProcess):
    x0, z, alpha, x_theta = _score_case(process, 0)
    log_s = process.log_ratios(x_theta, z, alpha)
    assert torch.allclose(log_s.gather(-1, z[:, None]), torch.zeros(len(z), 1, dtype=F64))  # s(z) = 1
    assert torch.allclose(process.denoiser(log_s, z, alpha), x_theta, atol=1e-12)
    # the score entropy of a denoiser's scores is its ELBO integrand (SEDD's DWDSE generalises it)
    dalpha = torch.tensor(-0.8, dtype=F64)
    got = process.score_entropy(log_s, x0, z, alpha, dalpha)
    want = process.elbo_integrand(torch.log(x_theta), x0, z, alpha, dalpha)
    assert torch.allclose(got, want, atol=1e-10), (got - want).abs().max()
    # Tweedie's step on a denoiser's scores is the posterior step, exactly
    alpha_s = torch.tensor(0.6, dtype=F64)
    if process.moving_prior:  # SEDD's steps assume a fixed redraw law: refused, not silently wrong
        with pytest.raises(InputError, match="posterior sampler"):
            process.tweedie_probs(log_s, z, alpha, alpha_s)
        return
    tw = process.tweedie_probs(log_s, z, alpha, alpha_s)
    assert torch.allclose(tw / tw.sum(-1, keepdim=True), process.posterior(z, x_theta, alpha, alpha_s), atol=1e-12)


@pytest.mark.parametrize("process", [Absorbing(C), Uniform(C)], ids=["absorbing", "uniform"])
def test_score_entropy_closed_forms_are_the_generic_one(process: ForwardProcess):
    """SEDD's closed forms (graph_lib's ``score_entropy``) against the generic definition, for
    arbitrary positive scores (not a denoiser's), at every (x0, z) pair."""
    g = torch.Generator().manual_seed(1)
    x0 = torch.arange(C).repeat_interleave(process.states)
    z = torch.arange(process.states).repeat(C)
    log_s = torch.randn(len(z), process.states, generator=g, dtype=F64)
    alpha, dalpha = torch.tensor(0.42, dtype=F64), torch.tensor(-1.3, dtype=F64)
    got = process.score_entropy(log_s, x0, z, alpha, dalpha)
    want = ForwardProcess.score_entropy(process, log_s, x0, z, alpha, dalpha)
    assert torch.allclose(got, want, atol=1e-12), (got - want).abs().max()
    assert bool((got >= -1e-12).all())  # a Bregman divergence times a positive rate


@pytest.mark.parametrize("process", [Absorbing(C), Uniform(C)], ids=["absorbing", "uniform"])
def test_euler_step_is_a_law_and_moves_at_the_reverse_rate(process: ForwardProcess):
    g = torch.Generator().manual_seed(2)
    z = torch.randint(0, process.states, (16,), generator=g)
    log_s = torch.randn(16, process.states, generator=g, dtype=F64)
    alpha, dalpha, dt = torch.tensor(0.5, dtype=F64), torch.tensor(-1.0, dtype=F64), 1e-3
    p = process.euler_probs(log_s, z, alpha, dalpha, dt)
    assert torch.allclose(p.sum(-1), torch.ones(16, dtype=F64)) and bool((p >= 0).all())
    sigma = 2.0  # -alpha' / alpha
    y = (z + 1) % process.states
    rate = sigma * process.prior(dtype=F64)[z] * log_s.exp().gather(-1, y[:, None])[:, 0]
    assert torch.allclose(p.gather(-1, y[:, None])[:, 0], dt * rate)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("categories", [5, 31, 32, 37, 300])
def test_hybrid_integrand_in_place_equals_the_graph_form_bit_for_bit(dtype, categories):
    # GIDD's committed numbers: evaluation's in-place form gives the training (graph) form's bits
    g = torch.Generator().manual_seed(categories)
    for p_uniform in (0.0, 0.1, 0.5):
        p = Hybrid(categories, p_uniform)
        log_x = torch.log_softmax(3 * torch.randn(3, 9, categories, generator=g), -1).to(dtype)
        x0 = torch.randint(0, categories, (3, 9), generator=g)
        z = torch.where(
            torch.rand(3, 9, generator=g) < 0.4,
            torch.full_like(x0, categories),
            torch.randint(0, categories, (3, 9), generator=g),
        )
        z[0, :3] = x0[0, :3]  # the state at x_0 too
        for alpha in (torch.rand(3, 1, generator=g) * 0.98 + 0.01, torch.rand(3, 9, generator=g), torch.tensor(0.3)):
            rate = -torch.rand(alpha.shape, generator=g)
            with torch.no_grad():
                got = p.elbo_integrand(log_x, x0, z, alpha, rate)
            graph = p.elbo_integrand(log_x.detach().requires_grad_(), x0, z, alpha, rate)
            assert graph.requires_grad and torch.equal(got, graph.detach())


def test_hybrid_integrand_takes_token_ids():
    p = Hybrid(5, 0.1)
    with pytest.raises(InputError, match="token ids"):
        p.elbo_integrand(torch.zeros(2, 5), torch.full((2, 5), 0.2), torch.zeros(2, dtype=torch.long), 0.5, -1.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_uniform_integrand_in_place_equals_the_graph_form_bit_for_bit(dtype):
    # UDLM's and DUO's evaluation reuses its one float64 tensor in place: the training form's bits
    g = torch.Generator().manual_seed(5)
    p = Uniform(40)
    log_x = torch.log_softmax(3 * torch.randn(3, 9, 40, generator=g), -1).to(dtype)
    x0 = torch.randint(0, 40, (3, 9), generator=g)
    z = torch.where(torch.rand(3, 9, generator=g) < 0.5, x0, torch.randint(0, 40, (3, 9), generator=g))
    alpha, rate = torch.rand(3, 1, generator=g) * 0.98 + 0.01, -torch.rand(3, 1, generator=g)
    before = log_x.clone()
    with torch.no_grad():
        got = p.elbo_integrand(log_x, x0, z, alpha, rate)
    assert torch.equal(log_x, before)  # the caller's tensor is left alone, float64 included
    graph = p.elbo_integrand(log_x.detach().requires_grad_(), x0, z, alpha, rate)
    assert graph.requires_grad and torch.equal(got, graph.detach())
