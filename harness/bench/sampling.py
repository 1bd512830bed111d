"""Bench stages 5 and 6, sampling: NFE and wall of the ancestral sampler (cached and not),
first-hitting, Prime, BD3-LM's block-by-block sampler, UDLM's posterior sampler, and the cost of
float64 draws over float32."""

from __future__ import annotations

import statistics
import time

from harness.audit.idle import idle_step_ratio
from harness.bench.measure import C_GPT2, Figure, median_time
from harness.models import build_model
from harness.sampling import generate


def _tiny_sampler_model(family, *, C, L, ell=None, device="cpu", d=32, **extra):
    """A one-block network: the sampler's own cost at C classes dominates, as it does at scale."""

    kw = dict(vocab_size=C, seq_len=L, d_model=d * (ell or 1), n_layers=1, n_heads=2, schedule="linear", **extra)
    if ell:
        kw["ell"] = ell
    return build_model(family, **kw).to(device).eval()


def _timed(model, sampler, **kw):
    """``(SampleOutput, seconds)`` of one :func:`harness.sampling.generate` call seeded with 0."""

    began = time.perf_counter()
    res = generate(model, sampler, generator=0, **kw)
    return res, time.perf_counter() - began


def _mean_nfe(res) -> float:
    return float(res.nfe.double().mean())


def _nfe_figure(label, family, *, L, T, nfe_samples, device, ell=None) -> Figure:
    """The cached ancestral sampler's mean NFE over its expectation T (1 - ISR), on a C = 1000 model
    (the statistic does not depend on C or the network), from ``nfe_samples`` samples."""

    small = _tiny_sampler_model(family, C=1000, L=L, ell=ell, device=device, d=16)
    res, _ = _timed(small, "ancestral", num_samples=nfe_samples, batch_size=nfe_samples, steps=T)
    nfe = res.nfe.double()
    expected = T * (1 - float(idle_step_ratio(L, T, ell=ell or 1, schedule="linear")))
    mean, se = float(nfe.mean()), float(nfe.std() / nfe.numel() ** 0.5)
    facts = {"nfe": mean, "nfe_stderr": se, "expected": expected, "T": T, "L": L, "samples": nfe_samples, "C": 1000}
    return Figure(
        f"sampling: {label} cached NFE / T (1 - ISR)",
        mean / expected,
        "ratio",
        "within 3%",
        abs(mean / expected - 1) <= 0.03,
        facts | {"draw": res.protocol["draw"]},
    )


def _median_run(model, sampler, repeats, **kw):
    """The first of ``repeats`` runs and the median of their walls."""
    runs = [_timed(model, sampler, **kw) for _ in range(repeats)]
    return runs[0][0], statistics.median(w for _, w in runs)


def _mdlm_figures(mdlm, *, L, T, C, samples, T_uncached, repeats) -> tuple[list[Figure], float]:
    """MDLM's cached wall per sample at ``C`` classes, the wall per NFE cached over uncached, and
    first-hitting's NFE; also returns the uncached seconds per NFE (the posterior figure's yardstick).
    One sample per batch, so that a denoiser call is exactly one NFE in both runs (in a batch, the
    cached run calls the network for the few rows that reveal, the uncached run for all of them)."""
    _timed(mdlm, "ancestral", num_samples=1, batch_size=1, steps=4)  # warm-up: allocations, kernels
    cached, wall_c = _median_run(mdlm, "ancestral", repeats, num_samples=samples, batch_size=1, steps=T)
    uncached, wall_u = _median_run(
        mdlm, "ancestral", repeats, num_samples=samples, batch_size=1, steps=T_uncached, cache=False
    )
    per_c, per_u = wall_c / _mean_nfe(cached), wall_u / _mean_nfe(uncached)
    fh, wall_fh = _timed(mdlm, "first-hitting", num_samples=samples, batch_size=samples)
    figures = [
        Figure(
            f"sampling: MDLM wall at C = {C}, T = {T}, cached",
            wall_c / samples,
            "s/sample",
            None,
            None,
            {"nfe": _mean_nfe(cached), "samples": samples, "batch_size": 1},
        ),
        Figure(
            "sampling: wall per NFE, cached / uncached",
            per_c / per_u,
            "ratio",
            "within 15%",
            abs(per_c / per_u - 1) <= 0.15,
            {
                "cached_s_per_nfe": per_c,
                "uncached_s_per_nfe": per_u,
                "uncached_T": T_uncached,
                "uncached_nfe": _mean_nfe(uncached),
            },
        ),
        Figure(
            "sampling: first-hitting NFE",
            _mean_nfe(fh),
            "calls",
            f"exactly L = {L}",
            bool((fh.nfe == L).all()),
            {"wall_s_per_sample": wall_fh / samples},
        ),
    ]
    return figures, per_u


def _prime_wall_figure(ell, *, L, T, C, samples, device) -> Figure:
    prime = _tiny_sampler_model("prime", C=C, L=L, ell=ell, device=device, d=16)
    res, wall = _timed(prime, "ancestral", num_samples=samples, batch_size=samples, steps=T)
    return Figure(
        f"sampling: Prime ell={ell} wall at C = {C}, T = {T}, cached",
        wall / samples,
        "s/sample",
        None,
        None,
        {"nfe": _mean_nfe(res), "samples": samples, "s_per_nfe": wall / _mean_nfe(res)},
    )


def _posterior_figure(*, L, T, C, samples, repeats, device, mdlm_s_per_nfe) -> Figure:
    """UDLM's posterior sampler (every position redrawn at each of its T steps, NFE = T) at ``C``
    classes: seconds per NFE over MDLM's uncached ancestral step on the same network, one sample per
    batch in both. Both steps call the network on every row; the posterior step's default two-stage
    draw picks a part of q(x_s | x_t, x_theta) per position and draws a token over C only where the
    part is x_theta. The joint draw (the whole posterior over C, then Gumbel-max: UDLM's and DUO's
    code) is timed beside it on one short run (``T // 8`` steps), for the extras."""
    udlm = _tiny_sampler_model("udlm", C=C, L=L, device=device)
    _timed(udlm, "posterior", num_samples=1, batch_size=1, steps=2)  # warm-up
    res, wall = _median_run(udlm, "posterior", repeats, num_samples=samples, batch_size=1, steps=T)
    per = wall / _mean_nfe(res)
    joint, wall_joint = _timed(udlm, "posterior", num_samples=1, batch_size=1, steps=max(1, T // 8), draw="joint")
    return Figure(
        f"sampling: UDLM posterior (two-stage draw) wall per NFE / MDLM uncached, C = {C}",
        per / mdlm_s_per_nfe,
        "ratio",
        "<= 1.5",
        per / mdlm_s_per_nfe <= 1.5,
        {
            "posterior_s_per_nfe": per,
            "mdlm_uncached_s_per_nfe": mdlm_s_per_nfe,
            "joint_draw_s_per_nfe": wall_joint / _mean_nfe(joint),
            "T": T,
            "nfe": _mean_nfe(res),
            "s_per_sample": wall / samples,
            "samples": samples,
            "L": L,
        },
    )


def sampling_figures(*, L=256, T=1024, C=C_GPT2, samples=4, nfe_samples=64, T_uncached=128, repeats=3, device="cpu"):
    """Stage 5: cached NFE against T (1 - ISR) for MDLM and Prime (ell 2, 4), wall per sample at ``C``
    classes, wall per NFE cached over uncached (``T_uncached`` steps), first-hitting's NFE, BD3-LM's
    blocks and UDLM's posterior sampler (``T_uncached`` steps) against MDLM's uncached step.

    Wall at C = 50257; the NFE statistic (which does not depend on C or the network) from
    ``nfe_samples`` samples of a C = 1000 model, so that its standard error is well below 3%.
    Returns the :class:`Figure` list."""
    nfe = dict(L=L, T=T, nfe_samples=nfe_samples, device=device)
    out = [_nfe_figure("MDLM", "mdlm", **nfe)]
    mdlm = _tiny_sampler_model("mdlm", C=C, L=L, device=device)
    mdlm_figures, mdlm_s_per_nfe = _mdlm_figures(
        mdlm, L=L, T=T, C=C, samples=samples, T_uncached=T_uncached, repeats=repeats
    )
    out += mdlm_figures
    for ell in (2, 4):
        out.append(_nfe_figure(f"Prime ell={ell}", "prime", ell=ell, **nfe))
        out.append(_prime_wall_figure(ell, L=L, T=T, C=C, samples=samples, device=device))
    out.append(_bd3lm_figure(L=L, C=C, samples=samples, device=device))
    out.append(
        _posterior_figure(
            L=L, T=T_uncached, C=C, samples=samples, repeats=repeats, device=device, mdlm_s_per_nfe=mdlm_s_per_nfe
        )
    )
    return out


def _bd3lm_figure(*, L, C, samples, device, block=16):
    """BD3-LM block by block with its key-value cache: ``block`` steps per block of ``block`` tokens
    (T = L in all), wall per sample at ``C`` classes; its NFE is at most T (a step that reveals
    nothing calls no network)."""
    model = _tiny_sampler_model("bd3lm", C=C, L=L, device=device, block_size=block)
    res, wall = _timed(model, "ancestral", num_samples=samples, batch_size=samples)
    nfe = float(res.nfe.double().mean())
    return Figure(
        f"sampling: BD3-LM (blocks of {model.block_size}) wall at C = {C}, cached blocks",
        wall / samples,
        "s/sample",
        f"NFE <= T = {L}",
        bool((res.nfe <= L).all()),
        {"nfe": nfe, "samples": samples, "steps_per_block": model.block_size},
    )


def precision_cost_figures(*, L=256, T=256, C=C_GPT2, samples=4, repeats=1, device="cpu"):
    """Stage 6: a whole MDLM sampling run (``T`` steps, ``samples`` samples) with float64 draws over the
    same run in float32, for the two-stage draw (target <= 1.10) and the joint draw. Returns two
    :class:`Figure`."""

    mdlm = _tiny_sampler_model("mdlm", C=C, L=L, device=device)
    out = []
    for draw in ("two-stage", "joint"):
        wall = {}
        for dtype in ("float32", "float64"):
            wall[dtype] = median_time(
                lambda dtype=dtype: generate(
                    mdlm,
                    "ancestral",
                    num_samples=samples,
                    batch_size=samples,
                    steps=T,
                    dtype=dtype,
                    generator=0,
                    draw=draw,
                    method="gumbel",
                ),
                repeats,
                warmup=0,
            )
        ratio = wall["float64"] / wall["float32"]
        target = "<= 1.10" if draw == "two-stage" else None
        out.append(
            Figure(
                f"precision: {draw} draw, float64 / float32 sampling run",
                ratio,
                "ratio",
                target,
                ratio <= 1.10 if target else None,
                {
                    "float32_s": wall["float32"],
                    "float64_s": wall["float64"],
                    "T": T,
                    "L": L,
                    "C": C,
                    "samples": samples,
                },
            )
        )
    return out
