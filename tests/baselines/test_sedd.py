"""SEDD, the score-entropy families (absorbing and uniform graph), proven by enumeration on C = 3,
L = 2 toys with random weights:

* the DWDSE integral (plus the prior term, where it is not 0) is at least the exact -log p(x) of the
  model's own continuous-time reverse chain (rates sigma_t pi(z) s_theta(z)_y, solved by matrix
  exponentials over the 16 or 9 sequence states), for every x and several random networks;
* the Monte-Carlo ``nll`` is unbiased for that integral;
* the samplers draw from the reverse chain (Tweedie's law over the states at small T), and a
  denoiser's scores make Tweedie's step the posterior sampler's;
* known values of the score entropy and the score parameterisation (SEDD's shift by sigma).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from harness.errors import ConfigError, PrimebenchError
from harness.models import build_model
from harness.processes import _logsumexp_
from harness.sampling import generate
from harness.sampling.scores import SEDD_T_END
from tests.toys import randomize

C, L = 3, 2
F64 = torch.float64
TOKENS = torch.tensor(list(itertools.product(range(C), repeat=L)))  # the C^L clean rows


def _model(family: str, seed: int, **keys):
    m = build_model(family, vocab_size=C, seq_len=L, d_model=16, n_layers=1, n_heads=2, **keys)
    return randomize(m, seed, 0.15).eval()


def _states(model) -> torch.Tensor:
    return torch.tensor(list(itertools.product(range(model.process.states), repeat=L)))


def _log_scores(model, states: torch.Tensor, t: float) -> torch.Tensor:
    with torch.no_grad():
        return model.log_scores(states, torch.full((len(states),), t, dtype=torch.float32)).double()


def _grid(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Midpoints and widths of n intervals of (0, 1] in t = u^3 (dense near t = 0)."""
    u = torch.linspace(0, 1, n + 1, dtype=F64)
    edges = u**3
    return (edges[1:] + edges[:-1]) / 2, edges[1:] - edges[:-1]


def _scores_on_grid(model, n: int) -> torch.Tensor:
    """(n, S, L, V) the model's log scores at every state and every midpoint of :func:`_grid`, in
    one batched forward."""
    states = _states(model)
    mids, _ = _grid(n)
    S = len(states)
    rows = states.repeat(n, 1)
    t = mids.float().repeat_interleave(S)
    with torch.no_grad():
        log_s = model.log_scores(rows, t).double()
    return log_s.view(n, S, L, -1)


def _reverse_chain_nll(model, n: int) -> torch.Tensor:
    """-log p_0(x) for every clean row x (C^L,): the reverse CTMC from pi^L at t = 1 to t = 0, with
    expm of its generator at each interval's midpoint."""
    proc, sched = model.process, model.schedule
    states = _states(model)
    S = len(states)
    pi = proc.prior()
    p = pi[states].prod(-1)  # (S,) the start law
    mids, widths = _grid(n)
    scores = _scores_on_grid(model, n).exp()
    differ = (states[:, None, :] != states[None, :, :]).sum(-1) == 1  # one position changes
    where = (states[:, None, :] != states[None, :, :]).double().argmax(-1)  # which one
    a, b = differ.nonzero(as_tuple=True)
    i = where[a, b]
    for k in reversed(range(n)):
        sigma = float(-sched.alpha_prime(mids[k]) / sched.alpha(mids[k]))
        G = torch.zeros(S, S, dtype=F64)
        G[a, b] = sigma * pi[states[a, i]] * scores[k][a, i, states[b, i]]
        G -= torch.diag(G.sum(-1))
        p = p @ torch.linalg.matrix_exp(G * float(widths[k]))
    index = {tuple(r.tolist()): k for k, r in enumerate(states)}
    return -torch.log(torch.stack([p[index[tuple(r.tolist())]] for r in TOKENS]))


def _dwdse_integral(model, n: int, lo: float = 0.0) -> torch.Tensor:
    """int_lo^1 E_{z ~ q_t(. | x)} [sum over positions of the score entropy] dt for every clean row x."""
    proc, sched = model.process, model.schedule
    states = _states(model)
    S, R = len(states), len(TOKENS)
    mids, widths = _grid(n)
    scores = _scores_on_grid(model, n)
    x0 = TOKENS[:, None, :].expand(R, S, L)
    z = states[None].expand(R, S, L)
    total = torch.zeros(R, dtype=F64)
    for k in range(n):
        if mids[k] < lo:
            continue
        alpha, dalpha = sched.alpha(mids[k]), sched.alpha_prime(mids[k])
        q = proc.marginal(TOKENS, alpha)  # (R, L, V)
        prob = q[:, torch.arange(L)[None, :], states].prod(-1)  # (R, S)
        rate = proc.score_entropy(scores[k].expand(R, S, L, -1), x0, z, alpha, dalpha).sum(-1)
        total += float(widths[k]) * (prob * rate).sum(-1)
    return total


def _prior_term(model) -> torch.Tensor:
    """KL(q_1(. | x) || pi^L) for every clean row (finite where q_1 has pi's support)."""
    proc = model.process
    q = proc.marginal(TOKENS, model.schedule.alpha(torch.tensor(1.0, dtype=F64)))  # (R, L, V)
    pi = proc.prior()
    return (torch.xlogy(q, q) - torch.xlogy(q, pi)).sum((-1, -2))


# the absorbing graph under the linear schedule (alpha_1 = 0: no prior term); the uniform graph under
# the log-linear one (its sigma stays finite at t = 1; the prior term is finite and added)
CASES = [("sedd", dict(schedule="linear")), ("sedd-uniform", {})]


@pytest.mark.parametrize("family,keys", CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dwdse_bounds_the_exact_likelihood_of_the_reverse_chain(family, keys, seed):
    model = _model(family, seed, **keys)
    exact = _reverse_chain_nll(model, 600)
    assert float(torch.exp(-exact).sum()) == pytest.approx(1.0, abs=1e-6)  # a distribution over C^L
    bound = _dwdse_integral(model, 600) + _prior_term(model)
    assert bool((bound >= exact - 1e-3).all()), (bound, exact)
    assert float((bound - exact).max()) > 1e-3  # random scores: not tight, so the check can fail


@pytest.mark.parametrize("family", ["sedd", "sedd-uniform"])
def test_monte_carlo_nll_is_unbiased_for_the_integral(family):
    model = _model(family, 0)
    lo = 1e-3  # the estimator's t lies in [1e-3, 1], as MDLM's
    want = float(_dwdse_integral(model, 400, lo=lo)[TOKENS.tolist().index([2, 0])])
    got = model.nll(torch.tensor([[2, 0]]).expand(4, L), num_samples=800, generator=torch.Generator().manual_seed(0))
    mean, se = float(got.nats.mean()), float(got.stderr.max())
    assert abs(mean - want) < 4 * se + 2e-3, (mean, want, se)
    assert got.kind == "bound"


def test_score_entropy_known_value():
    """Absorbing, C = 3, z masked, alpha = 1/2 (r = 1), every score 1, alpha' = -1/4 (sigma = 1/2):
    sum_y s(y) = 3, -r log s(x_0) = 0, r log r - r = -1, so 1/2 * 2 = 1."""
    proc = _model("sedd", 0).process
    args = (torch.zeros(1, C + 1, dtype=F64), torch.tensor([0]), torch.tensor([C]), torch.tensor(0.5), -0.25)
    assert float(proc.score_entropy(*args)) == pytest.approx(1.0)
    # a position that is not masked costs nothing on the absorbing graph
    assert float(proc.score_entropy(args[0], args[1], torch.tensor([0]), *args[3:])) == 0.0


def test_scores_are_one_at_the_current_state_and_shifted_by_sigma():
    model = _model("sedd", 3)
    z = torch.tensor([[C, 1]])
    t = torch.tensor([0.3])
    log_s = _log_scores(model, z, 0.3)
    assert float(log_s[0, 0, C]) == 0.0 and float(log_s[0, 1, 1]) == 0.0
    with torch.no_grad():
        raw = model.backbone(z, t, None).double()
    alpha = 1 - (1 - 1e-3) * 0.3  # log-linear
    shift = math.log((1 - alpha) / alpha) + math.log(C)
    assert torch.allclose(log_s[0, 0, :C], raw[0, 0] - shift, atol=1e-5)
    # the denoiser the scores imply: softmax of the scores at a masked position, carried over elsewhere
    with torch.no_grad():
        log_p = model.log_probs(z, t).double()
    assert torch.allclose(log_p[0, 0].exp(), torch.softmax(log_s[0, 0, :C], -1), atol=1e-6)
    assert float(log_p[0, 1, 1]) == 0.0


def test_tweedie_law_is_the_reverse_chains_at_small_T():
    """Tweedie's 2-step law over every state, enumerated, against 20,000 draws."""
    model = _model("sedd", 4)
    out = generate(model, "tweedie", num_samples=20000, batch_size=20000, steps=2, generator=0)
    counts = torch.zeros(len(TOKENS), dtype=F64)
    for r, x in enumerate(TOKENS):
        counts[r] = (out.tokens == x).all(-1).sum()
    law = _tweedie_law(model, 2)
    tv = 0.5 * float((counts / counts.sum() - law).abs().sum())
    assert tv < 0.02, (tv, law)
    assert out.protocol["grid"]["t_end"] == SEDD_T_END and out.protocol["noise_removal"] == "sample"
    assert int(out.nfe[0]) == 3


def _tweedie_law(model, T: int) -> torch.Tensor:
    proc, sched = model.process, model.schedule
    states = _states(model)
    grid = 1.0 - torch.arange(T + 1, dtype=F64) * ((1.0 - SEDD_T_END) / T)
    grid[-1] = SEDD_T_END
    alpha = sched.alpha(grid)
    p = proc.prior()[states].prod(-1)

    def move(probs):  # (S, L, V') per-position laws -> (S, S') over sequences
        probs = probs / probs.sum(-1, keepdim=True)
        V = probs.shape[-1]
        targets = torch.tensor(list(itertools.product(range(V), repeat=L)))
        m = torch.ones(len(states), len(targets), dtype=F64)
        for i in range(L):
            m = m * probs[:, i, :][:, targets[:, i]]
        return m

    for k in range(T):
        log_s = _log_scores(model, states, float(grid[k]))
        p = p @ move(proc.tweedie_probs(log_s, states, alpha[k], alpha[k + 1]))
    log_s = _log_scores(model, states, float(grid[-1]))
    last = proc.tweedie_probs(log_s, states, alpha[-1], 1.0)[..., :C]
    return p @ move(last)


def test_tweedie_on_a_denoisers_scores_is_the_posterior_step():
    model = randomize(build_model("udlm", vocab_size=5, seq_len=4, d_model=16, n_layers=1, n_heads=2), 0)
    proc = model.process
    z = torch.randint(0, 5, (3, 4), generator=torch.Generator().manual_seed(0))
    t = torch.full((3,), 0.6)
    with torch.no_grad():
        log_s = model.sampler_log_scores(z[..., None], t)
        x_theta = model.log_probs(z, t).double().exp()
    a_t, a_s = model.schedule.alpha(torch.tensor(0.6, dtype=F64)), model.schedule.alpha(torch.tensor(0.4, dtype=F64))
    tw = proc.tweedie_probs(log_s, z, a_t, a_s)
    assert torch.allclose(tw / tw.sum(-1, keepdim=True), proc.posterior(z, x_theta, a_t, a_s), atol=1e-12)


@pytest.mark.parametrize("family", ["sedd", "sedd-uniform"])
@pytest.mark.parametrize("sampler", ["tweedie", "euler"])
def test_samplers_keep_the_prefix_and_give_tokens(family, sampler):
    model = _model(family, 5)
    model_l = build_model(family, vocab_size=7, seq_len=6, d_model=16, n_layers=1, n_heads=2)
    randomize(model_l, 1, 0.4)
    prefix = torch.tensor([[3, 1]])
    out = generate(model_l, sampler, num_samples=5, steps=4, prefix=prefix, generator=1)
    assert out.tokens.shape == (5, 6) and int(out.tokens.max()) < 7
    assert bool((out.tokens[:, :2] == prefix).all())
    again = generate(model_l, sampler, num_samples=5, steps=4, prefix=prefix, generator=1)
    assert torch.equal(out.tokens, again.tokens)
    assert model.family == family


def test_score_samplers_refuse_what_does_not_apply():
    model = _model("sedd", 0)
    with pytest.raises(PrimebenchError, match="t_end > 0"):
        generate(model, "euler", num_samples=1, steps=2, t_end=0.0)
    with pytest.raises(PrimebenchError, match="temperature and nucleus"):
        generate(model, "tweedie", num_samples=1, steps=2, temperature=0.7)
    with pytest.raises(PrimebenchError, match="does not support"):
        generate(model, "ancestral", num_samples=1, steps=2)


def test_config_refusals():
    with pytest.raises(ConfigError, match="time_conditioning"):
        build_model("sedd", vocab_size=5, seq_len=4, time_conditioning=False)
    with pytest.raises(ConfigError, match="scale_by_sigma"):
        build_model("sedd-uniform", vocab_size=5, seq_len=4, scale_by_sigma=True)


@pytest.mark.parametrize("family,scale", [("sedd", True), ("sedd", False), ("sedd-uniform", False)])
def test_no_graph_scores_and_score_entropy_equal_the_graph_forms_bit_for_bit(family, scale):
    # evaluation writes the scores into one tensor and consumes one float64 copy: the same bits
    model = build_model(family, scale_by_sigma=scale, vocab_size=37, seq_len=16, d_model=32, n_layers=2, n_heads=4)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3, generator=g)
    model.eval()
    z = torch.randint(0, model.process.states, (3, 16), generator=g)
    x0 = torch.randint(0, 37, (3, 16), generator=g)
    t = torch.rand(3, generator=g)
    alpha, rate = torch.rand(3, 1, generator=g).double(), -torch.rand(3, 1, generator=g).double()
    with torch.no_grad():
        fast = model.log_scores(z, t)
        fast_entropy = model.process.score_entropy(fast, x0, z, alpha, rate)
    graph = model.log_scores(z, t)
    assert graph.requires_grad and torch.equal(fast, graph.detach())
    assert torch.equal(fast_entropy, model.process.score_entropy(graph, x0, z, alpha, rate).detach())


def test_logsumexp_in_place_is_torchs():
    x = 5 * torch.randn(4, 6, 33, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    x[0, 0] = -torch.inf  # an empty row
    x[0, 1, 3] = torch.inf
    assert torch.equal(_logsumexp_(x.clone()), torch.logsumexp(x, -1))
