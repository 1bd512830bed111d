"""Gen PPL at matched entropy: ``eval genppl --sweep temperature=0.7,0.8,...`` (or ``nucleus-p=...``, or
ReMDM's ``eta=...`` with ``--sampler remdm``).

Gen PPL falls as entropy falls, so two models are compared at the same diversity: the sweep draws
one ``genppl`` record per value of the knob (each the full protocol, references included), and a
``genppl-matched`` record reads the curve of Gen PPL against per-sample entropy (model ids) at the
``data`` reference's entropy. Between the two sweep points that bracket that entropy, log Gen PPL
is interpolated linearly in entropy,

    log G* = w log G_a + (1 - w) log G_b,   w = (H_b - H*) / (H_b - H_a),

with the standard error of G* from the points' errors (independent draws):
se(G*) = G* sqrt((w se_a / G_a)^2 + ((1 - w) se_b / G_b)^2). When no two points bracket H* the
record says so and gives no number (extend the sweep); it never extrapolates.
"""

from __future__ import annotations

import math
from dataclasses import replace

from harness.errors import InputError
from harness.evaluation.genppl import genppl_settings, run_genppl
from harness.judges import load_judge
from harness.logging import console
from harness.records import Metric, make_record

#: sweep knob -> the run_genppl argument it sets, and its valid range
KNOBS = {
    "temperature": ("temperature", (1e-3, 1e3)),
    "nucleus-p": ("nucleus_p", (0.0, 1.0)),
    "eta": ("remask_eta", (0.0, 1.0)),  # ReMDM's remasking eta (--sampler remdm); 0 included: no remasking
}
#: knobs whose lower end is a valid value
CLOSED_BELOW = {"eta"}
#: older knob names, still read (with a deprecation line)
OLD_KNOBS = {"nucleus": "nucleus-p"}


def parse_sweep(text: str) -> tuple[str, list[float]]:
    """``"temperature=0.7,0.8"`` -> ``("temperature", [0.7, 0.8])``; a clear error for anything else."""
    knob, sep, values = text.partition("=")
    knob = knob.strip()
    if knob in OLD_KNOBS:
        console().print(f"--sweep {knob}= is deprecated; use {OLD_KNOBS[knob]}=", highlight=False)
        knob = OLD_KNOBS[knob]
    fix = (
        "use --sweep temperature=0.7,0.8,0.9,1.0, --sweep nucleus-p=0.8,0.9,0.95,1.0 or (--sampler remdm) "
        "--sweep eta=0,0.01,0.02"
    )
    if not sep or knob not in KNOBS:
        raise InputError(f"--sweep {text!r}: the knob must be one of {sorted(KNOBS)}", fix=fix)
    try:
        numbers = [float(v) for v in values.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"--sweep {text!r}: the values must be numbers separated by commas", fix=fix) from None
    low, high = KNOBS[knob][1]
    closed = knob in CLOSED_BELOW
    bad = [v for v in numbers if not (low <= v if closed else low < v) or not v <= high or not math.isfinite(v)]
    if len(numbers) < 2 or bad or len(set(numbers)) != len(numbers):
        raise InputError(
            f"--sweep {text!r}: needs at least two distinct values in {'[' if closed else '('}{low}, {high}]"
            + (f"; {bad[0]} is not" if bad else ""),
            fix=fix,
        )
    return knob, sorted(numbers)


def matched_gen_ppl(points: list[dict], target: float) -> dict | None:
    """``points``: ``{"value", "entropy", "gen_ppl", "gen_ppl_se"}`` per sweep value. The Gen PPL
    interpolated at entropy ``target`` (see the module), with the bracketing points; None when no
    two adjacent points (in entropy order) bracket it."""
    ordered = sorted(points, key=lambda p: p["entropy"])
    for a, b in zip(ordered, ordered[1:]):
        if a["entropy"] <= target <= b["entropy"] and b["entropy"] > a["entropy"]:
            w = (b["entropy"] - target) / (b["entropy"] - a["entropy"])
            value = math.exp(w * math.log(a["gen_ppl"]) + (1 - w) * math.log(b["gen_ppl"]))
            rel = [
                (weight * p["gen_ppl_se"] / p["gen_ppl"]) if p["gen_ppl_se"] is not None else math.nan
                for weight, p in ((w, a), (1 - w, b))
            ]
            se = value * math.sqrt(sum(r * r for r in rel))
            return {"value": value, "stderr": se if math.isfinite(se) else None, "between": [a["value"], b["value"]]}
    return None


def _point(value: float, record: dict) -> dict:
    m = record["metrics"]
    return {
        "value": value,
        "entropy": m["entropy_model"]["value"],
        "entropy_se": m["entropy_model"]["stderr"],
        "gen_ppl": m["gen_ppl"]["value"],
        "gen_ppl_se": m["gen_ppl"]["stderr"],
    }


def _sweep_settings(settings, sweep: str, changes: dict):
    """``(knob, values, the run_genppl argument it sets, the settings of every point)``."""

    knob, values = parse_sweep(sweep)
    arg = KNOBS[knob][0]
    s = genppl_settings(settings, **{k: v for k, v in changes.items() if k != arg})
    if s.samples_file is not None:
        raise InputError("--sweep draws samples; it cannot score a --samples-file", fix="pass one of the two")
    if not s.references:
        raise InputError("--sweep reads the curve at the data reference's entropy", fix="drop --no-references")
    return knob, values, arg, s


def run_sweep(
    checkpoint, settings=None, *, sweep: str, judge_obj=None, **changes
) -> tuple[dict, list[tuple[dict, list]]]:
    """One ``genppl`` record per sweep value and the ``genppl-matched`` record read off their curve:
    ``(matched record, [(point record, its samples), ...])``. ``settings`` (a
    :class:`~harness.evaluation.genppl.GenPPLSettings`) and ``changes`` as for
    :func:`harness.evaluation.genppl.run_genppl`; the sweep's knob among them is ignored."""

    knob, values, arg, s = _sweep_settings(settings, sweep, changes)
    if judge_obj is None and s.judge:
        judge_obj = load_judge(s.judge, device=s.device)
    if judge_obj is None:
        raise InputError("--sweep compares Gen PPL, which needs a judge", fix="pass --judge")
    results = [run_genppl(checkpoint, replace(s, **{arg: v}), judge_obj=judge_obj) for v in values]
    points = [_point(value, record) for value, (record, _) in zip(values, results, strict=True)]
    return _matched_record(results[0][0], points, knob, values, arg, s.device), results


def _matched_record(first: dict, points: list[dict], knob: str, values: list[float], arg: str, device: str) -> dict:

    target = first["references"]["data"]["metrics"]["entropy_model"]["value"]
    matched = matched_gen_ppl(points, target)
    metrics = {}
    if matched is not None:
        metrics["gen_ppl_at_data_entropy"] = Metric(
            matched["value"],
            matched["stderr"],
            "estimate",
            f"{first['metrics']['gen_ppl']['units']}, interpolated at the data reference's entropy",
        )
    protocol = {
        "sweep": f"{knob} {', '.join(f'{v:g}' for v in values)}",
        "target_entropy": round(target, 4),  # the exact value: references.data.metrics.entropy_model
        "bracket": None if matched is None else f"{knob} {matched['between'][0]:g}..{matched['between'][1]:g}",
        "interpolation": "log Gen PPL linear in per-sample entropy (model ids) between the two bracketing points",
        "judge": first["protocol"]["judge"],
        "point_protocol": {k: v for k, v in first["protocol"].items() if k not in (arg,)},
    }
    if matched is None:
        protocol["not_bracketed"] = (
            f"no two sweep points bracket the data reference's entropy {target:.4f} "
            f"(points span {min(p['entropy'] for p in points):.4f}..{max(p['entropy'] for p in points):.4f})"
        )
    return make_record(
        "genppl-matched",
        model=first["model"],
        metrics=metrics,
        protocol=protocol,
        seed=first["protocol"]["seed"],
        device=device,
        extra={"curve": points, "references": first["references"]},
    )


__all__ = ["KNOBS", "matched_gen_ppl", "parse_sweep", "run_sweep"]
