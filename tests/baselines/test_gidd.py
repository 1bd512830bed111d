"""GIDD, the mask-and-uniform family: its clock's closed forms, the moving noise rate by finite
differences, its Monte-Carlo ELBO unbiased for the integral of the process's integrand, that integral
a bound on the exact likelihood of the model's own reverse chain, and the posterior sampler drawing
that chain, all by enumeration over every state of a C = 3, L = 2 toy (16 states with the mask)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from harness.errors import ConfigError, PrimebenchError
from harness.models import build_model
from harness.processes import Hybrid
from harness.sampling import generate
from harness.schedules import Gidd, get_schedule
from tests.toys import randomize

C, L = 3, 2
F64 = torch.float64


@pytest.fixture(scope="module")
def model():
    m = build_model("gidd", vocab_size=C, seq_len=L, d_model=16, n_layers=1, n_heads=2, p_uniform=0.3)
    return randomize(m, 0, 0.2).eval()


STATES = torch.tensor(list(itertools.product(range(C + 1), repeat=L)))  # (16, L): tokens and the mask


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5])
def test_the_clock_at_one_half_and_its_ends(p):
    """At t = 1/2: alpha = (1 - p)/2, the mask (1 - p)/2 and p spread uniformly (p_u is the uniform
    share of the whole law at mid-time); all clean at t = 0, all mask at t = 1."""
    proc = Hybrid(C, p)
    a = proc.clock.alpha(torch.tensor([0.5], dtype=F64))
    floor = max(p, np.exp(-20))  # GIDD's floor on p_u
    assert float(a) == pytest.approx((1 - floor) / 2, abs=1e-12)
    mass = proc.noise_mass(a)[0]
    assert float(mass[C]) == pytest.approx((1 - floor) / 2, abs=1e-12)
    assert torch.allclose(mass[:C], torch.full((C,), floor / C, dtype=F64), atol=1e-12)
    assert float(proc.clock.alpha(0.0)) == 1.0 and float(proc.clock.alpha(1.0)) == 0.0
    assert torch.equal(proc.marginal(torch.tensor(1), torch.tensor(0.0)), torch.eye(C + 1, dtype=F64)[C])
    assert get_schedule(f"gidd:{p}") == Gidd(p_uniform=p)


def test_the_rate_into_a_state_is_the_derivative_of_the_noise():
    """b_t(z) = d/dt (beta pi)_t(z) - (alpha'_t / alpha_t)(beta pi)_t(z), by central differences."""
    proc = Hybrid(C, 0.2)
    for t in (0.05, 0.3, 0.5, 0.8, 0.97):
        h = 1e-6
        mass = [proc.noise_mass(proc.clock.alpha(torch.tensor(v, dtype=F64))) for v in (t - h, t, t + h)]
        a, da = proc.clock.alpha(torch.tensor(t, dtype=F64)), proc.clock.alpha_prime(torch.tensor(t, dtype=F64))
        want = (mass[2] - mass[0]) / (2 * h) - da / a * mass[1]
        got = proc.rate_into(torch.arange(C + 1), a)
        assert torch.allclose(got, want, rtol=1e-6), (t, got, want)
        assert bool((got >= 0).all())  # a valid CTMC: no negative rates


def _x_theta(model, z: torch.Tensor, t: float) -> torch.Tensor:
    with torch.no_grad():
        return model.log_probs(z, torch.full((z.shape[0],), t, dtype=torch.float32)).double()


def _elbo_by_quadrature(model, x0s: torch.Tensor, lo: float, nodes: int = 160) -> torch.Tensor:
    """(N,) int_lo^1 sum over states z of q_t(z | x0) * sum_i integrand dt for each row of ``x0s``
    (N, L), by Gauss-Legendre in sqrt(t), which absorbs the 1/sqrt(t) of the uniform part's rate
    near t = 0; one network call per node."""
    u_nodes, w = np.polynomial.legendre.leggauss(nodes)
    lo_u = np.sqrt(lo)
    u_nodes, w = lo_u + (1 - lo_u) * (u_nodes + 1) / 2, (1 - lo_u) * w / 2
    total = torch.zeros(len(x0s), dtype=F64)
    for u, wu in zip(u_nodes, w):
        t = float(np.float32(u * u))
        tt = torch.tensor(t, dtype=F64)
        alpha, dalpha = model.schedule.alpha(tt), model.schedule.alpha_prime(tt)
        log_x = _x_theta(model, STATES, t)
        for n, x0 in enumerate(x0s):
            q = model.process.marginal(x0, alpha)  # (L, V)
            prob = q[torch.arange(L), STATES].prod(-1)
            rate = model.process.elbo_integrand(log_x, x0.expand(len(STATES), L), STATES, alpha, dalpha)
            total[n] += wu * 2 * u * float((prob * rate.sum(-1)).sum())
    return total


def test_monte_carlo_nll_is_unbiased_for_the_integral(model):
    x0 = torch.tensor([[2, 0]])
    want = float(_elbo_by_quadrature(model, x0, 1e-3)[0])
    got = model.nll(x0.expand(2, L), num_samples=800, generator=torch.Generator().manual_seed(0))
    mean, se = float(got.nats.mean()), float(got.stderr.max())
    assert abs(mean - want) < 4 * se + 1e-3, (mean, want, se)
    assert got.kind == "bound"


def _chain_law(model, T: int) -> torch.Tensor:
    """The law over the 16 states after the model's T-step posterior chain from the all-mask state."""
    proc, sched = model.process, model.schedule
    grid = torch.linspace(1, 0, T + 1, dtype=F64)
    alpha = sched.alpha(grid)
    row = torch.zeros(len(STATES), dtype=F64)
    row[-1] = 1.0  # (C, C): both positions masked, pi_1
    for k in range(T):
        probs = _x_theta(model, STATES, float(grid[k])).exp()  # (S, L, C)
        step = proc.posterior(STATES, probs, alpha[k], alpha[k + 1]).nan_to_num(0.0)  # 0 rows: z unreachable
        move = torch.ones(len(STATES), len(STATES), dtype=F64)
        for i in range(L):
            move = move * step[:, i, :][:, STATES[:, i]]
        row = row @ move
    return row


def test_the_elbo_bounds_the_models_own_chain(model):
    law = _chain_law(model, 256)
    tokens = (STATES < C).all(-1)
    assert float(law[tokens].sum()) == pytest.approx(1.0)  # at t = 0 no mask is left
    exact = -torch.log(law[tokens])
    elbo = _elbo_by_quadrature(model, STATES[tokens], 0.0)  # no prior term: q_1 = pi_1, the mask
    assert bool((elbo >= exact - 5e-3).all()), (elbo, exact)
    assert float((elbo - exact).max()) > 1e-3  # random weights: a bound, not an identity


@pytest.mark.parametrize("draw", ["two-stage", "joint"])
def test_sampler_draws_the_chain(model, draw):
    """The posterior sampler's law over the 9 token states is the chain's (T = 4, 4000 draws), with the
    noise part of a step drawn from pi_s (two-stage) or the whole posterior formed (joint)."""
    T = 4
    out = generate(model, num_samples=4000, batch_size=4000, steps=T, generator=0, noise_removal="sample", draw=draw)
    assert out.protocol["sampler"] == "posterior" and bool((out.nfe == T).all())
    index = (out.tokens * torch.tensor([C + 1, 1])).sum(-1)
    freq = torch.bincount(index, minlength=len(STATES)).double() / 4000
    want = _chain_law(model, T)
    assert torch.allclose(freq, want, atol=0.03), (freq, want)


def test_corruptions_hold_masks_and_wrong_tokens():
    """The estimator's draw at t: each unit kept with alpha_t, else the mask with t / (t + c_t), else a
    uniform token (the frequencies of 200k units)."""
    from harness import diffusion

    proc = Hybrid(C, 0.4)
    n = 200_000
    x0 = torch.zeros(1, n, dtype=torch.long)
    for t in (0.2, 0.5, 0.9):
        u = torch.tensor([(t - 1e-3) / (1 - 1e-3)], dtype=F64)
        z, hit, _, tt = diffusion.corrupt(
            x0,
            u,
            torch.ones_like(x0, dtype=torch.bool),
            sampler="t",
            schedule=proc.clock,
            process=proc,
            generator=torch.Generator().manual_seed(0),
        )
        want = proc.marginal(torch.tensor(0), proc.clock.alpha(tt[0].double()))
        freq = torch.bincount(z[0], minlength=C + 1).double() / n
        assert torch.allclose(freq, want, atol=5e-3), (t, freq, want)


def test_bad_settings_are_refused():
    with pytest.raises(ConfigError, match="p_uniform"):
        build_model("gidd", vocab_size=C, seq_len=L, d_model=16, n_layers=1, n_heads=2, p_uniform=1.0)
    with pytest.raises(ConfigError, match="GIDD's clock"):
        build_model("gidd", vocab_size=C, seq_len=L, d_model=16, n_layers=1, n_heads=2, schedule="loglinear")
    with pytest.raises(PrimebenchError, match="gamma"):
        get_schedule("gidd:0.1,3")
    m = build_model("gidd", vocab_size=C, seq_len=L, d_model=16, n_layers=1, n_heads=2, p_uniform=0.2)
    assert m.protocol() == {"p_uniform": 0.2, "gamma": 1.0} and m.hparams["schedule"] == "gidd:0.2"
    with pytest.raises(PrimebenchError, match="does not support the 'gidd'"):
        generate(m, "ancestral", num_samples=1, steps=2)


# -- GIDD's self-correction -------------------------------------------------------------------------
class _Denoiser:
    """A stand-in for the sampling units: log x_theta at every position from a rule on the state."""

    def __init__(self, rule, C: int = 4):
        self.rule, self.C = rule, C

    def log_probs(self, y, t):
        y = y[..., 0]
        favourite = self.rule(y)
        probs = torch.full((*y.shape, self.C), 0.01, dtype=F64).scatter(-1, favourite[..., None], 0.97)
        return torch.log(probs)


def _correct(rule, y, fixed=None, **keys):
    from harness.sampling.correction import CorrectionSettings, correct
    from harness.sampling.settings import SamplerSettings

    settings = SamplerSettings(None, 1.0, 1.0, F64, "gumbel", "argmax", False, 0.0)
    fixed = torch.zeros_like(y, dtype=torch.bool) if fixed is None else fixed
    return correct(
        _Denoiser(rule),
        y.clone(),
        fixed,
        settings,
        CorrectionSettings(**keys).checked(),
        torch.Generator().manual_seed(0),
    )


def test_correction_replaces_one_token_per_step_until_nothing_changes():
    """A denoiser that wants token 0 everywhere: one token per step becomes 0, then a step that
    changes nothing stops the row (converged); a prefix position is never changed."""
    y = torch.full((2, 6), 2)
    fixed = torch.zeros_like(y, dtype=torch.bool)
    fixed[1, 0] = True
    out, calls, per_row = _correct(lambda z: torch.zeros_like(z), y, fixed)
    assert out[0].tolist() == [0] * 6 and out[1].tolist() == [2] + [0] * 5
    assert calls.tolist() == [7, 6]  # 6 (5) replacements, then the step that proposes nothing new
    assert per_row["corrected_tokens"].tolist() == [6, 5] and per_row["correction_converged"].tolist() == [1, 1]
    out, calls, _ = _correct(lambda z: torch.zeros_like(z), y, tokens_per_step=4)
    assert calls.tolist() == [3, 3] and bool((out == 0).all())  # 4 then 2 replacements, then converged
    out, calls, _ = _correct(lambda z: torch.zeros_like(z), y, steps=3)
    assert calls.tolist() == [3, 3] and (out == 0).sum(-1).tolist() == [3, 3]  # stopped by the step budget


def test_correction_stops_on_patience_and_drops_that_proposal():
    """A denoiser that always wants the next token (y + 1): every step's agreement is 1/L, so with
    patience 0 the second step does not improve on the first, the row stops, and the second
    proposal is dropped (GIDD's loop): one step kept, two denoiser calls. Each kept step moves one
    token up by one, so the total move counts the kept steps."""
    y = torch.zeros((3, 5), dtype=torch.long)
    moved = lambda out: ((out - y) % 4).sum(-1).tolist()  # noqa: E731
    out, calls, per_row = _correct(lambda z: (z + 1) % 4, y, patience=0)
    assert calls.tolist() == [2, 2, 2] and moved(out) == [1, 1, 1]
    assert per_row["correction_converged"].tolist() == [0, 0, 0]
    out, calls, _ = _correct(lambda z: (z + 1) % 4, y, patience=2)
    assert calls.tolist() == [4, 4, 4] and moved(out) == [3, 3, 3]


def test_self_correction_sampler_records_its_settings(model):
    out = generate(model, "self-correction", num_samples=3, steps=4, generator=0, correction={"steps": 5})
    assert out.protocol["sampler"] == "self-correction"
    assert out.protocol["correction"] == {
        "steps": 5,
        "temperature": 0.1,
        "t0": 0.01,
        "patience": 32,
        "tokens_per_step": 1,
    }
    assert bool((out.nfe >= 5).all()) and bool((out.nfe <= 4 + 5).all())  # T posterior steps + its calls
    kept = generate(model, "self-correction", num_samples=3, steps=4, generator=1, prefix=torch.tensor([[1]]))
    assert bool((kept.tokens[:, 0] == 1).all())
    with pytest.raises(PrimebenchError, match="apply to the self-correction sampler"):
        generate(model, "posterior", num_samples=1, steps=2, correction={"steps": 5})
    with pytest.raises(PrimebenchError, match="t0"):
        generate(model, "self-correction", num_samples=1, steps=2, correction={"t0": 1.5})
    with pytest.raises(PrimebenchError, match="unknown self-correction setting"):
        generate(model, "self-correction", num_samples=1, steps=2, correction={"stepz": 3})
    from harness.evaluation.genppl import GenPPLSettings

    keys = GenPPLSettings(sampler="self-correction", correction_steps=7, correction_t0=0.05).sampling()
    assert keys["correction"] == {"steps": 7, "t0": 0.05} and keys["remask"] is None


def test_cli_trains_scores_and_corrects(trained, tmp_path):
    """tiny/gidd through the CLI: eval ppl gives a bound; eval genppl with --sampler self-correction
    records GIDD's settings; a correction option without that sampler is refused."""
    import json

    from click.testing import CliRunner

    from harness.cli import main

    runner = CliRunner()
    ckpt, judge = str(trained("gidd")), f"arm:{trained('arm')}"
    res = runner.invoke(main, ["eval", "ppl", ckpt, "--max-rows", "4", "--out", str(tmp_path / "p")])
    assert res.exit_code == 0, res.output
    record = json.loads(next((tmp_path / "p").glob("ppl-*.json")).read_text())
    assert record["metrics"]["nll"]["kind"] == "bound" and record["model"]["family"] == "gidd"
    common = ["--samples", "2", "--steps", "8", "--judge", judge, "--no-mauve"]
    res = runner.invoke(
        main,
        ["eval", "genppl", ckpt, "--sampler", "self-correction", "--correction-steps", "3",
         "--correction-temperature", "0.5", *common, "--out", str(tmp_path / "g")],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    record = json.loads(next((tmp_path / "g").glob("genppl-*.json")).read_text())
    assert record["protocol"]["sampler"] == "self-correction"
    assert record["protocol"]["correction"]["steps"] == 3 and record["protocol"]["correction"]["temperature"] == 0.5
    bad = runner.invoke(main, ["eval", "genppl", ckpt, "--correction-steps", "3", *common])
    assert bad.exit_code != 0 and "self-correction" in bad.output
