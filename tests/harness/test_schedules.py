"""Schedules: derivatives against finite differences, the NELBO weight, MDLM's log-linear identity."""

from __future__ import annotations

import math

import pytest
import torch

from harness.errors import PrimebenchError
from harness.schedules import SCHEDULES, Linear, LogLinear, Polynomial, get_schedule

SPECS = ["linear", "loglinear", "loglinear:0.01", "polynomial:3", "polynomial:1", "polynomial:1.5"]
SPECS += ["gidd:0.0", "gidd:0.1", "gidd:0.5", "gidd:0.2,0.5", "gidd:0.2,2"]  # GIDD's clock (bisection off gamma 1)
T_INNER = torch.linspace(0.02, 0.98, 49, dtype=torch.float64)


@pytest.mark.parametrize("spec", SPECS)
def test_alpha_prime_matches_central_differences(spec):
    s = get_schedule(spec)
    h = 1e-6
    fd = (s.alpha(T_INNER + h) - s.alpha(T_INNER - h)) / (2 * h)
    assert torch.allclose(s.alpha_prime(T_INNER), fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("spec", SPECS)
def test_weight_is_positive_and_equals_its_definition(spec):
    s = get_schedule(spec)
    w = s.weight(T_INNER)
    assert bool((w > 0).all())
    assert torch.allclose(w, -s.alpha_prime(T_INNER) / (1 - s.alpha(T_INNER)), rtol=1e-9)
    assert torch.allclose(s.mask_prob(T_INNER) + s.alpha(T_INNER), torch.ones_like(T_INNER), atol=1e-15)


def test_loglinear_weight_is_exactly_one_over_t_and_mdlm_form():
    s = LogLinear()
    t = torch.tensor([1e-8, 1e-3, 0.1, 0.5, 0.999, 1.0], dtype=torch.float64)
    assert torch.equal(s.weight(t), 1.0 / t)
    eps = 1e-3
    sigma = -torch.log1p(-(1 - eps) * t)
    dsigma = (1 - eps) / (1 - (1 - eps) * t)
    mdlm = dsigma / torch.expm1(sigma)  # MDLM's loss scaling
    assert torch.allclose(mdlm, 1.0 / t, rtol=1e-6)
    assert s.mask_prob(1.0) == pytest.approx(1 - eps) and s.alpha(1.0) == pytest.approx(eps)


def test_boundaries():
    for spec in SPECS:
        s = get_schedule(spec)
        assert s.alpha(0.0) == 1.0 and s.mask_prob(0.0) == 0.0
        assert s.weight(0.0) == math.inf
    assert Linear().alpha(1.0) == 0.0
    assert Polynomial(n=3).alpha(1.0) == 0.0 and Polynomial(n=3).weight(1.0) == 0.0
    assert Polynomial(n=1).weight(1.0) == 1.0


def test_polynomial_maps_papers_noise_to_data_time():
    # Prime images: kappa_s = s^3 with s = 1 data; ours t = 1 - s.
    s_paper = torch.tensor([0.0, 0.2, 0.5, 0.9, 1.0], dtype=torch.float64)
    sched = get_schedule("polynomial:3")
    assert torch.allclose(sched.alpha(1 - s_paper), s_paper**3, atol=1e-15)
    # small-t behaviour: weight ~ 1/t, mask prob computed without cancellation
    assert sched.mask_prob(1e-12) == pytest.approx(3e-12, rel=1e-9)
    assert sched.weight(1e-6) == pytest.approx(1e6, rel=1e-5)


@pytest.mark.parametrize("spec", SPECS)
def test_t_from_alpha_inverts_alpha(spec):
    s = get_schedule(spec)
    assert torch.allclose(s.t_from_alpha(s.alpha(T_INNER)), T_INNER, atol=1e-12)


def test_float_in_float_out_and_dtype_kept():
    s = get_schedule("linear")
    assert isinstance(s.alpha(0.25), float) and s.alpha(0.25) == 0.75
    t32 = torch.tensor([0.25, 0.5], dtype=torch.float32)
    assert s.weight(t32).dtype == torch.float32
    assert get_schedule("polynomial:3").alpha(torch.tensor([0, 1])).dtype == torch.float64


def test_out_of_range_time_is_an_error():
    with pytest.raises(PrimebenchError, match=r"\[0, 1\]"):
        get_schedule("linear").alpha(1.5)
    with pytest.raises(PrimebenchError):
        get_schedule("polynomial:3").weight(torch.tensor([0.5, float("nan")]))


def test_get_schedule_specs_and_errors():
    assert get_schedule("polynomial:3") == Polynomial(n=3.0)
    assert get_schedule("polynomial:3").name == "polynomial:3"
    assert get_schedule("polynomial") == Polynomial(n=3.0)
    assert get_schedule("loglinear").name == "loglinear" and get_schedule("loglinear:0.01").eps == 0.01
    sched = Linear()
    assert get_schedule(sched) is sched
    assert set(SCHEDULES.names()) == {"gidd", "linear", "loglinear", "polynomial"}
    assert get_schedule("gidd:0.1").name == "gidd:0.1" and get_schedule("gidd:0.1,0.5").gamma == 0.5
    with pytest.raises(PrimebenchError, match="polynomial"):
        get_schedule("polinomial:3")
    for bad in ["linear:2", "polynomial:abc", "polynomial:-1", "loglinear:1.5"]:
        with pytest.raises(PrimebenchError):
            get_schedule(bad)
