"""``primebench audit gumbel``: what a finite-precision Gumbel-max draw samples, closed forms next to
real draws (Zheng et al. 2409.02908 Sec. 5.2-5.3; the formulas live in :mod:`harness.audit.gumbel`).

:func:`gumbel_audit` builds the rows (a frozen dataclass); the click command only parses, calls it
and renders. For each dtype the rows are: Prop. 5.2 at M(dtype) (continuous noise truncated at M),
the ``torch.rand`` grid model, and the empirical frequencies of ``draws`` draws through
:func:`harness.sampling.sample_categorical` for each method. KL is KL(row || intended) in nats;
entropies are in nats.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import click

DEFAULT_DRAWS = 200_000
#: --mdlm-step without --draws: at most this many uniforms per (distribution, method, dtype)
MDLM_ELEMENT_BUDGET = 1 << 24
GPT2_VOCAB = 50257
DISPLAY_CLASSES = 12


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
        return make_record("gumbel", model=model_block(None, name="categorical-draw", family=None),
                           metrics=metrics, protocol=self.protocol, seed=self.seed, wall_s=self.wall_s,
                           extra={"truncation_levels": self.truncation, "rows": [asdict(r) for r in self.rows]})


def _row(case, source, dtype, method, kind, q, intended, *, mdlm: bool, draws=None) -> GumbelRow:
    from harness.audit.gumbel import entropy, kl

    kl_value = max(float(kl(q, intended)), 0.0)  # >= 0; float64 rounding can give -1e-17
    if not mdlm:
        return GumbelRow(case, source, dtype, method, kind, kl_value, float(entropy(q)) + 0.0,
                         probs=tuple(float(v) for v in q), draws=draws)
    tokens = q[:-1]
    mass = float(tokens.sum())
    token_entropy = float(entropy(tokens / mass)) + 0.0 if mass > 0 else None
    events = se = None
    if draws is not None:
        events = round(mass * draws)
        se = math.sqrt(mass * (1 - mass) / draws) if events else None  # no estimate from 0 events
    return GumbelRow(case, source, dtype, method, kind, kl_value, token_entropy, unmask_mass=mass,
                     unmask_stderr=se, events=events, draws=draws)


def gumbel_audit(*, probs: list[float] | None = None, mdlm_step: int | None = None, steps: int = 1024,
                 vocab: int = GPT2_VOCAB, dtypes: list[str], methods: list[str], draws: int | None = None,
                 seed: int = 0, log=None) -> GumbelAudit:
    """Intended vs Prop. 5.2 vs grid model vs empirical draws, for ``probs`` or for MDLM's ancestral
    step ``mdlm_step`` of ``steps`` with a peaked and a flat token distribution over ``vocab`` tokens."""
    import torch

    from harness.audit.gumbel import (empirical_frequencies, grid_gumbel_probs, mdlm_step_distribution,
                                      peaked_and_flat, truncated_gumbel_probs, truncation_level, uniform_bits)
    from harness.errors import PrimebenchError
    from harness.sampling.categorical import parse_dtype

    if (probs is None) == (mdlm_step is None):
        raise PrimebenchError("give exactly one of probs= or mdlm_step=")
    dtype_names = [str(parse_dtype(d)).removeprefix("torch.") for d in dtypes]
    began = time.perf_counter()
    if probs is not None:
        p = torch.tensor(probs, dtype=torch.float64)
        cases = {"probs": p / p.sum()}
        n = DEFAULT_DRAWS if draws is None else draws
        protocol = {"mode": "probs", "input_sum": float(p.sum()), "normalised": True}
    else:
        gen = torch.Generator().manual_seed(seed)
        token = peaked_and_flat(vocab, gen)
        cases = {name: mdlm_step_distribution(getattr(token, name), step=mdlm_step, steps=steps)
                 for name in ("peaked", "flat")}
        n = max(1, min(DEFAULT_DRAWS, MDLM_ELEMENT_BUDGET // (vocab + 1))) if draws is None else draws
        protocol = {"mode": "mdlm-step", "step": mdlm_step, "steps": steps, "vocab": vocab, "schedule": "linear",
                    "peaked": "Zipf p(rank r) ∝ 1/r over V tokens, ranks randomly permuted (seed)",
                    "flat": "uniform over V tokens", "outcome_order": "V tokens, then stay-masked (last)",
                    "draws_limited_by_budget": draws is None and n < DEFAULT_DRAWS,
                    "element_budget": MDLM_ELEMENT_BUDGET if draws is None else None}
    protocol.update({"dtypes": dtype_names, "methods": list(methods), "draws": n, "seed": seed,
                     "kl": "KL(row || intended), nats", "entropy_units": "nats",
                     "uniform_bits": {d: uniform_bits(d) for d in dtype_names}})
    mdlm = mdlm_step is not None
    rows = []
    for case, pi in cases.items():
        rows.append(_row(case, "intended", None, None, "exact", pi, pi, mdlm=mdlm))
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
    return GumbelAudit(mode=protocol["mode"], rows=tuple(rows), truncation={d: truncation_level(d) for d in dtype_names},
                       protocol=protocol, seed=seed, wall_s=time.perf_counter() - began)


# -- rendering ----------------------------------------------------------------------------------

def _p(v: float) -> str:
    if v == 0:
        return "0"
    return f"{v:.3e}" if abs(v) < 1e-4 else f"{v:.8f}"


def _label(r: dict) -> tuple[str, str, str]:
    names = {"intended": "intended", "prop5.2": "Prop. 5.2", "grid": "grid model", "empirical": "empirical"}
    return names[r["source"]], r["dtype"] or "", r["method"] or ""


def _notes(record: dict) -> list[str]:
    p, levels = record["protocol"], record["truncation_levels"]
    intended = next(r["unmask_mass"] for r in record["rows"] if r["source"] == "intended")
    m_text = "; ".join(f"{d}: M = {M:.4f} (U on a 2^-{p['uniform_bits'][d]} grid)" for d, M in levels.items())
    n = p["draws"]
    notes = [
        "KL = KL(row || intended). "
        f"M = -log(-log(1 - 2^-b)) is the largest Gumbel noise torch.rand can give: {m_text}. "
        "Prop. 5.2 = Zheng et al.'s closed form for noise truncated at M; grid model = torch.rand's grid "
        "(float32 distorts about half as much as Prop. 5.2).",
        f"empirical: {n} draws per row; an event of probability ~2^-24 (where the float32 effect lives) needs "
        f"~2^24 = {2**24:.2e} draws to be seen once, so masses below ~1/{n} = {1 / n:.1e} may show 0 events: "
        "that is the draw count, not evidence against the effect. Empirical KL and entropy are plug-in "
        "estimates (noisy, biased when there are few events).",
    ]
    if p["mode"] == "mdlm-step":
        notes.append(f"MDLM ancestral step {p['step']} of {p['steps']} (linear): a masked position unmasks with "
                     f"the intended mass above and each of the V = {p['vocab']} tokens gets that mass times p(token) "
                     f"(flat: {_p(1 / p['vocab'])} x mass); 2^-24 = {2**-24:.2e}. Token entropy = entropy of the "
                     f"token part renormalised. Expected unmasking events in {n} draws: "
                     f"{n * intended:.3g} intended.")
        if p["draws_limited_by_budget"]:
            notes.append(f"draws limited to {n} so that each row costs at most {p['element_budget']:,} uniforms "
                         "(V + 1 per draw); pass --draws to draw more.")
    elif not math.isclose(p["input_sum"], 1.0, rel_tol=1e-9):
        notes.append(f"the given probabilities summed to {p['input_sum']:.6g} and were normalised.")
    return notes


def render_gumbel(record: dict) -> None:
    from rich.table import Table

    from harness.logging import stdout_console

    rows, p = record["rows"], record["protocol"]
    out = stdout_console()
    if p["mode"] == "probs":
        K = len(rows[0]["probs"])
        shown = K if K <= DISPLAY_CLASSES else DISPLAY_CLASSES - 1
        table = Table(title=f"Gumbel-max over K = {K} classes: intended vs closed forms vs draws "
                            "(columns), per class (rows)")
        table.add_column("class", no_wrap=True)
        for r in rows:
            header = "\n".join(x for x in _label(r) if x).replace("mdlm-legacy", "mdlm-\nlegacy")
            table.add_column(header.replace("grid model", "grid\nmodel"), justify="right")
        for k in range(shown):
            table.add_row(f"p[{k}]", *(_p(r["probs"][k]) for r in rows))
        if shown < K:
            table.add_row(f"rest ({K - shown} classes)", *(_p(sum(r["probs"][shown:])) for r in rows))
        table.add_row("KL nats", *(f"{r['kl']:.3e}" for r in rows), style="bold")
        table.add_row("entropy nats", *(f"{r['entropy']:.8f}" for r in rows), style="bold")
    else:
        table = Table(title=f"MDLM ancestral step {p['step']}/{p['steps']}, V = {p['vocab']}: "
                            "unmasking mass and token part")
        for name, justify in (("tokens", "left"), ("distribution", "left"), ("dtype", "left"), ("method", "left"),
                              ("unmask mass", "right"), ("/ intended", "right"), ("KL(.||intended) nats", "right"),
                              ("token entropy nats", "right"), ("events / draws", "right")):
            table.add_column(name, justify=justify)
        intended = {r["case"]: r["unmask_mass"] for r in rows if r["source"] == "intended"}
        for r in rows:
            mass = _p(r["unmask_mass"])
            if r["unmask_stderr"] is not None:
                mass += f" ± {_p(r['unmask_stderr'])}"
            elif r["events"] == 0:
                mass += f" (< {3 / r['draws']:.1e}, 95%)"  # rule of three
            ent = "n/a (0 events)" if r["entropy"] is None else f"{r['entropy']:.6f}"
            events = "" if r["draws"] is None else f"{r['events']} / {r['draws']}"
            table.add_row(r["case"] if r["source"] == "intended" else "", *_label(r), mass,
                          f"{r['unmask_mass'] / intended[r['case']]:.6f}", f"{r['kl']:.3e}", ent, events,
                          end_section=r is rows[-1] or rows[rows.index(r) + 1]["source"] == "intended")
    out.print(table)
    for note in _notes(record):
        out.print(note, highlight=False)


# -- command ------------------------------------------------------------------------------------

def _parse_probs(ctx, param, value: str | None) -> list[float] | None:
    if value is None:
        return None
    try:
        probs = [float(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of numbers (e.g. 0.1,0.2,0.3,0.4)") from None
    if len(probs) < 2:
        raise click.BadParameter(f"{value!r}: give at least two class probabilities, e.g. 0.1,0.9")
    if any(not math.isfinite(v) or v < 0 for v in probs):
        raise click.BadParameter(f"{value!r}: probabilities must be finite and >= 0")
    if sum(probs) <= 0:
        raise click.BadParameter(f"{value!r}: at least one probability must be positive")
    return probs


def _parse_list(allowed: tuple[str, ...] | None, what: str):
    def parse(ctx, param, value: str) -> list[str]:
        from harness.errors import PrimebenchError
        from harness.sampling.categorical import parse_dtype

        items = [v.strip() for v in value.split(",") if v.strip()]
        if not items:
            raise click.BadParameter(f"give at least one {what}")
        for item in items:
            if allowed is not None and item not in allowed:
                raise click.BadParameter(f"unknown {what} {item!r}; choose from {', '.join(allowed)}")
            if allowed is None:
                try:
                    parse_dtype(item)
                except PrimebenchError:
                    raise click.BadParameter(f"unsupported dtype {item!r}; use float32 and/or float64") from None
        return items

    return parse


@click.command("gumbel")
@click.option("--probs", default=None, callback=_parse_probs, metavar="P1,P2,...",
              help="Class probabilities to audit (>= 0; normalised).")
@click.option("--mdlm-step", type=click.IntRange(min=1), default=None, metavar="K",
              help="Audit MDLM's ancestral step K of T instead (peaked and flat token distributions).")
@click.option("--steps", type=click.IntRange(min=1), default=None, help="T for --mdlm-step. [default: 1024]")
@click.option("--vocab", type=click.IntRange(min=2), default=None,
              help=f"Vocabulary size V for --mdlm-step. [default: {GPT2_VOCAB}, GPT-2]")
@click.option("--dtype", "dtypes", default="float32,float64", show_default=True,
              callback=_parse_list(None, "dtype"), help="Precisions of the uniforms, comma-separated.")
@click.option("--methods", default="gumbel,race,mdlm-legacy", show_default=True,
              callback=_parse_list(("gumbel", "race", "mdlm-legacy"), "method"),
              help="sample_categorical methods, comma-separated.")
@click.option("--draws", type=click.IntRange(min=1), default=None,
              help=f"Draws per method and dtype. [default: {DEFAULT_DRAWS:,}; with --mdlm-step at most "
                   f"{MDLM_ELEMENT_BUDGET:,} / (V + 1), i.e. 333 at V = 50257]")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the draws (and of the Zipf ranks).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write the JSON record into this folder.")
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON instead of the table.")
def gumbel_cmd(probs, mdlm_step, steps, vocab, dtypes, methods, draws, seed, out, as_json):
    """What a float32/float64 Gumbel-max draw really samples: intended vs Zheng et al.'s Prop. 5.2 vs the
    torch.rand grid model vs empirical frequencies, with KL and entropy (nats)."""
    from harness.cli.eval import emit_record
    from harness.logging import console

    if (probs is None) == (mdlm_step is None):
        raise click.UsageError("give exactly one of --probs P1,P2,... or --mdlm-step K (with --steps T --vocab V)")
    if probs is not None and (steps is not None or vocab is not None):
        raise click.UsageError("--steps and --vocab apply only with --mdlm-step")
    steps = 1024 if steps is None else steps
    vocab = GPT2_VOCAB if vocab is None else vocab
    if mdlm_step is not None and mdlm_step > steps:
        raise click.BadParameter(f"step {mdlm_step} is past the last step T = {steps}", param_hint="--mdlm-step")
    audit = gumbel_audit(probs=probs, mdlm_step=mdlm_step, steps=steps, vocab=vocab, dtypes=dtypes,
                         methods=methods, draws=draws, seed=seed, log=lambda message: console().log(message))
    emit_record(audit.to_record(), out=out, as_json=as_json, render=render_gumbel)


COMMANDS = [gumbel_cmd]
