"""Gen PPL at matched entropy: ``eval genppl --sweep temperature=0.7,0.8,...`` (or ``nucleus=...``).

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

from harness.errors import InputError

#: sweep knob -> the run_genppl argument it sets, and its valid range
KNOBS = {"temperature": ("temperature", (1e-3, 1e3)), "nucleus": ("nucleus_p", (0.0, 1.0))}


def parse_sweep(text: str) -> tuple[str, list[float]]:
    """``"temperature=0.7,0.8"`` -> ``("temperature", [0.7, 0.8])``; a clear error for anything else."""
    knob, sep, values = text.partition("=")
    knob = knob.strip()
    fix = "use --sweep temperature=0.7,0.8,0.9,1.0 or --sweep nucleus=0.8,0.9,0.95,1.0"
    if not sep or knob not in KNOBS:
        raise InputError(f"--sweep {text!r}: the knob must be one of {sorted(KNOBS)}", fix=fix)
    try:
        numbers = [float(v) for v in values.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"--sweep {text!r}: the values must be numbers separated by commas", fix=fix) from None
    low, high = KNOBS[knob][1]
    bad = [v for v in numbers if not (low < v <= high) or not math.isfinite(v)]
    if len(numbers) < 2 or bad or len(set(numbers)) != len(numbers):
        raise InputError(
            f"--sweep {text!r}: needs at least two distinct values in ({low}, {high}]"
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


def run_sweep(checkpoint, *, sweep: str, judge_obj=None, **settings) -> tuple[dict, list[tuple[dict, list]]]:
    """One ``genppl`` record per sweep value and the ``genppl-matched`` record read off their curve:
    ``(matched record, [(point record, its samples), ...])``. ``settings`` go to
    :func:`harness.evaluation.genppl.run_genppl` (the sweep's knob must not be among them)."""
    from harness.evaluation.genppl import run_genppl
    from harness.judges import load_judge
    from harness.records import Metric, make_record

    knob, values = parse_sweep(sweep)
    arg = KNOBS[knob][0]
    if settings.get("samples_file") is not None:
        raise InputError("--sweep draws samples; it cannot score a --samples-file", fix="pass one of the two")
    if settings.get("references") is False:
        raise InputError("--sweep reads the curve at the data reference's entropy", fix="drop --no-references")
    judge = settings.pop("judge", "smollm2")
    if judge_obj is None and judge:
        judge_obj = load_judge(judge, device=settings.get("device", "cpu"))
    if judge_obj is None:
        raise InputError("--sweep compares Gen PPL, which needs a judge", fix="pass --judge")
    settings.pop(arg, None)
    results = [run_genppl(checkpoint, judge_obj=judge_obj, **settings, **{arg: v}) for v in values]
    points = []
    for value, (record, _) in zip(values, results, strict=True):
        m = record["metrics"]
        points.append(
            {
                "value": value,
                "entropy": m["entropy_model"]["value"],
                "entropy_se": m["entropy_model"]["stderr"],
                "gen_ppl": m["gen_ppl"]["value"],
                "gen_ppl_se": m["gen_ppl"]["stderr"],
            }
        )
    first = results[0][0]
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
    record = make_record(
        "genppl-matched",
        model=first["model"],
        metrics=metrics,
        protocol=protocol,
        seed=first["protocol"]["seed"],
        device=settings.get("device", "cpu"),
        extra={"curve": points, "references": first["references"]},
    )
    return record, results


__all__ = ["KNOBS", "matched_gen_ppl", "parse_sweep", "run_sweep"]
