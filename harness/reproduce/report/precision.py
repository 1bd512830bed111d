"""The report of ``primebench reproduce precision``: the entropy and surprisal tables per model, the
float32-drop table, the comparison plot, and its ``tables.md``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.io import atomic_write_text
from harness.reproduce.report.plots import save_png
from harness.reproduce.report.sections import Section, sections_markdown
from harness.views.table import Cell, Column, Footnote, Table


def _rows_by(record: dict[str, Any]) -> dict[tuple[Any, str], dict[str, Any]]:
    """A precision or precision-prediction record's main rows by (steps, dtype)."""
    rows = {}
    for r in record.get("rows", []):
        p = r.get("protocol", r)
        if not p.get("control"):
            rows[(p["steps"], p["dtype"])] = r["metrics"]
    return rows


_STATISTICS = {
    "entropy": ("entropy per sample", "nats per sample of L = {L} model token ids"),
    "surprisal": (
        "marginal surprisal",
        "nats per token, -log p(x) under the model's all-masked marginal "
        "(entropy {H:.4f} nats), mean of each sample's mean over its L = {L} tokens",
    ),
}


def precision_table(result, model: str, statistic: str = "entropy"):
    """Measured ``statistic`` ("entropy" per sample, or the marginal "surprisal" per token) of the joint
    draw and the two-stage control beside the context-free prediction, per (T, dtype), then the per-unit
    control rows.

    ``result``: a :class:`harness.reproduce.precision.PrecisionRecords`; ``model``: the model key of its
    audits (``MODEL-joint``, ``MODEL-two-stage``) and predictions. Returns a :class:`harness.views.table.Table`."""

    joint = _rows_by(result.audits[f"{model}-joint"])
    two = _rows_by(result.audits[f"{model}-two-stage"])
    pred = _rows_by(result.predictions[model])
    controls = [r for r in result.audits[f"{model}-joint"]["rows"] if r["protocol"]["control"]]

    def cell(metrics, name=statistic):
        m = (metrics or {}).get(name)
        return Cell() if m is None else Cell(m["value"], m.get("stderr"), m.get("kind"))

    law = statistic == "entropy"
    columns = (
        Column("steps", "steps T", False),
        Column("dtype", "dtype", False),
        Column("joint", "joint draw, measured"),
        Column("two_stage", "two-stage draw, measured"),
        Column("predicted", "predicted, context-free"),
    ) + ((Column("law", "predicted law entropy"),) if law else ())
    rows = [
        (
            Cell(text=str(T)),
            Cell(text=dtype),
            cell(joint.get((T, dtype))),
            cell(two.get((T, dtype))),
            cell(pred.get((T, dtype))),
        )
        + ((cell(pred.get((T, dtype)), "law_entropy"),) if law else ())
        for (T, dtype) in sorted(joint, key=lambda k: (k[0], k[1]))
    ]
    rows += [
        (
            Cell(text="per unit"),
            Cell(text=f"{c['protocol']['dtype']} ({c['protocol']['sampler']})"),
            cell(c["metrics"]),
            Cell(),
            Cell(),
        )
        + ((Cell(),) if law else ())
        for c in controls
    ]
    audit = result.audits[f"{model}-joint"]["protocol"]
    prediction = result.predictions[model]["protocol"]
    title, units = _STATISTICS[statistic]
    units = units.format(L=prediction["seq_len"], H=prediction["marginal_entropy"])
    if law:
        predicted = (
            f"predicted: the exact law of the draw for the model's all-masked output averaged over positions "
            f"(entropy {prediction['marginal_entropy']:.4f} nats), {prediction['mc_samples']} Monte-Carlo "
            "samples of L tokens; it ignores context, so compare its float32-float64 gap, not its level. "
            "law: entropy of that token law (population, not per sample)."
        )
    else:
        predicted = (
            "predicted: the expected surprisal of a token drawn from the exact law of the draw for the "
            "model's all-masked output averaged over positions; it ignores context, so compare its "
            "float32-float64 gap, not its level."
        )
    notes = (
        Footnote("estimate", "estimate (sampled, Monte Carlo, or the context-free prediction)"),
        Footnote(
            None,
            f"{statistic}: {units}; mean over {audit['num_samples']} samples, ± one standard error; every "
            f"run seeded {audit['seed']}; method {audit['method']}.",
        ),
        Footnote(None, predicted),
    )
    name = result.audits[f"{model}-joint"]["model"].get("name")
    return Table("precision", f"Precision audit of {name}: {title} against steps", columns, tuple(rows), notes, 3)


def drop_table(result, model: str):
    """float64 minus float32, per T and statistic: the joint draw (with its standard error and how many
    standard errors it is), the two-stage control, and the context-free prediction.

    ``result`` and ``model`` as for :func:`precision_table`; returns a :class:`harness.views.table.Table`."""

    joint = _rows_by(result.audits[f"{model}-joint"])
    two = _rows_by(result.audits[f"{model}-two-stage"])
    pred = _rows_by(result.predictions[model])

    def drop(rows, T, name):
        hi, lo = (rows.get((T, d), {}).get(name) for d in ("float64", "float32"))
        if hi is None or lo is None:
            return None
        se = (
            None
            if hi.get("stderr") is None or lo.get("stderr") is None
            else (hi["stderr"] ** 2 + lo["stderr"] ** 2) ** 0.5
        )
        return hi["value"] - lo["value"], se

    rows = []
    for T in sorted({T for (T, _) in joint}):
        for name in _STATISTICS:
            measured = drop(joint, T, name)
            if measured is None:
                continue
            z = "–" if not measured[1] else f"{measured[0] / measured[1]:.1f}"
            control, predicted = drop(two, T, name), drop(pred, T, name)
            rows.append(
                (
                    Cell(text=str(T)),
                    Cell(text=name),
                    Cell(measured[0], measured[1], "estimate"),
                    Cell(text=z),
                    Cell() if control is None else Cell(control[0], control[1], "estimate"),
                    Cell() if predicted is None else Cell(predicted[0], predicted[1], "estimate"),
                )
            )
    columns = (
        Column("steps", "steps T", False),
        Column("statistic", "statistic", False),
        Column("joint", "joint draw: fp64 - fp32"),
        Column("z", "in standard errors", False),
        Column("two_stage", "two-stage: fp64 - fp32"),
        Column("predicted", "predicted: fp64 - fp32"),
    )
    notes = (
        Footnote("estimate", "estimate (sampled, Monte Carlo, or the context-free prediction)"),
        Footnote(
            None,
            "a positive difference is the float32 drop; its standard error is sqrt(se64^2 + se32^2) "
            "(the two dtypes draw different uniforms from the same seed, so they are not paired). "
            "entropy: nats per sample; surprisal: nats per token under the all-masked marginal.",
        ),
    )
    name = result.audits[f"{model}-joint"]["model"].get("name")
    return Table("precision", f"Precision audit of {name}: the float32 drop", columns, tuple(rows), notes, len(rows))


def plot_precision_comparison(result, path: Path) -> Path:
    """Entropy per sample (top) and, when measured, the marginal surprisal per token (bottom) against T
    (log x), one column per model: the joint draw per dtype (solid), the two-stage control (dashed) and
    the context-free prediction (dotted), with error bars; float32 red, float64 blue.

    ``result``: a :class:`harness.reproduce.precision.PrecisionRecords`. Writes the PNG to ``path`` and
    returns it."""
    # deferred: matplotlib loads only when a plot is drawn
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter

    models = _precision_models(result)
    statistics = ["entropy"] + (
        ["surprisal"] if any(_has_surprisal(result.audits[f"{m}-joint"]) for m in models) else []
    )
    fig = Figure(figsize=(6.0 * len(models), 4.2 * len(statistics)))
    styles = {
        "joint": ("-", "o", "joint draw"),
        "two-stage": ("--", "s", "two-stage"),
        "predicted": (":", "^", "predicted"),
    }
    labels = {
        "entropy": "unigram entropy per sample (nats)",
        "surprisal": "-log p(x), all-masked marginal (nats/token)",
    }
    colors = {"float32": "tab:red", "float64": "tab:blue"}
    for j, statistic in enumerate(statistics):
        for i, model in enumerate(models):
            ax = fig.add_subplot(len(statistics), len(models), j * len(models) + i + 1)
            series = {
                "joint": _rows_by(result.audits[f"{model}-joint"]),
                "two-stage": _rows_by(result.audits[f"{model}-two-stage"]),
                "predicted": _rows_by(result.predictions[model]),
            }
            for kind, rows in series.items():
                for dtype in ("float32", "float64"):
                    pts = sorted((T, m[statistic]) for (T, d), m in rows.items() if d == dtype and statistic in m)
                    if not pts:
                        continue
                    line, marker, label = styles[kind]
                    ax.errorbar(
                        [T for T, _ in pts],
                        [m["value"] for _, m in pts],
                        yerr=[m.get("stderr") or 0.0 for _, m in pts],
                        linestyle=line,
                        marker=marker,
                        capsize=3,
                        color=colors[dtype],
                        label=f"{label} {dtype}",
                    )
            ax.set_xscale("log")
            ticks = sorted({T for rows in series.values() for (T, _) in rows})
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel("sampling steps T")
            ax.set_ylabel(labels[statistic])
            ax.set_title(str(result.audits[f"{model}-joint"]["model"].get("name")))
            ax.legend(fontsize="x-small")
    return save_png(fig, path)


def _precision_models(result) -> list[str]:
    """The models of a precision run (audit keys are MODEL-joint and MODEL-two-stage)."""
    return sorted(k.removesuffix("-joint") for k in result.audits if k.endswith("-joint"))


def precision_sections(result) -> list[Section]:
    """Per model of ``result`` (a :class:`harness.reproduce.precision.PrecisionRecords`): the float32-drop
    table, the entropy table and, when the audit measured it, the surprisal table."""
    sections = []
    for m in _precision_models(result):
        record = result.audits[f"{m}-joint"]
        sections.append(Section(f"{m}: the float32 drop", [record], table=drop_table(result, m)))
        sections.append(Section(f"{m}: entropy per sample over steps", [record], table=precision_table(result, m)))
        if _has_surprisal(record):
            sections.append(
                Section(f"{m}: marginal surprisal over steps", [record], table=precision_table(result, m, "surprisal"))
            )
    return sections


def _has_surprisal(record) -> bool:
    return any("surprisal" in r.get("metrics", {}) for r in record.get("rows", []))


def write_precision_report(result) -> list[Path]:
    """Write ``tables.md`` and ``precision.png`` of a ``reproduce precision`` run into ``result.out``, next
    to its records. ``result``: the run's :class:`harness.reproduce.precision.PrecisionRecords`. Returns
    the two paths."""

    preamble = (
        "MDLM's joint draw (MDLM's own categorical, `mdlm-legacy`) in float32 and float64 with the same seed, "
        "the two-stage draw as a control, and what the exact law of the draw predicts for the model's "
        "context-free marginal. Two statistics: the unigram entropy per sample (Zheng et al.'s, capped at "
        "log L for samples of L tokens) and the marginal surprisal, -log p(x) of each sampled token under the "
        "model's all-masked marginal p (a statistic of the whole token distribution: a draw that starves "
        "rare tokens lowers it). Every number is a view of the records in `records/`."
    )
    text = sections_markdown("primebench reproduce precision", precision_sections(result), preamble)
    return [
        atomic_write_text(result.out / "tables.md", text),
        plot_precision_comparison(result, result.out / "precision.png"),
    ]
