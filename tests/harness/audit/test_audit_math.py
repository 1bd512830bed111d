"""Closed forms of the audits: idle-step ratio (MDM-Prime Table 1) and truncated Gumbel-max (Zheng
et al. Prop. 5.2), each checked against the paper's numbers and against Monte Carlo."""

from __future__ import annotations

import math

import pytest
import torch

from harness.audit.gumbel import (
    empirical_frequencies,
    entropy,
    grid_gumbel_probs,
    kl,
    mdlm_step_distribution,
    peaked_and_flat,
    truncated_gumbel_probs,
    truncation_level,
    truncation_level_for_bits,
    uniform_bits,
)
from harness.audit.idle import (
    expected_nfe,
    idle_step_ratio,
    reveal_step_probs,
    simulate_idle,
    step_idle_probs,
)
from harness.errors import PrimebenchError

F64 = torch.float64


# --- idle steps ---------------------------------------------------------------------------------


@pytest.mark.parametrize("ell, percent", [(1, 36.77), (2, 13.52), (3, 4.97), (4, 1.83), (6, 0.25), (8, 0.03)])
def test_isr_reproduces_prime_table_1(ell, percent):
    assert round(100 * idle_step_ratio(1024, 1024, ell), 2) == percent


@pytest.mark.parametrize("steps, percent", [(256, 1.82), (512, 13.51), (1024, 36.77), (2048, 60.65), (4096, 77.88)])
def test_isr_versus_steps(steps, percent):
    assert round(100 * idle_step_ratio(1024, steps, 1), 2) == percent


def test_isr_structure():
    # linear closed form (1 - 1/T)^(B L ell); batch and ell enter only through B L ell
    assert idle_step_ratio(100, 64, 3, batch=2) == pytest.approx((1 - 1 / 64) ** 600, rel=1e-12)
    assert idle_step_ratio(1024, 1024, 2) == pytest.approx(idle_step_ratio(1024, 1024, 1, batch=2), rel=1e-12)
    # loglinear starts fully masked too, and its increments are uniform: same ISR as linear
    assert idle_step_ratio(1024, 1024, 1, "loglinear") == pytest.approx(idle_step_ratio(1024, 1024, 1), rel=1e-12)
    # polynomial:3 reveals little early on, so more steps idle
    assert idle_step_ratio(1024, 1024, 1, "polynomial:3") > 0.45
    for spec in ["linear", "loglinear", "polynomial:3"]:
        assert float(reveal_step_probs(128, spec).sum()) == pytest.approx(1.0, abs=1e-12)
    assert idle_step_ratio(5, 1, 1) == 0.0  # one step reveals everything
    with pytest.raises(PrimebenchError):
        idle_step_ratio(1024, 0, 1)


def test_expected_nfe_convention():
    T = 1024
    isr = idle_step_ratio(1024, T, 1)
    idle = step_idle_probs(1024, T, 1)
    nfe = expected_nfe(1024, T, 1)
    assert nfe == pytest.approx(T * (1 - isr) + float(idle[-1]), rel=1e-12)
    assert nfe == pytest.approx(647.84, abs=0.01)
    # Zheng App. E's T(1 - ISR) (their E-NFE column) is within one call
    for steps, paper in [(256, 251), (512, 443), (1024, 648), (2048, 806), (4096, 906)]:
        assert abs(steps * (1 - idle_step_ratio(1024, steps, 1)) - paper) < 1
        assert 0 <= expected_nfe(1024, steps, 1) - steps * (1 - idle_step_ratio(1024, steps, 1)) < 1


@pytest.mark.parametrize(
    "ell, schedule, batch", [(1, "linear", 1), (2, "linear", 1), (1, "polynomial:3", 1), (1, "linear", 2)]
)
def test_simulated_isr_agrees_with_closed_form(ell, schedule, batch):
    sim = simulate_idle(
        1024, 1024, ell, schedule=schedule, batch=batch, runs=24, generator=torch.Generator().manual_seed(ell + batch)
    )
    exact = idle_step_ratio(1024, 1024, ell, schedule, batch)
    assert sim.stderr > 0
    assert abs(sim.mean - exact) < 4 * sim.stderr
    mean, stderr = sim  # plain tuple contract
    assert mean == sim.mean and stderr == sim.stderr


# --- truncation level ---------------------------------------------------------------------------


def test_truncation_levels_match_zheng_table_1():
    assert uniform_bits("fp32") == 24 and uniform_bits(torch.float64) == 53
    assert truncation_level("float32") == pytest.approx(16.6355, abs=1e-4)
    assert truncation_level(torch.float64) == pytest.approx(36.7368, abs=1e-4)
    assert truncation_level_for_bits(24) == truncation_level(torch.float32)
    # M is the Gumbel of the largest uniform: -log(-log(1 - eps))
    assert math.exp(-math.exp(-truncation_level("fp32"))) == pytest.approx(1 - 2**-24, abs=1e-15)


# --- Prop. 5.2 ----------------------------------------------------------------------------------


def test_prop52_worked_example():
    out = truncated_gumbel_probs(torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=F64), M=1.0)
    assert torch.allclose(out, torch.tensor([0.0110, 0.1255, 0.3206, 0.5429], dtype=F64), atol=5e-5)
    assert float(out.sum()) == pytest.approx(1.0, abs=1e-12)


def test_prop52_unsorted_zero_classes_scale_and_batch():
    pi = torch.tensor([0.3, 0.1, 0.0, 0.4, 0.2], dtype=F64)
    out = truncated_gumbel_probs(pi, M=1.0)
    assert out[2] == 0
    assert torch.allclose(out[[1, 4, 0, 3]], truncated_gumbel_probs(pi[[1, 4, 0, 3]], M=1.0))
    assert torch.allclose(truncated_gumbel_probs(7 * pi, M=1.0), out)
    batch = torch.stack([pi, pi.flip(0)])
    assert torch.allclose(truncated_gumbel_probs(batch, M=1.0), torch.stack([out, out.flip(0)]))
    # lowers the temperature: big classes gain relative to small ones
    assert out[3] / out[0] > pi[3] / pi[0] and out[0] / out[1] > pi[0] / pi[1]


def test_prop52_is_numerically_exact_without_cancellation():
    pi = torch.tensor([1e-3, 0.01, 0.2, 0.3, 0.489], dtype=F64)
    assert torch.allclose(truncated_gumbel_probs(pi, "fp64"), pi, rtol=1e-12, atol=0)
    # a class far below 1 loses ~ e^{-M} / pi of its mass (first order), resolved at 1e-7 in float64
    pi = torch.tensor([1e-9, 0.3, 0.7 - 1e-9], dtype=F64)
    c = math.exp(-truncation_level("fp64"))
    deficit = 1 - float(truncated_gumbel_probs(pi, "fp64")[0] / pi[0])
    assert deficit == pytest.approx(c / 1e-9, rel=1e-3)
    assert float(truncated_gumbel_probs(pi, "fp32").sum()) == pytest.approx(1.0, abs=1e-14)
    # ties are fine
    tied = torch.full((5,), 0.2, dtype=F64)
    assert torch.allclose(truncated_gumbel_probs(tied, M=0.5), tied)


@pytest.mark.parametrize("M", [1.0, 2.0])
@pytest.mark.parametrize("pi", [[0.05, 0.15, 0.3, 0.5], [0.02, 0.0, 0.08, 0.2, 0.7, 0.0]])
def test_prop52_against_monte_carlo_with_truncated_uniforms(M, pi):
    """G = -log(-log U) <= M  <=>  U <= exp(-e^{-M}); so U = (1 - eps) * Uniform[0, 1) with
    1 - eps = exp(-e^{-M}) draws continuous Gumbels truncated at M (Zheng's '64-bit + truncation')."""
    pi = torch.tensor(pi, dtype=F64)
    g = torch.Generator().manual_seed(int(10 * M) + len(pi))
    n = 400_000
    top = math.exp(-math.exp(-M))
    u = (torch.rand(n, len(pi), dtype=F64, generator=g) * top).clamp_min(1e-300)
    idx = (torch.log(pi) - torch.log(-torch.log(u))).argmax(-1)
    freq = torch.bincount(idx, minlength=len(pi)).double() / n
    closed = truncated_gumbel_probs(pi, M=M)
    sd = torch.sqrt(closed * (1 - closed) / n)
    assert bool((torch.abs(freq - closed) <= 4.5 * sd + 1e-12).all())
    assert float((freq - pi).abs().max()) > 0.01  # the truncation is visible at this M


# --- grid model (what torch.rand's grid really gives) -------------------------------------------


def test_grid_model_first_order_and_limits():
    pi = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=F64)
    g32 = grid_gumbel_probs(pi, "fp32")
    # classes far above 2^-24 lose 2^-25 each (Prop. 5.2 at M predicts about twice that)
    assert torch.allclose(pi[:3] - g32[:3], torch.full((3,), 2.0**-25, dtype=F64), rtol=1e-3)
    assert float(g32.sum()) == pytest.approx(1.0, abs=1e-15)
    assert torch.allclose(grid_gumbel_probs(pi, "fp64"), pi, rtol=1e-14, atol=0)
    # flat tokens at x = 2^-24 / (p_token / p_stay): factor x / (e^x - 1) (vs e^-x for Prop. 5.2)
    for x in (0.25, 1.0, 4.0):
        theta = 2.0**-24 / x
        q = torch.tensor([theta] * 8 + [1.0], dtype=F64)
        q = q / q.sum()
        ratio = float(grid_gumbel_probs(q, "fp32")[:8].sum() / q[:8].sum())
        assert ratio == pytest.approx(x / math.expm1(x), rel=1e-4)
        ratio52 = float(truncated_gumbel_probs(q, "fp32")[:8].sum() / q[:8].sum())
        assert ratio52 == pytest.approx(math.exp(-x), rel=1e-4)
    zero = grid_gumbel_probs(torch.tensor([0.0, 0.5, 0.5], dtype=F64), bits=12)
    assert zero[0] == 0 and float(zero.sum()) == pytest.approx(1.0)


# --- MDLM step, helpers ---------------------------------------------------------------------------


def test_mdlm_step_distribution():
    p = torch.tensor([0.5, 0.25, 0.25], dtype=F64)
    q = mdlm_step_distribution(p, step=1, steps=4)  # t = 1 -> s = 0.75
    assert torch.allclose(q, torch.tensor([0.125, 0.0625, 0.0625, 0.75], dtype=F64))
    last = mdlm_step_distribution(p, step=4, steps=4)  # t = 0.25 -> s = 0: everything unmasks
    assert torch.allclose(last, torch.cat([p, torch.zeros(1, dtype=F64)]))
    assert torch.allclose(
        mdlm_step_distribution(p, step=2, steps=4, schedule="loglinear"), mdlm_step_distribution(p, step=2, steps=4)
    )
    # polynomial: stay = (1 - (1-s)^3) / (1 - (1-t)^3), t = .75 -> s = .5
    poly = mdlm_step_distribution(p, step=2, steps=4, schedule="polynomial:3")
    assert float(poly[-1]) == pytest.approx((1 - 0.5**3) / (1 - 0.25**3))
    batch = mdlm_step_distribution(torch.stack([p, p]), step=3, steps=4)
    assert batch.shape == (2, 4) and torch.allclose(batch.sum(-1), torch.ones(2, dtype=F64))
    with pytest.raises(PrimebenchError):
        mdlm_step_distribution(p, step=0, steps=4)


def test_entropy_and_kl_in_nats():
    u = torch.full((8,), 1 / 8, dtype=F64)
    assert float(entropy(u)) == pytest.approx(math.log(8))
    assert float(entropy(torch.tensor([1.0, 0.0]))) == 0.0
    p = torch.tensor([0.5, 0.5, 0.0], dtype=F64)
    q = torch.tensor([0.25, 0.25, 0.5], dtype=F64)
    assert float(kl(p, q)) == pytest.approx(math.log(2))
    assert float(kl(p, p)) == 0.0
    assert float(kl(q, p)) == math.inf


def test_peaked_and_flat():
    a = peaked_and_flat(100, torch.Generator().manual_seed(0))
    b = peaked_and_flat(100, torch.Generator().manual_seed(0))
    peaked, flat = a
    assert torch.equal(a.peaked, b.peaked)
    assert float(peaked.sum()) == pytest.approx(1.0) and float(flat.sum()) == pytest.approx(1.0)
    assert float(entropy(peaked)) < float(entropy(flat)) == pytest.approx(math.log(100))
    assert float(peaked.max() / peaked.min()) == pytest.approx(100.0)


def test_empirical_frequencies_rows_and_convergence():
    probs = torch.tensor([[0.1, 0.2, 0.7], [0.5, 0.0, 0.5]], dtype=F64)
    freq = empirical_frequencies(
        probs,
        method="race",
        dtype="fp64",
        draws=100_000,
        generator=torch.Generator().manual_seed(0),
        chunk_elements=60_000,
    )
    assert freq.shape == probs.shape and freq.dtype == F64
    assert torch.allclose(freq.sum(-1), torch.ones(2, dtype=F64))
    assert freq[1, 1] == 0
    assert float((freq - probs).abs().max()) < 0.006
