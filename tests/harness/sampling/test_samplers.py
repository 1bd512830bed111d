"""Samplers against exact answers: enumerated sampler distributions of tiny models, the any-order
(first-hitting) likelihood of ``prime.bounds``, reveal-time order statistics, the analytic idle-step
ratio, MDLM's reference update, caching, validity of Prime codes, and the error paths."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict

import pytest
import torch
from scipy import stats

from harness.audit.idle import idle_step_ratio
from harness.errors import PrimebenchError
from harness.sampling import SAMPLERS, generate, sampler_for
from harness.sampling.ancestral import time_grid
from harness.sampling.maskgit import decode_counts
from harness.sampling.units import UnitModel
from prime.bounds import exact_nll
from prime.subtokens import consistent
from tests.toys import tiny

pytestmark = pytest.mark.usefixtures("single_thread")


def chi2_pvalue(tokens: torch.Tensor, probs: dict[tuple, float]) -> float:
    """Pearson chi-square of sampled sequences (N, L) against an exact distribution over sequences."""
    keys = sorted(probs)
    index = {k: i for i, k in enumerate(keys)}
    counts = torch.zeros(len(keys), dtype=torch.float64)
    for row in tokens.tolist():
        counts[index[tuple(row)]] += 1  # a KeyError here is a sequence of probability 0: a failure
    expected = torch.tensor([probs[k] for k in keys], dtype=torch.float64) * tokens.shape[0]
    return float(stats.chisquare(counts.numpy(), expected.numpy() * counts.sum().item() / expected.sum().item()).pvalue)


def all_sequences(C: int, L: int) -> torch.Tensor:
    return torch.tensor(list(itertools.product(range(C), repeat=L)), dtype=torch.long)


def any_order_distribution(model) -> dict[tuple, float]:
    """Exact distribution of the continuous-time (one unit at a time) sampler, from prime.bounds.exact_nll."""
    units = UnitModel(model)
    x = all_sequences(units.vocab_size, units.seq_len)
    with torch.no_grad():
        if model.subtokens:  # the family's own fact: units are sub-tokens of a code
            nll = exact_nll(model.denoiser(), x, C=units.vocab_size, ell=units.ell)
        else:
            nll = exact_nll(lambda y: model.backbone(y[..., 0]), x, C=units.vocab_size, ell=1)
    p = torch.exp(-nll.double())
    assert abs(float(p.sum()) - 1.0) < 1e-5
    return {tuple(row): float(q) for row, q in zip(x.tolist(), p)}


def exact_ancestral_distribution(model, steps: int) -> dict[tuple, float]:
    """Exact distribution of the T-step ancestral sampler by forward enumeration of unit states.

    MDLM: every masked position independently stays masked with prob m_s/m_t or takes token c with
    prob p(c | z) (m_t - m_s)/m_t. Prime: per token, x_hat ~ p(. | y), then every masked sub-token
    independently takes x_hat's digit with prob (m_t - m_s)/m_t. Written independently of the sampler.
    """
    units = UnitModel(model)
    L, ell, mask = units.seq_len, units.ell, units.process.mask_id
    m = model.schedule.mask_prob(time_grid(steps))
    start = tuple([mask] * (L * ell))
    dist = {start: 1.0}
    for k in range(1, steps + 1):
        r = float((m[k - 1] - m[k]) / m[k - 1])
        states = list(dist)
        with torch.no_grad():
            y = torch.tensor(states, dtype=torch.long).view(len(states), L, ell)
            probs = units.log_probs(y, 0.5).double().exp()  # time-independent: t unused
            probs = probs / probs.sum(-1, keepdim=True)  # float32 outputs sum to 1 only to ~1e-7
        new = defaultdict(float)
        for s_idx, state in enumerate(states):
            per_token = []
            for i in range(L):
                cur = state[i * ell : (i + 1) * ell]
                out = defaultdict(float)
                if mask not in cur:
                    out[cur] = 1.0
                else:
                    masked = [j for j in range(ell) if cur[j] == mask]
                    for c in range(units.vocab_size):
                        pc = float(probs[s_idx, i, c])
                        if pc == 0.0:
                            continue
                        digits = units.encode(torch.tensor(c)).tolist()
                        for reveal in itertools.product([0, 1], repeat=len(masked)):
                            nxt = list(cur)
                            w = pc
                            for j, rv in zip(masked, reveal):
                                w *= r if rv else 1 - r
                                if rv:
                                    nxt[j] = digits[j]
                            out[tuple(nxt)] += w
                per_token.append(out)
            for combo in itertools.product(*(d.items() for d in per_token)):
                w = dist[state]
                nxt = ()
                for part, pw in combo:
                    nxt += part
                    w *= pw
                if w > 0:
                    new[nxt] += w
        dist = new
    tokens = defaultdict(float)
    for state, w in dist.items():
        y = torch.tensor(state).view(1, L, ell)
        assert mask not in state  # the grid ends at t = 0: everything is revealed
        tokens[tuple(units.decode(y)[0].tolist())] += w
    return dict(tokens)


CASES = [
    ("mdlm", dict(C=3, L=2)),
    ("masked", dict(C=3, L=2)),
    ("prime", dict(C=5, L=2, ell=2)),
]


@pytest.mark.parametrize("draw", ["two-stage", "joint"])
@pytest.mark.parametrize("family,shape", CASES)
def test_ancestral_matches_exact_enumeration(family, shape, draw):
    """Both draws of the ancestral step (float64) have the sampler's exact law, for every family."""
    model = tiny(family, **shape, seed=1)
    exact = exact_ancestral_distribution(model, steps=4)
    assert abs(sum(exact.values()) - 1) < 1e-9
    out = generate(model, "ancestral", num_samples=20_000, batch_size=20_000, steps=4, generator=3, draw=draw)
    assert out.protocol["draw"] == draw
    assert chi2_pvalue(out.tokens, exact) > 1e-3
    # power: the same samples against a law with two sequences' masses swapped are rejected
    keys = sorted(exact, key=exact.get)
    wrong = dict(exact)
    wrong[keys[0]], wrong[keys[-1]] = exact[keys[-1]], exact[keys[0]]
    assert chi2_pvalue(out.tokens, wrong) < 1e-3


@pytest.mark.parametrize("family,shape", CASES)
def test_first_hitting_matches_any_order_likelihood(family, shape):
    model = tiny(family, **shape, seed=2)
    exact = any_order_distribution(model)
    out = generate(model, "first-hitting", num_samples=20_000, batch_size=20_000, generator=4)
    assert chi2_pvalue(out.tokens, exact) > 1e-3
    units = UnitModel(model)
    assert (out.nfe == units.seq_len * units.ell).all() and (out.idle_steps == 0).all()


def table_model(family: str, C: int, ell: int = 1):
    """A model whose denoiser is the true conditional of a strongly dependent joint q over L = 2
    tokens (the restricted joint for Prime). Its one-unit-at-a-time sampler samples q exactly."""
    model = tiny(family, C=C, L=2, **({"ell": ell} if family == "prime" else {}))
    i = torch.arange(C, dtype=torch.float64)
    q = torch.exp(-2.0 * (i[:, None] - i[None, :]).abs()) * (1 + i[:, None])
    q = q / q.sum()
    base = model.base if family == "prime" else C

    def log_probs(z, t=None, attention_mask=None):
        y = z if family == "prime" else z[..., None]
        ok = consistent(y, C, base, ell).double()  # (B, 2, C): V(y^i)
        joint = q * ok[:, 0, :, None] * ok[:, 1, None, :]  # (B, C, C)
        marginal = torch.stack([joint.sum(2), joint.sum(1)], dim=1)
        return torch.log(marginal / marginal.sum(-1, keepdim=True)).float()

    model.log_probs = log_probs
    return model, {k: float(q[k]) for k in itertools.product(range(C), repeat=2)}


@pytest.mark.parametrize("family,C,ell", [("mdlm", 3, 1), ("prime", 5, 2)])
def test_table_model_any_order_limit_and_power(family, C, ell):
    model, q = table_model(family, C, ell)
    few = generate(model, "ancestral", num_samples=20_000, batch_size=20_000, steps=4, generator=30)
    assert chi2_pvalue(few.tokens, exact_ancestral_distribution(model, steps=4)) > 1e-3
    assert chi2_pvalue(few.tokens, q) < 1e-6  # power: 4 steps reveal units together, far from q
    # many steps: the exact T-step distribution approaches q (the any-order sampler's), and samples follow it
    exact = exact_ancestral_distribution(model, steps=48)
    assert sum(abs(exact[k] - q[k]) for k in q) / 2 < 0.02
    many = generate(model, "ancestral", num_samples=10_000, batch_size=10_000, steps=48, generator=31)
    assert chi2_pvalue(many.tokens, exact) > 1e-3
    assert (many.nfe < 48).all()  # the cache skips idle steps
    fhs = generate(model, "first-hitting", num_samples=20_000, batch_size=20_000, generator=32)
    assert chi2_pvalue(fhs.tokens, q) > 1e-3


@pytest.mark.parametrize("family,kwargs", [("mdlm", {}), ("prime", {"ell": 2})])
def test_cache_is_exact_and_saves_calls(family, kwargs):
    model = tiny(family, C=7, L=6, seed=7, **kwargs)
    cached = generate(model, "ancestral", num_samples=48, batch_size=24, steps=32, cache=True, generator=8)
    fresh = generate(model, "ancestral", num_samples=48, batch_size=24, steps=32, cache=False, generator=8)
    assert torch.equal(cached.tokens, fresh.tokens)
    assert torch.equal(cached.idle_steps, fresh.idle_steps)
    assert cached.nfe.sum() < fresh.nfe.sum()
    assert (cached.nfe == 32 - cached.idle_steps).float().mean() > 0.5  # one call per non-idle step, mostly
    assert cached.protocol["cache"] is True and cached.protocol["cache_exact"] is True


def test_cache_defaults_off_for_time_conditioned_models_under_the_joint_draw():
    model = tiny("mdlm", C=5, L=4, time_conditioning=True)
    out = generate(model, "ancestral", num_samples=4, steps=8, generator=0, draw="joint")
    assert out.protocol["cache"] is False and int(out.nfe.max()) == 8  # a call at every step with a masked unit
    forced = generate(model, "ancestral", num_samples=4, steps=8, cache=True, generator=0, draw="joint")
    assert forced.protocol["cache"] is True and forced.protocol["cache_exact"] is False


@pytest.mark.parametrize("family,kwargs", [("mdlm", {}), ("prime", {"ell": 2})])
def test_two_stage_cache_is_exact_even_for_time_conditioned_networks(family, kwargs):
    """The two-stage draw calls the denoiser only at steps that reveal a unit, at that step's t:
    same samples as calling it at every step, and NFE = the non-idle steps."""
    model = tiny(family, C=5, L=4, time_conditioning=True, **kwargs)
    lazy = generate(model, "ancestral", num_samples=16, batch_size=16, steps=20, generator=3)
    full = generate(model, "ancestral", num_samples=16, batch_size=16, steps=20, generator=3, cache=False)
    assert lazy.protocol["draw"] == "two-stage" and lazy.protocol["cache"] and lazy.protocol["cache_exact"]
    assert torch.equal(lazy.tokens, full.tokens) and torch.equal(lazy.idle_steps, full.idle_steps)
    assert torch.equal(lazy.nfe, 20 - lazy.idle_steps) and int(lazy.nfe.sum()) < int(full.nfe.sum())


def test_mdlm_legacy_float32_reproduces_mdlm_reference_update(monkeypatch):
    """Our joint draw == MDLM's ``_ddpm_caching_update`` + ``_sample_categorical`` (fp32, linear
    move chance), written out here from the reference description, on identical uniforms: MDLM
    draws U at every position and keeps the draws at masked ones; we draw only those."""
    import harness.sampling.categorical as categorical

    model = tiny("mdlm", C=11, L=8, seed=9, schedule="linear")
    T, N, C = 8, 32, 11
    g = torch.Generator().manual_seed(10)
    x = torch.full((N, 8), C, dtype=torch.long)
    timesteps = torch.linspace(1, 0, T + 1)
    used = []  # the uniforms at the masked positions, step by step
    with torch.no_grad():
        for i in range(T):
            t, s = float(timesteps[i]), float(timesteps[i + 1])
            p_x0 = model.log_probs(x).exp()
            q_xs = torch.cat([p_x0 * (t - s), torch.full((N, 8, 1), s)], dim=-1)
            u = torch.rand(q_xs.shape, dtype=torch.float32, generator=g)
            _x = (q_xs / (1e-10 - torch.log(u + 1e-10))).argmax(dim=-1)
            used.append(u[x == C])
            x = torch.where(x != C, x, _x)

    def replay(shape, *, dtype, device, generator):
        u = used.pop(0)
        assert tuple(u.shape) == tuple(shape) and dtype == torch.float32
        return u

    monkeypatch.setattr(categorical, "_draw_uniform", replay)
    out = generate(
        model,
        "ancestral",
        num_samples=N,
        batch_size=N,
        steps=T,
        dtype="float32",
        method="mdlm-legacy",
        cache=False,
        generator=10,
        draw="joint",
    )
    assert torch.equal(out.tokens, x) and not used


def test_float32_joint_draw_truncates_and_the_two_stage_draw_does_not():
    """The exact laws of the two draws in float32 for one early MDLM step at a GPT-2-sized vocabulary
    (a Zipf token distribution): the joint draw's Gumbel cap loses most of the reveal mass of the rare
    tokens; the two-stage draw's float64 reveal is exact and its float32 inverse CDF moves each
    class by at most one grid cell."""
    from harness.audit.gumbel import grid_gumbel_probs, grid_inverse_cdf_probs, mdlm_step_distribution

    C, T = 50257, 1000
    ranks = torch.arange(1, C + 1, dtype=torch.float64)
    p = 1 / ranks
    p /= p.sum()
    step = mdlm_step_distribution(p, step=1, steps=T)  # (C + 1,) token masses, then "stay masked"
    reveal = 1 - step[-1]
    joint = grid_gumbel_probs(step, "float32")
    tokens_joint = joint[:-1] / joint[:-1].sum()
    tokens_two_stage = grid_inverse_cdf_probs(p, "float32")
    rare = ranks > 1000
    assert float(p[rare].sum()) > 0.3
    assert float(tokens_joint[rare].sum()) < 0.5 * float(p[rare].sum())  # truncated: rare tokens lose mass
    assert abs(float(tokens_two_stage[rare].sum()) - float(p[rare].sum())) < C * 2.0**-24
    assert float((tokens_two_stage - p).abs().max()) <= 2.0**-24 * 1.01
    assert float(joint[:-1].sum()) < 0.9 * float(reveal)  # the joint draw also reveals too rarely


@pytest.mark.parametrize("sampler", ["ancestral", "first-hitting", "maskgit"])
def test_prime_codes_are_valid_with_carry_over(sampler):
    model = tiny("prime", C=7, L=5, ell=2, seed=11)  # base 3: codes 7 and 8 are invalid
    assert model.base == 3
    steps = None if sampler == "first-hitting" else 6
    out = generate(model, sampler, num_samples=300, batch_size=300, steps=steps, generator=12)
    assert out.tokens.min() >= 0 and out.tokens.max() < 7
    assert out.stats.get("invalid_codes", 0) == 0


def test_prime_without_carry_over_counts_and_resolves_invalid_codes():
    model = tiny("prime", C=7, L=5, ell=2, seed=11, carry_over=False)
    out = generate(model, "ancestral", num_samples=300, batch_size=300, steps=6, generator=12)
    assert out.stats["invalid_codes"] > 0
    assert "re-masked" in out.stats["invalid_resolution"]
    assert out.tokens.max() < 7
    assert (out.nfe <= 7).all() and (out.nfe == 7).any()  # one extra call for samples that needed it


def test_first_hitting_reveal_times_are_uniform_order_statistics():
    model = tiny("prime", C=5, L=3, ell=2, schedule="linear")
    n = 6
    out = generate(model, "first-hitting", num_samples=2000, batch_size=2000, generator=13)
    times = out.stats["reveal_times"]
    assert times.shape == (2000, n) and bool((times[:, 1:] <= times[:, :-1]).all())
    # the first reveal is the max of n uniforms: P(tau <= s) = s^n, so tau^n ~ U(0, 1)
    assert stats.kstest((times[:, 0] ** n).numpy(), "uniform").pvalue > 1e-3
    # the next one is the max of the other n - 1 below it: (tau_2 / tau_1)^(n-1) ~ U(0, 1)
    assert stats.kstest(((times[:, 1] / times[:, 0]) ** (n - 1)).numpy(), "uniform").pvalue > 1e-3
    # power: a wrong exponent is rejected
    assert stats.kstest((times[:, 0] ** (n - 1)).numpy(), "uniform").pvalue < 1e-3


@pytest.mark.parametrize("family,kwargs,L,ell", [("mdlm", {}, 4, 1), ("prime", {"ell": 2}, 3, 2)])
def test_idle_fraction_matches_analytic_isr(family, kwargs, L, ell):
    model = tiny(family, C=5, L=L, schedule="linear", **kwargs)
    T = 10
    out = generate(model, "ancestral", num_samples=4000, batch_size=4000, steps=T, generator=14)
    frac = out.idle_fraction
    analytic = (1 - 1 / T) ** (L * ell)
    assert abs(idle_step_ratio(L, T, ell, "linear") - analytic) < 1e-12
    se = float(frac.std()) / math.sqrt(frac.numel())
    assert abs(float(frac.mean()) - analytic) < 4 * se


def test_same_seed_same_samples_and_dtypes():
    model = tiny("mdlm", C=9, L=6)
    a = generate(model, num_samples=10, batch_size=4, steps=5, generator=21)
    b = generate(model, num_samples=10, batch_size=4, steps=5, generator=torch.Generator().manual_seed(21))
    c = generate(model, num_samples=10, batch_size=4, steps=5, generator=22)
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, c.tokens)
    for dtype in ("float32", "float64"):
        for method in ("gumbel", "race", "mdlm-legacy"):
            out = generate(model, num_samples=5, steps=5, dtype=dtype, method=method, generator=0)
            assert out.tokens.shape == (5, 6) and out.tokens.max() < 9
            assert out.protocol["dtype"] == dtype and out.protocol["method"] == method
    assert a.wall_s.shape == (10,) and (a.wall_s > 0).all() and a.steps.tolist() == [5] * 10


def test_protocol_records_every_setting():
    model = tiny("prime", C=7, L=4, ell=2)
    out = generate(
        model,
        num_samples=3,
        steps=4,
        temperature=0.9,
        nucleus_p=0.95,
        dtype="float32",
        method="race",
        noise_removal="sample",
        generator=0,
    )
    for key, value in dict(
        sampler="ancestral",
        steps=4,
        dtype="float32",
        method="race",
        temperature=0.9,
        nucleus_p=0.95,
        noise_removal="sample",
        cache=True,
    ).items():
        assert out.protocol[key] == value, key
    assert out.protocol["nucleus_rule"] == "cross"
    below = generate(model, num_samples=3, steps=4, nucleus_p=0.5, nucleus_rule="below", generator=0)
    assert below.protocol["nucleus_rule"] == "below"
    assert generate(model, num_samples=1, steps=4, generator=0).protocol["nucleus_rule"] is None  # p = 1: no filter
    with pytest.raises(PrimebenchError, match="nucleus rule"):
        generate(model, num_samples=1, steps=4, nucleus_p=0.5, nucleus_rule="top")


def test_noise_removal_fills_what_the_grid_leaves():
    model = tiny("mdlm", C=6, L=8)
    out = generate(model, "ancestral", num_samples=20, steps=2, t_end=0.6, noise_removal="argmax", generator=0)
    assert out.stats["noise_removal_filled"] > 0 and out.tokens.max() < 6
    assert out.protocol["grid"]["t_end"] == 0.6


def test_prefix_is_kept():
    model = tiny("prime", C=7, L=6, ell=2)
    prefix = torch.tensor([[3, 1], [0, 6], [2, 2]])
    for sampler, steps in (("ancestral", 4), ("first-hitting", None), ("maskgit", 3)):
        out = generate(model, sampler, num_samples=3, batch_size=2, steps=steps, prefix=prefix, generator=1)
        assert torch.equal(out.tokens[:, :2], prefix)
    out = generate(model, "first-hitting", num_samples=2, prefix=torch.tensor([[5]]), generator=1)
    assert (out.tokens[:, 0] == 5).all() and (out.nfe == 5 * 2).all()


def test_maskgit_schedule_and_cost():
    assert decode_counts(10, 4) == [3, 2, 3, 2] and sum(decode_counts(5, 8)) == 5
    model = tiny("mdlm", C=5, L=5)
    out = generate(model, "maskgit", num_samples=4, steps=8, generator=0)
    assert (out.nfe == 5).all() and (out.idle_steps == 3).all()


def test_autoregressive_sampler():
    model = tiny("arm", C=9, L=7)
    out = generate(model, num_samples=5, batch_size=2, bos_id=8, generator=0)
    assert sampler_for(model) == "autoregressive"
    assert out.tokens.shape == (5, 7) and (out.tokens[:, 0] == 8).all()
    assert (out.nfe == 6).all() and (out.idle_steps == 0).all()
    out = generate(model, num_samples=2, prefix=torch.tensor([[8, 1, 2]]), generator=0)
    assert (out.tokens[:, :3] == torch.tensor([8, 1, 2])).all() and (out.nfe == 4).all()
    with pytest.raises(PrimebenchError, match="bos_id"):
        generate(model, num_samples=2)


def test_errors_name_the_problem():
    arm, mdlm = tiny("arm", C=5, L=4), tiny("mdlm", C=5, L=4)
    with pytest.raises(PrimebenchError, match="does not support the 'arm'") as exc:
        generate(arm, "ancestral", num_samples=2, bos_id=0)
    assert "autoregressive" in exc.value.fix
    with pytest.raises(PrimebenchError, match="does not support the 'mdlm'"):
        generate(mdlm, "autoregressive", num_samples=2, bos_id=0)
    with pytest.raises(PrimebenchError, match="unknown sampler") as exc:
        generate(mdlm, "ancestal", num_samples=2)
    assert "did you mean 'ancestral'" in exc.value.fix
    with pytest.raises(PrimebenchError, match="steps"):
        generate(mdlm, "first-hitting", num_samples=2, steps=8)
    with pytest.raises(PrimebenchError, match="prefix"):
        generate(mdlm, num_samples=2, prefix=torch.tensor([[0, 1, 2, 3]]))
    with pytest.raises(PrimebenchError, match="dtype"):
        generate(mdlm, num_samples=2, dtype="float16")
    assert set(SAMPLERS) == {
        "ancestral",
        "first-hitting",
        "maskgit",
        "remdm",
        "posterior",
        "self-correction",
        "autoregressive",
        "tweedie",
        "euler",
    }


@pytest.mark.parametrize(
    "family, sampler, kw",
    [
        ("mdlm", "ancestral", {}),
        ("prime", "ancestral", {"ell": 2}),
        ("mdlm", "first-hitting", {}),
        ("arm", "autoregressive", {}),
        ("bd3lm", "ancestral", {"block_size": 4}),
        ("udlm", "posterior", {}),
    ],
)
def test_a_shorter_canvas_is_the_same_as_a_shorter_model_and_leaves_the_model_alone(family, sampler, kw):
    """``generate(seq_len=S)`` draws the same samples as the same weights built at length S would,
    with the model's own length untouched (no evaluator changes the model to draw shorter samples)."""
    long, short = tiny(family, C=6, L=12, **kw), tiny(family, C=6, L=6, **kw)
    short.load_state_dict(long.state_dict())
    opts = dict(num_samples=3, batch_size=2, generator=5, bos_id=0 if family == "arm" else None)
    got = generate(long, sampler, seq_len=6, **opts)
    want = generate(short, sampler, **opts)
    assert long.seq_len == 12 and got.tokens.shape == (3, 6)
    assert torch.equal(got.tokens, want.tokens) and torch.equal(got.nfe, want.nfe)
    assert got.protocol["seq_len"] == 6 and got.protocol["steps"] == want.protocol["steps"]
    with pytest.raises(PrimebenchError, match=r"seq_len must be an integer in \[1, 12\]"):
        generate(long, sampler, seq_len=13, **opts)
