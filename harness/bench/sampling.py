"""Bench stages 5 and 6, sampling: NFE and wall of the ancestral sampler (cached and not),
first-hitting, Prime and BD3-LM's block-by-block sampler, and the cost of float64 draws over float32."""

from __future__ import annotations

import statistics
import time

from harness.bench.measure import C_GPT2, Figure, median_time


def _tiny_sampler_model(family, *, C, L, ell=None, device="cpu", d=32, **extra):
    """A one-block network: the sampler's own cost at C classes dominates, as it does at scale."""
    from harness.models import build_model

    kw = dict(vocab_size=C, seq_len=L, d_model=d * (ell or 1), n_layers=1, n_heads=2, schedule="linear", **extra)
    if ell:
        kw["ell"] = ell
    return build_model(family, **kw).to(device).eval()


def sampling_figures(*, L=256, T=1024, C=C_GPT2, samples=4, nfe_samples=64, T_uncached=128, repeats=3, device="cpu"):
    """Stage 5: cached NFE against T (1 - ISR) for MDLM and Prime (ell 2, 4), wall per sample at ``C``
    classes, wall per NFE cached over uncached (``T_uncached`` steps), and first-hitting's NFE.

    Wall at C = 50257; the NFE statistic (which does not depend on C or the network) from
    ``nfe_samples`` samples of a C = 1000 model, so that its standard error is well below 3%.
    Returns the :class:`Figure` list."""
    from harness.audit.idle import idle_step_ratio
    from harness.sampling import generate

    out = []

    def timed(model, sampler, **kw):
        began = time.perf_counter()
        res = generate(model, sampler, generator=0, **kw)
        return res, time.perf_counter() - began

    def nfe_figure(label, family, ell=None):
        small = _tiny_sampler_model(family, C=1000, L=L, ell=ell, device=device, d=16)
        res, _ = timed(small, "ancestral", num_samples=nfe_samples, batch_size=nfe_samples, steps=T)
        nfe = res.nfe.double()
        expected = T * (1 - float(idle_step_ratio(L, T, ell=ell or 1, schedule="linear")))
        mean, se = float(nfe.mean()), float(nfe.std() / nfe.numel() ** 0.5)
        return Figure(
            f"sampling: {label} cached NFE / T (1 - ISR)",
            mean / expected,
            "ratio",
            "within 3%",
            abs(mean / expected - 1) <= 0.03,
            {
                "nfe": mean,
                "nfe_stderr": se,
                "expected": expected,
                "T": T,
                "L": L,
                "samples": nfe_samples,
                "C": 1000,
                "draw": res.protocol["draw"],
            },
        )

    out.append(nfe_figure("MDLM", "mdlm"))
    mdlm = _tiny_sampler_model("mdlm", C=C, L=L, device=device)
    timed(mdlm, "ancestral", num_samples=1, batch_size=1, steps=4)  # warm-up: allocations, kernels
    # one sample per batch, so that a denoiser call is exactly one NFE in both runs (in a batch, the
    # cached run calls the network for the few rows that reveal, the uncached run for all of them)
    runs_c = [timed(mdlm, "ancestral", num_samples=samples, batch_size=1, steps=T) for _ in range(repeats)]
    runs_u = [
        timed(mdlm, "ancestral", num_samples=samples, batch_size=1, steps=T_uncached, cache=False)
        for _ in range(repeats)
    ]
    cached, wall_c = runs_c[0][0], statistics.median(w for _, w in runs_c)
    uncached, wall_u = runs_u[0][0], statistics.median(w for _, w in runs_u)
    per_c = wall_c / float(cached.nfe.double().mean())
    per_u = wall_u / float(uncached.nfe.double().mean())
    out.append(
        Figure(
            f"sampling: MDLM wall at C = {C}, T = {T}, cached",
            wall_c / samples,
            "s/sample",
            None,
            None,
            {"nfe": float(cached.nfe.double().mean()), "samples": samples, "batch_size": 1},
        )
    )
    out.append(
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
                "uncached_nfe": float(uncached.nfe.double().mean()),
            },
        )
    )
    fh, wall_fh = timed(mdlm, "first-hitting", num_samples=samples, batch_size=samples)
    out.append(
        Figure(
            "sampling: first-hitting NFE",
            float(fh.nfe.double().mean()),
            "calls",
            f"exactly L = {L}",
            bool((fh.nfe == L).all()),
            {"wall_s_per_sample": wall_fh / samples},
        )
    )
    for ell in (2, 4):
        out.append(nfe_figure(f"Prime ell={ell}", "prime", ell))
        prime = _tiny_sampler_model("prime", C=C, L=L, ell=ell, device=device, d=16)
        res, wall = timed(prime, "ancestral", num_samples=samples, batch_size=samples, steps=T)
        out.append(
            Figure(
                f"sampling: Prime ell={ell} wall at C = {C}, T = {T}, cached",
                wall / samples,
                "s/sample",
                None,
                None,
                {
                    "nfe": float(res.nfe.double().mean()),
                    "samples": samples,
                    "s_per_nfe": wall / float(res.nfe.double().mean()),
                },
            )
        )
    out.append(_bd3lm_figure(L=L, C=C, samples=samples, device=device, timed=timed))
    return out


def _bd3lm_figure(*, L, C, samples, device, timed, block=16):
    """BD3-LM block by block with its key-value cache: ``block`` steps per block of ``block`` tokens
    (T = L in all), wall per sample at ``C`` classes; its NFE is at most T (a step that reveals
    nothing calls no network)."""
    model = _tiny_sampler_model("bd3lm", C=C, L=L, device=device, block_size=block)
    res, wall = timed(model, "ancestral", num_samples=samples, batch_size=samples)
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
    from harness.sampling import generate

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
