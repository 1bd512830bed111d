"""The Gumbel audit: intended probabilities next to closed forms and real draws (Zheng et al.
2409.02908 Sec. 5.2-5.3; the formulas live in :mod:`harness.audit.gumbel`).

:func:`gumbel_audit` returns a :class:`GumbelAudit` of rows. For each dtype the rows are: Prop. 5.2
at M(dtype) (continuous noise truncated at M), the ``torch.rand`` grid model, and the empirical
frequencies of ``draws`` draws through :func:`harness.sampling.sample_categorical` for each method.
KL is KL(row || intended) in nats; entropies are in nats. Torch is imported inside the functions so
that the command line can read the defaults below without loading it.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

DEFAULT_DRAWS = 200_000
#: --mdlm-step without --draws: at most this many uniforms per (distribution, method, dtype)
MDLM_ELEMENT_BUDGET = 1 << 24
GPT2_VOCAB = 50257


@dataclass(frozen=True)
class GumbelRow:
    """One distribution over the K classes (``--probs``) or the V + 1 outcomes of an MDLM step.

    ``source``: intended | prop5.2 | grid | empirical. ``kl``: KL(row || intended), nats.
    ``entropy``: nats, of the whole distribution (``--probs``) or of the token part renormalised
    (``--mdlm-step``; None when no token was drawn). ``unmask_mass``: total probability of leaving
    the mask (``--mdlm-step``), with a binomial standard error for empirical rows. ``events``:
    empirical draws that unmasked. ``probs``: the full distribution (``--probs`` only).
    """

    case: str
    source: str
    dtype: str | None
    method: str | None
    kind: str
    kl: float
    entropy: float | None
    probs: tuple[float, ...] | None = None
    unmask_mass: float | None = None
    unmask_stderr: float | None = None
    events: int | None = None
    draws: int | None = None


@dataclass(frozen=True)
class GumbelAudit:
    mode: str  # "probs" | "mdlm-step"
    rows: tuple[GumbelRow, ...]
    truncation: dict[str, float] = field(default_factory=dict)  # dtype -> M
    protocol: dict = field(default_factory=dict)
    seed: int = 0
    wall_s: float = 0.0

    def to_record(self) -> dict:
        """A ``primebench-record/1`` document (``evaluation = "gumbel"``)."""
        # deferred: the CLI imports this module's constants at start-up, without torch
        from harness.records import Metric, make_record, model_block

        metrics: dict[str, Metric] = {}
        for r in self.rows:
            if r.source == "intended":
                continue
            key = "/".join(x for x in (r.case, r.source, r.dtype, r.method) if x)
            exact = 0.0 if r.source == "prop5.2" else None
            metrics[f"{key}/kl"] = Metric(r.kl, exact, r.kind, "nats")
            if r.entropy is not None:
                metrics[f"{key}/entropy"] = Metric(r.entropy, exact, r.kind, "nats")
            if r.unmask_mass is not None:
                se = r.unmask_stderr if r.source == "empirical" else exact
                metrics[f"{key}/unmask_mass"] = Metric(r.unmask_mass, se, r.kind, "probability")
        return make_record(
            "gumbel",
            model=model_block(None, name="categorical-draw", family=None),
            metrics=metrics,
            protocol=self.protocol,
            seed=self.seed,
            wall_s=self.wall_s,
            extra={"truncation_levels": self.truncation, "rows": [asdict(r) for r in self.rows]},
        )


def _row(case, source, dtype, method, kind, q, intended, *, mdlm: bool, draws=None) -> GumbelRow:
    """The row of distribution ``q`` (float64 (K,), or (V + 1,) with stay-masked last for ``mdlm``)."""
    # deferred: the CLI imports this module's constants at start-up, without torch
    from harness.audit.gumbel import entropy, kl

    kl_value = max(float(kl(q, intended)), 0.0)  # >= 0; float64 rounding can give -1e-17
    if not mdlm:
        return GumbelRow(
            case,
            source,
            dtype,
            method,
            kind,
            kl_value,
            float(entropy(q)) + 0.0,
            probs=tuple(float(v) for v in q),
            draws=draws,
        )
    tokens = q[:-1]
    mass = float(tokens.sum())
    token_entropy = float(entropy(tokens / mass)) + 0.0 if mass > 0 else None
    events = se = None
    if draws is not None:
        events = round(mass * draws)
        se = math.sqrt(mass * (1 - mass) / draws) if events else None  # no estimate from 0 events
    return GumbelRow(
        case,
        source,
        dtype,
        method,
        kind,
        kl_value,
        token_entropy,
        unmask_mass=mass,
        unmask_stderr=se,
        events=events,
        draws=draws,
    )


def _cases(probs, mdlm_step, steps: int, vocab: int, draws, seed: int):
    """``(cases {name: intended distribution}, number of draws, protocol)`` of either mode."""
    # deferred: the CLI imports this module's constants at start-up, without torch
    import torch

    from harness.audit.gumbel import mdlm_step_distribution, peaked_and_flat

    if probs is not None:
        p = torch.tensor(probs, dtype=torch.float64)
        n = DEFAULT_DRAWS if draws is None else draws
        return {"probs": p / p.sum()}, n, {"mode": "probs", "input_sum": float(p.sum()), "normalised": True}
    token = peaked_and_flat(vocab, torch.Generator().manual_seed(seed))
    cases = {
        name: mdlm_step_distribution(getattr(token, name), step=mdlm_step, steps=steps) for name in ("peaked", "flat")
    }
    n = max(1, min(DEFAULT_DRAWS, MDLM_ELEMENT_BUDGET // (vocab + 1))) if draws is None else draws
    protocol = {
        "mode": "mdlm-step",
        "step": mdlm_step,
        "steps": steps,
        "vocab": vocab,
        "schedule": "linear",
        "peaked": "Zipf p(rank r) ∝ 1/r over V tokens, ranks randomly permuted (seed)",
        "flat": "uniform over V tokens",
        "outcome_order": "V tokens, then stay-masked (last)",
        "draws_limited_by_budget": draws is None and n < DEFAULT_DRAWS,
        "element_budget": MDLM_ELEMENT_BUDGET if draws is None else None,
    }
    return cases, n, protocol


def _case_rows(case: str, pi, dtype_names, methods, *, n: int, seed: int, mdlm: bool, log) -> list[GumbelRow]:
    """The intended row, Prop. 5.2 and the grid model per dtype, then empirical draws per dtype and method."""
    # deferred: the CLI imports this module's constants at start-up, without torch
    import torch

    from harness.audit.gumbel import empirical_frequencies, grid_gumbel_probs, truncated_gumbel_probs

    rows = [_row(case, "intended", None, None, "exact", pi, pi, mdlm=mdlm)]
    for d in dtype_names:
        rows.append(_row(case, "prop5.2", d, None, "exact", truncated_gumbel_probs(pi, d), pi, mdlm=mdlm))
        rows.append(_row(case, "grid", d, None, "estimate", grid_gumbel_probs(pi, d), pi, mdlm=mdlm))
    for d in dtype_names:
        for method in methods:
            t0 = time.perf_counter()
            gen = torch.Generator().manual_seed(seed)
            freq = empirical_frequencies(pi, method=method, dtype=d, draws=n, generator=gen)
            rows.append(_row(case, "empirical", d, method, "estimate", freq, pi, mdlm=mdlm, draws=n))
            if log is not None:
                log(f"{case}: {n} draws, {method}, {d} in {time.perf_counter() - t0:.1f} s")
    return rows


def gumbel_audit(
    *,
    probs: list[float] | None = None,
    mdlm_step: int | None = None,
    steps: int = 1024,
    vocab: int = GPT2_VOCAB,
    dtypes: list[str],
    methods: list[str],
    draws: int | None = None,
    seed: int = 0,
    log=None,
) -> GumbelAudit:
    """Intended vs Prop. 5.2 vs grid model vs empirical draws, for ``probs`` or for MDLM's ancestral
    step ``mdlm_step`` of ``steps`` with a peaked and a flat token distribution over ``vocab`` tokens."""
    # deferred: the CLI imports this module's constants at start-up, without torch
    from harness.audit.gumbel import truncation_level, uniform_bits
    from harness.errors import PrimebenchError
    from harness.sampling.categorical import parse_dtype

    if (probs is None) == (mdlm_step is None):
        raise PrimebenchError("give exactly one of probs= or mdlm_step=")
    dtype_names = [str(parse_dtype(d)).removeprefix("torch.") for d in dtypes]
    began = time.perf_counter()
    cases, n, protocol = _cases(probs, mdlm_step, steps, vocab, draws, seed)
    protocol.update(
        {
            "dtypes": dtype_names,
            "methods": list(methods),
            "draws": n,
            "seed": seed,
            "kl": "KL(row || intended), nats",
            "entropy_units": "nats",
            "uniform_bits": {d: uniform_bits(d) for d in dtype_names},
        }
    )
    rows = []
    for case, pi in cases.items():
        rows += _case_rows(case, pi, dtype_names, methods, n=n, seed=seed, mdlm=mdlm_step is not None, log=log)
    return GumbelAudit(
        mode=protocol["mode"],
        rows=tuple(rows),
        truncation={d: truncation_level(d) for d in dtype_names},
        protocol=protocol,
        seed=seed,
        wall_s=time.perf_counter() - began,
    )


__all__ = ["DEFAULT_DRAWS", "GPT2_VOCAB", "GumbelAudit", "GumbelRow", "MDLM_ELEMENT_BUDGET", "gumbel_audit"]
