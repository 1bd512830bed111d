"""The single categorical draw: correctness in float64, determinism, zero classes, errors, and the
float32 truncation audit (what float32 Gumbel-max really samples)."""

from __future__ import annotations

import math

import pytest
import torch

import harness.sampling.categorical as categorical
from harness.audit.gumbel import (
    empirical_frequencies,
    grid_gumbel_probs,
    mdlm_step_distribution,
    truncated_gumbel_probs,
    truncation_level_for_bits,
)
from harness.errors import PrimebenchError
from harness.sampling import METHODS, apply_temperature, nucleus_filter, parse_dtype, sample_categorical

P6 = torch.tensor([0.05, 0.1, 0.15, 0.2, 0.2, 0.3], dtype=torch.float64)


def chi2_pvalue(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson chi-square goodness-of-fit p-value (classes with probs > 0)."""
    keep = probs > 0
    n = counts.sum()
    expected = n * probs[keep] / probs[keep].sum()
    stat = ((counts[keep] - expected) ** 2 / expected).sum()
    dof = int(keep.sum()) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), stat / 2))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_methods_sample_the_target_distribution(method, dtype):
    g = torch.Generator().manual_seed(11)
    draws = 200_000
    idx = sample_categorical(P6.expand(draws, 6), method=method, dtype=dtype, generator=g)
    counts = torch.bincount(idx, minlength=6).double()
    assert chi2_pvalue(counts, P6) > 1e-4
    # and the test has power: the same counts reject a slightly different distribution
    other = torch.tensor([0.06, 0.1, 0.15, 0.2, 0.2, 0.29], dtype=torch.float64)
    assert chi2_pvalue(counts, other) < 1e-6


@pytest.mark.parametrize("method", METHODS)
def test_deterministic_given_generator(method):
    probs = torch.softmax(torch.randn(64, 50, generator=torch.Generator().manual_seed(0)), -1)
    a = sample_categorical(probs, method=method, generator=torch.Generator().manual_seed(5))
    b = sample_categorical(probs, method=method, generator=torch.Generator().manual_seed(5))
    c = sample_categorical(probs, method=method, generator=torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.shape == (64,) and a.dtype == torch.long


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_zero_probability_classes_are_never_drawn(method, dtype):
    # Impossible classes sit next to tiny possible ones whose race score p/E underflows to 0 in float32.
    probs = torch.tensor([0.0, 1e-45, 0.0, 1.0, 0.0], dtype=torch.float64)
    probs = probs.expand(20_000, 5).clone()
    probs[::2, 3] = 0.0  # half the rows: the only possible class has p = 1e-45
    g = torch.Generator().manual_seed(3)
    idx = sample_categorical(probs, method=method, dtype=dtype, generator=g)
    assert bool((probs.gather(-1, idx[:, None]) > 0).all())
    logits = torch.log(probs)  # -inf for the impossible classes
    idx = sample_categorical(logits=logits, method=method, dtype=dtype, generator=g)
    assert bool((probs.gather(-1, idx[:, None]) > 0).all())


def test_logits_and_probs_give_the_same_gumbel_draws():
    logits = torch.randn(4096, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 3
    probs = torch.softmax(logits, -1)
    a = sample_categorical(probs, method="gumbel", generator=torch.Generator().manual_seed(9))
    b = sample_categorical(logits=logits, method="gumbel", generator=torch.Generator().manual_seed(9))
    assert torch.equal(a, b)


def test_batched_shapes_and_unnormalised_probs():
    probs = torch.rand(2, 3, 5, generator=torch.Generator().manual_seed(0)) * 7  # not normalised
    out = sample_categorical(probs, method="race", generator=torch.Generator().manual_seed(0))
    assert out.shape == (2, 3) and bool(((out >= 0) & (out < 5)).all())


def test_errors_name_the_problem():
    with pytest.raises(PrimebenchError, match="did you mean 'gumbel'"):
        sample_categorical(P6, method="gumbell")
    with pytest.raises(PrimebenchError, match="NaN"):
        sample_categorical(torch.tensor([0.5, float("nan")]))
    with pytest.raises(PrimebenchError, match="negative"):
        sample_categorical(torch.tensor([0.5, -0.1, 0.6]))
    with pytest.raises(PrimebenchError, match="inf"):
        sample_categorical(torch.tensor([0.5, float("inf")]))
    with pytest.raises(PrimebenchError, match="underflows"):
        sample_categorical(torch.tensor([0.0, 1e-50], dtype=torch.float64), dtype="fp32")
    with pytest.raises(PrimebenchError, match="all zero"):
        sample_categorical(torch.zeros(2, 3))
    with pytest.raises(PrimebenchError, match="exactly one"):
        sample_categorical()
    with pytest.raises(PrimebenchError, match="exactly one"):
        sample_categorical(P6, logits=P6.log())
    with pytest.raises(PrimebenchError, match=r"\+inf"):
        sample_categorical(logits=torch.tensor([0.0, float("inf")]))
    with pytest.raises(PrimebenchError, match="all -inf"):
        sample_categorical(logits=torch.full((3,), float("-inf")))
    with pytest.raises(PrimebenchError, match="dtype"):
        sample_categorical(P6, dtype="float16")


def test_parse_dtype():
    assert parse_dtype("fp32") is torch.float32 and parse_dtype("float32") is torch.float32
    assert parse_dtype("FP64") is torch.float64 and parse_dtype(torch.float64) is torch.float64
    assert parse_dtype("torch.float64") is torch.float64
    with pytest.raises(PrimebenchError):
        parse_dtype(torch.bfloat16)


def test_nucleus_filter():
    probs = torch.tensor([[0.05, 0.5, 0.15, 0.3], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
    out = nucleus_filter(probs, 0.8)  # .5 + .3 reaches .8 exactly
    assert torch.allclose(out[0], torch.tensor([0, 0.625, 0, 0.375], dtype=torch.float64))
    assert torch.equal(out[1], probs[1])  # .75 < .8: all four needed
    assert torch.allclose(nucleus_filter(probs, 0.75)[1], torch.tensor([1, 1, 1, 0], dtype=torch.float64) / 3)
    out = nucleus_filter(probs, 0.81)
    assert torch.allclose(out[0], torch.tensor([0, 0.5, 0.15, 0.3], dtype=torch.float64) / 0.95)
    assert torch.allclose(nucleus_filter(probs, 1e-9)[0], torch.tensor([0, 1.0, 0, 0], dtype=torch.float64))
    assert nucleus_filter(probs, 1.0) is probs
    for bad in (0.0, 1.5):
        with pytest.raises(PrimebenchError):
            nucleus_filter(probs, bad)


def test_apply_temperature():
    logits = torch.tensor([2.0, 1.0, 0.0, float("-inf")], dtype=torch.float64)
    assert torch.allclose(apply_temperature(logits, 1.0), torch.log_softmax(logits, -1))
    cold, hot = apply_temperature(logits, 0.5).exp(), apply_temperature(logits, 2.0).exp()
    assert torch.allclose(cold.sum(), torch.tensor(1.0, dtype=torch.float64)) and cold[3] == 0
    assert cold[0] > torch.softmax(logits, -1)[0] > hot[0]
    for bad in (0.0, -1.0, float("inf")):
        with pytest.raises(PrimebenchError):
            apply_temperature(logits, bad)


# --- the float32 truncation audit ---------------------------------------------------------------


@pytest.mark.parametrize("dtype, bits", [(torch.float32, 24), (torch.float64, 53)])
def test_uniforms_lie_on_the_grid_zheng_analyses(dtype, bits):
    u = categorical._draw_uniform(
        torch.Size([1_000_000]), dtype=dtype, device=torch.device("cpu"), generator=torch.Generator().manual_seed(0)
    )
    scaled = u.double() * 2.0**bits
    assert torch.equal(scaled, scaled.round())  # multiples of 2^-bits ...
    assert float(u.max()) <= 1 - 2.0**-bits  # ... the largest being 1 - 2^-bits, so G <= M


@pytest.mark.parametrize("method", METHODS)
def test_float32_caps_the_gumbel_at_M_and_float64_does_not(method, monkeypatch):
    """Deterministic mechanism check: give the small class the largest uniform the dtype can produce
    (G = M) and the big class U = e^-1 (G = 0). The small class wins iff p_small/p_big > e^-M."""

    def crafted(shape, *, dtype, device, generator):
        top = 1 - 2.0 ** -(24 if dtype == torch.float32 else 53)
        return torch.tensor([math.exp(-1.0), top], dtype=dtype).expand(shape)

    monkeypatch.setattr(categorical, "_draw_uniform", crafted)
    c32 = math.exp(-truncation_level_for_bits(24))  # ~ 2^-24
    for ratio, winner32 in [(1.01 * c32, 1), (0.99 * c32, 0)]:
        probs = torch.tensor([[1.0, ratio]], dtype=torch.float64)
        assert int(sample_categorical(probs, method=method, dtype="fp32")) == winner32
        assert int(sample_categorical(probs, method=method, dtype="fp64")) == 1  # fp64 cap is ~1e-16


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_coarse_grid_audit_matches_grid_model_not_prop52(method, dtype, monkeypatch):
    """The float32 effect is O(2^-24) per class and draw, too rare to measure on a CPU in seconds. So we
    run the real sampler code on a coarser uniform grid (2^-10 instead of torch.rand's 2^-24; the k = 0
    cell, negligible at 24 bits, is left out) on an early MDLM step whose token probabilities sit near
    the grid spacing. The draw must follow the grid model, be far from the intended distribution, and
    distort less than Prop. 5.2 at the same M predicts."""
    bits = 10

    def coarse(shape, *, dtype, device, generator):
        k = torch.randint(1, 2**bits, shape, generator=generator, device=device)
        return k.to(dtype) / 2**bits

    monkeypatch.setattr(categorical, "_draw_uniform", coarse)
    flat = torch.full((4,), 0.25, dtype=torch.float64)
    q = mdlm_step_distribution(flat, step=1, steps=256)  # stay masked 255/256, each token ~2^-10
    draws = 500_000
    freq = empirical_frequencies(
        q, method=method, dtype=dtype, draws=draws, generator=torch.Generator().manual_seed(17)
    )
    unmasked = float(freq[:4].sum()) * draws
    intended = float(q[:4].sum()) * draws
    grid = float(grid_gumbel_probs(q, bits=bits)[:4].sum()) * draws
    prop52 = float(truncated_gumbel_probs(q, M=truncation_level_for_bits(bits))[:4].sum()) * draws
    sd = math.sqrt(grid)
    assert abs(unmasked - grid) < 5 * sd
    assert intended - unmasked > 15 * sd
    assert unmasked - prop52 > 8 * sd


@pytest.mark.slow
@pytest.mark.parametrize("method", ["mdlm-legacy", "gumbel"])
def test_real_float32_draw_is_distorted_as_the_grid_model_says(method):
    """The real thing, no monkeypatching: MDLM's first step with T = 2^18 and V = 64 flat tokens, so
    each token is ~2^-24 as likely as staying masked. 8e7 draws = 5.2e9 uniforms: seconds on a GPU,
    ~6 minutes per method on a 2-core CPU. Expected unmasked counts: intended 305.2, grid model 177.6,
    Prop. 5.2 at M 112.3 (observed with this seed on CPU, mdlm-legacy: 178)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    V, T, draws = 64, 2**18, 80_000_000
    q = mdlm_step_distribution(torch.full((V,), 1.0 / V, dtype=torch.float64), step=1, steps=T).to(device)
    freq = empirical_frequencies(
        q,
        method=method,
        dtype="fp32",
        draws=draws,
        chunk_elements=1 << 24,
        generator=torch.Generator(device).manual_seed(2024),
    )
    unmasked = float(freq[:V].sum()) * draws
    intended = float(q[:V].sum()) * draws
    grid = float(grid_gumbel_probs(q.cpu(), "fp32")[:V].sum()) * draws
    prop52 = float(truncated_gumbel_probs(q.cpu(), "fp32")[:V].sum()) * draws
    assert abs(unmasked - grid) < 4 * math.sqrt(grid)
    assert unmasked < intended - 5 * math.sqrt(intended)
    assert unmasked > prop52 + 2 * math.sqrt(prop52)


def test_nucleus_below_rule_known_answers_and_reference_formula():
    probs = torch.tensor([[0.05, 0.5, 0.15, 0.3]], dtype=torch.float64)
    # p = .7: the class that crosses (.3) is kept by "cross", cut by "below"
    assert torch.allclose(
        nucleus_filter(probs, 0.7, "cross")[0], torch.tensor([0, 0.625, 0, 0.375], dtype=torch.float64)
    )
    assert torch.allclose(nucleus_filter(probs, 0.7, "below")[0], torch.tensor([0, 1.0, 0, 0], dtype=torch.float64))
    # p below the top class: both keep the top class only
    assert torch.equal(nucleus_filter(probs, 0.2, "below"), nucleus_filter(probs, 0.2, "cross"))
    # BD3-LMs / MDM-Prime: sort, cumulative sum <= p, keep the first, renormalise
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 50, generator=g, dtype=torch.float64) * 3
    q = torch.softmax(logits, -1)
    for p in (0.5, 0.9, 0.95):
        s, idx = q.sort(-1, descending=True)
        keep = s.cumsum(-1) <= p
        keep[..., 0] = True
        ref = torch.zeros_like(q).scatter(-1, idx, s * keep)
        ref = ref / ref.sum(-1, keepdim=True)
        assert torch.allclose(nucleus_filter(q, p, "below"), ref, atol=0, rtol=1e-12)
    # on peaked rows the two rules give measurably different filtered entropies
    ent = lambda d: float(-(d * d.clamp_min(1e-300).log()).sum(-1).mean())  # noqa: E731
    assert ent(nucleus_filter(q, 0.9, "cross")) - ent(nucleus_filter(q, 0.9, "below")) > 0.05
    with pytest.raises(PrimebenchError, match="nucleus rule"):
        nucleus_filter(probs, 0.5, "above")
