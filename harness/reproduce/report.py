"""What a reproduce job shows: its tables on stdout, ``tables.md`` and PNG plots, all views of records.

A job's report is a list of :class:`Section`: a title and either records with a table layout of
:mod:`harness.views` (rendered rich on the terminal, Markdown in ``tables.md``) or a record with a
rich view of its own (idle, Gumbel; its text goes into ``tables.md`` as a code block). The plots
are drawn from the same records, so ``primebench table`` and the files always agree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Section:
    """One table of a report: ``layout`` over ``records``, or ``view(record)`` for a single record."""

    title: str
    records: Sequence[dict[str, Any]] = field(default_factory=tuple)
    layout: str | None = None
    view: Callable[[dict[str, Any]], None] | None = None
    note: str = ""
    table: Any = None  # a prebuilt harness.views.Table (then records only say the section is not empty)


def print_sections(sections: Sequence[Section]) -> None:
    """Every section on stdout (rich tables, as the ``table`` command prints them)."""
    from harness.logging import stdout_console
    from harness.views import build_table, to_rich

    screen = stdout_console()
    for s in sections:
        if not s.records:
            continue
        if s.table is not None:
            screen.print(to_rich(s.table))
        elif s.view is not None:
            for record in s.records:
                s.view(record)
        elif s.records:
            screen.print(to_rich(build_table(list(s.records), s.layout)))


def sections_markdown(title: str, sections: Sequence[Section], preamble: str = "") -> str:
    """The sections as one Markdown document: a heading per section, Markdown tables for layouts,
    code blocks for views."""
    from harness.logging import capture_stdout
    from harness.views import build_table, render

    parts = [f"# {title}\n"]
    if preamble:
        parts.append(preamble.rstrip() + "\n")
    for s in sections:
        if not s.records:
            continue
        parts.append(f"## {s.title}\n")
        if s.note:
            parts.append(s.note.rstrip() + "\n")
        if s.table is not None:
            parts.append(render(s.table, "md").rstrip() + "\n")
        elif s.view is not None:
            with capture_stdout() as screen:
                for record in s.records:
                    s.view(record)
            text = "\n".join(line.rstrip() for line in screen.export_text().splitlines())
            parts.append(f"```\n{text.strip()}\n```\n")
        else:
            parts.append(render(build_table(list(s.records), s.layout), "md").rstrip() + "\n")
    return "\n".join(parts)


def _metric(record: dict[str, Any], name: str) -> tuple[float, float] | None:
    m = record.get("metrics", {}).get(name)
    if not m or m.get("value") is None:
        return None
    se = m.get("stderr")
    return float(m["value"]), 0.0 if se is None or se != se else float(se)


def _label(record: dict[str, Any]) -> str:
    return str(record.get("model", {}).get("name") or "?")


def plot_nll(records: Sequence[dict[str, Any]], path: Path, *, title: str) -> Path:
    """Bars of NLL (nats/token) per model: the exact NLL or the valid bound, and Prime's paper
    objective beside it (hatched, labelled not a bound), with one-standard-error bars; the unigram
    and bigram references of the scored tokens as vertical lines (those of the last record that has
    them: the families' token counts differ by one per row, which moves them by about 0.01)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 0.6 * max(3, len(records)) + 1.8))
    ax = fig.add_subplot(1, 1, 1)
    labels, y = [], 0.0
    shown = set()
    for r in records:
        main = _metric(r, "nll")
        if main is None:
            continue
        kind = r["metrics"]["nll"].get("kind", "estimate")
        name = {"exact": "exact NLL", "bound": "valid bound (<=)"}.get(kind, kind)
        ax.barh(
            y,
            main[0],
            xerr=main[1],
            height=0.38,
            color="tab:blue" if kind == "exact" else "tab:green",
            capsize=3,
            label=None if name in shown else name,
        )
        shown.add(name)
        joint = _metric(r, "nll_token_joint")
        if joint is not None:
            ax.barh(
                y - 0.4,
                joint[0],
                xerr=joint[1],
                height=0.38,
                color="tab:orange",
                hatch="//",
                capsize=3,
                label=None if "paper" in shown else "paper objective (not a bound)",
            )
            shown.add("paper")
        labels.append((y - (0.2 if joint is not None else 0.0), _label(r)))
        y -= 1.2
    refs = next(
        (
            r["references"]
            for r in reversed(records)
            if isinstance(r.get("references"), dict) and "unigram" in r["references"]
        ),
        None,
    )
    if refs is not None:
        for name, style in (("unigram", "--"), ("bigram", ":")):
            ax.axvline(
                refs[name]["nll"]["value"], color="gray", linestyle=style, linewidth=1, label=f"{name} reference"
            )
    ax.set_yticks([p for p, _ in labels], [n for _, n in labels])
    ax.set_xlabel("nats per token (lower is better; ± one standard error)")
    ax.set_title(title)
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, frameon=False)
    return _save(fig, path)


def plot_genppl(records: Sequence[dict[str, Any]], path: Path, *, title: str) -> Path:
    """Gen PPL (log scale) against entropy per sample, one marker per model and dtype, with
    one-standard-error bars in both directions: a low Gen PPL bought with low entropy shows."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 4.5))
    ax = fig.add_subplot(1, 1, 1)
    markers = {"float32": "o", "float64": "s"}
    colors: dict[str, Any] = {}
    for r in records:
        g, h = _metric(r, "gen_ppl"), _metric(r, "entropy_model")
        if g is None or h is None:
            continue
        name, dtype = _label(r), str(r.get("protocol", {}).get("dtype"))
        line = ax.errorbar(
            h[0],
            g[0],
            xerr=h[1],
            yerr=g[1],
            marker=markers.get(dtype, "^"),
            capsize=3,
            linestyle="none",
            color=colors.get(name),
            label=f"{name} {dtype}",
        )
        colors.setdefault(name, line.lines[0].get_color())
    ax.set_yscale("log")
    ax.set_xlabel("unigram entropy per sample (nats, model ids)")
    judge = next((r.get("protocol", {}).get("judge") for r in records), None)
    ax.set_ylabel(f"Gen PPL under {judge}")
    ax.set_title(title)
    ax.legend(fontsize="x-small", ncol=2)
    return _save(fig, path)


def training_curves(records: Sequence[dict[str, Any]]) -> list[tuple[str, list[tuple[int, float]], float | None]]:
    """(label, [(step, validation loss)], unigram reference) per record whose checkpoint folder holds a
    training log with evaluations (imported checkpoints and runs without one are left out)."""
    import json

    curves = []
    for r in records:
        log = Path(str(r.get("model", {}).get("checkpoint", ""))) / "train_log.jsonl"
        if not log.is_file():
            continue
        points, ref = [], None
        for line in log.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a torn last line
            if "val_loss_ema" in entry:
                points.append((int(entry["step"]), float(entry["val_loss_ema"])))
                ref = entry.get("unigram_ref", ref)
        if points:
            curves.append((_label(r), points, None if ref is None else float(ref)))
    return curves


def plot_training(records: Sequence[dict[str, Any]], path: Path, *, title: str) -> Path | None:
    """Validation loss of the EMA weights (each family's training objective, 4 batches) against
    steps, with each model's unigram reference of the same tokens dashed in its colour: a model on
    the unigram plateau runs along its line. None when no record's checkpoint has a training log."""
    from matplotlib.figure import Figure

    curves = training_curves(records)
    if not curves:
        return None
    fig = Figure(figsize=(7.0, 4.5))
    ax = fig.add_subplot(1, 1, 1)
    drawn: dict[float, Any] = {}
    for name, points, ref in curves:
        line = ax.plot([s for s, _ in points], [v for _, v in points], marker="o", markersize=3, label=name)[0]
        if ref is not None and round(ref, 3) not in drawn:
            drawn[round(ref, 3)] = ax.axhline(ref, color=line.get_color(), linestyle="--", linewidth=1)
    if drawn:
        ax.plot([], [], color="gray", linestyle="--", linewidth=1, label="unigram reference of the same tokens")
    ax.set_xlabel("training step")
    ax.set_ylabel("validation loss (nats/token)")
    ax.set_title(title)
    ax.legend(fontsize="x-small", ncol=2)
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, dpi=120, format="png")
    tmp.replace(path)
    return path


def quickstart_sections(result) -> list[Section]:
    """The quickstart's tables, in the order they print."""
    from harness.views.gumbel import render_gumbel
    from harness.views.idle import render_idle

    return [
        Section("Perplexity on the validation split", result.ppl, "ppl"),
        Section("Generative perplexity, float32 and float64 draws", result.genppl, "genppl"),
        Section("Zero-shot on the local tasks (lm-eval)", result.zeroshot, "zeroshot"),
        Section("Idle-step audit", [result.idle_paper, result.idle_here], view=render_idle),
        Section("Bound audit on enumerable toy models", [result.bound], "bound"),
        Section(
            "Precision audit of the quickstart MDLM (C = 1000)",
            [result.precision],
            "precision",
            note="MDLM's joint draw in float32 and float64, same seed. At a 1000-token vocabulary a token's "
            "share of a step stays far above 2^-24, so the two dtypes should agree within their standard "
            "errors; `primebench reproduce precision` shows the effect at GPT-2's vocabulary.",
        ),
        Section("Gumbel audit: MDLM's first ancestral step at V = 50257", [result.gumbel], view=render_gumbel),
        Section("Digits: bits per dimension", [r for r in result.images if r["evaluation"] == "ppl"], "ppl"),
        Section(
            "Digits: FID in a digits classifier's features",
            [r for r in result.images if r["evaluation"] == "fid"],
            "fid",
        ),
    ]


def write_report(result) -> list[Path]:
    """``tables.md`` and the PNG plots of a quickstart run, next to its records."""
    from harness.audit.precision import plot_record
    from harness.io import atomic_write_text

    out = result.out
    preamble = (
        "Every table is a view of the JSON records in `records/` (`primebench table records/NAME.json`). "
        "`<=` marks a valid upper bound, `†` Prime's paper objective (not a bound), `~` an estimate; "
        "`±` is one standard error."
    )
    paths = [
        atomic_write_text(
            out / "tables.md",
            sections_markdown("primebench reproduce quickstart", quickstart_sections(result), preamble),
        )
    ]
    paths.append(plot_nll(result.ppl, out / "ppl.png", title="Perplexity: exact (ARM), bounds and paper objective"))
    paths.append(plot_genppl(result.genppl, out / "genppl.png", title="Gen PPL against entropy, float32 vs float64"))
    paths.append(plot_record(result.precision, out / "precision.png"))
    training = plot_training(
        result.ppl, out / "training.png", title="Validation loss during training, against the unigram reference"
    )
    return paths + ([training] if training else [])


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
    draw and the two-stage control beside the context-free prediction, per (T, dtype)."""
    from harness.views.table import Cell, Column, Footnote, Table

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
    standard errors it is), the two-stage control, and the context-free prediction."""
    from harness.views.table import Cell, Column, Footnote, Table

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
    the context-free prediction (dotted), with error bars."""
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
    return _save(fig, path)


def _precision_models(result) -> list[str]:
    """The models of a precision run (audit keys are MODEL-joint and MODEL-two-stage)."""
    return sorted(k.removesuffix("-joint") for k in result.audits if k.endswith("-joint"))


def precision_sections(result) -> list[Section]:
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
    """``tables.md`` and ``precision.png`` of a ``reproduce precision`` run, next to its records."""
    from harness.io import atomic_write_text

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


def idle_table(genppl_records):
    """Idle steps measured on the real models' samples (the cached two-stage sampler calls the denoiser
    once per non-idle step, so ISR = 1 - NFE / T) beside the analytic ISR (1 - 1/T)^(L ell) of one sequence."""
    from harness.views.table import Cell, Column, Footnote, Table

    rows = []
    for r in genppl_records:
        p = r.get("protocol", {})
        nfe = r.get("metrics", {}).get("nfe")
        if p.get("sampler") != "ancestral" or not p.get("cache") or nfe is None or not p.get("steps"):
            continue
        T, L, ell = int(p["steps"]), int(p["seq_len"]), int(p.get("ell") or 1)
        se = nfe.get("stderr")
        rows.append(
            (
                Cell(text=_label(r)),
                Cell(text=str(ell)),
                Cell(text=str(T)),
                Cell(nfe["value"], se, "estimate", decimals=1),
                Cell(100 * (1 - nfe["value"] / T), None if se is None else 100 * se / T, "estimate", decimals=2),
                Cell(100 * (1 - 1 / T) ** (L * ell), 0.0, "exact", decimals=2),
            )
        )
    columns = (
        Column("model", "model", False),
        Column("ell", "ell", False),
        Column("steps", "steps T", False),
        Column("nfe", "NFE per sample"),
        Column("isr", "measured ISR %"),
        Column("analytic", "analytic ISR %"),
    )
    notes = (
        Footnote("estimate", "estimate (sampled)"),
        Footnote(
            None,
            "measured on the Gen-PPL samples (two-stage draw, cache on, T = L): the denoiser is called "
            "only at steps that reveal something, so NFE = T - idle steps (minus at most one call at "
            "the end); analytic: (1 - 1/T)^(L ell) for one sequence, linear schedule.",
        ),
    )
    return Table("idle", "Idle steps measured on the trained models", columns, tuple(rows), notes, len(rows))


def gap_table(ppl_records):
    """Prime's paper objective minus its valid bound, per ell (nats/token), with a conservative standard error."""
    from harness.views.table import Cell, Column, Footnote, Table

    rows = []
    for r in ppl_records:
        bound, joint = _metric(r, "nll"), _metric(r, "nll_token_joint")
        if bound is None or joint is None:
            continue
        ell = r.get("protocol", {}).get("ell")
        rows.append(
            (
                Cell(text=_label(r)),
                Cell(text=str(ell)),
                Cell(bound[0], bound[1], "bound"),
                Cell(joint[0], joint[1], "paper-objective"),
                Cell(bound[0] - joint[0], (bound[1] ** 2 + joint[1] ** 2) ** 0.5, "estimate"),
            )
        )
    columns = (
        Column("model", "model", False),
        Column("ell", "ell", False),
        Column("bound", "valid bound (nats/token)"),
        Column("objective", "paper objective (nats/token)", mark="paper-objective"),
        Column("gap", "bound - objective"),
    )
    notes = (
        Footnote("bound", "upper bound (the true value is at most this)"),
        Footnote("paper-objective", "paper objective, not a bound"),
        Footnote(
            None,
            "gap ± sqrt(se_bound^2 + se_objective^2): conservative, since both share every corruption. "
            "A positive gap is how far Prime's published objective sits below a number that is a valid "
            "bound for the same model and data.",
        ),
    )
    return Table("ppl", "MDM-Prime: paper objective against the valid bound", columns, tuple(rows), notes, len(rows))


def small_sections(result) -> list[Section]:
    from harness.reproduce.seeds import seed_difference_table, seed_table

    several = result.seeds > 1
    return [
        Section("Perplexity on the validation split", result.ppl, "ppl"),
        Section("Perplexity over training seeds", result.ppl if several else (), table=seed_table(result.ppl)),
        Section(
            "Differences between models against the seed spread",
            result.ppl if several else (),
            table=seed_difference_table(result.ppl),
        ),
        Section("Prime: paper objective against the valid bound", result.ppl, table=gap_table(result.ppl)),
        Section("Generative perplexity, float64 draws", result.genppl, "genppl"),
        Section("Zero-shot on the local tasks (lm-eval)", result.zeroshot, "zeroshot"),
        Section("Idle steps measured on the trained models", result.genppl, table=idle_table(result.genppl)),
    ]


def write_small_report(result) -> list[Path]:
    """``tables.md`` and the PNG plots of a ``reproduce small`` run, next to its records."""
    from harness.io import atomic_write_text

    out = result.out
    preamble = (
        "Every table is a view of the JSON records in `records/`. `<=` marks a valid upper bound, `†` Prime's "
        "paper objective (not a bound), `~` an estimate; `±` is one standard error."
    )
    return [
        atomic_write_text(
            out / "tables.md", sections_markdown("primebench reproduce small", small_sections(result), preamble)
        ),
        plot_nll(result.ppl, out / "ppl.png", title="Perplexity: exact (ARM), bounds and paper objective"),
        plot_genppl(result.genppl, out / "genppl.png", title="Gen PPL against entropy, float64"),
    ] + [
        p
        for p in [
            plot_training(
                result.ppl, out / "training.png", title="Validation loss during training, against the unigram reference"
            )
        ]
        if p
    ]


__all__ = [
    "plot_training",
    "training_curves",
    "Section",
    "drop_table",
    "gap_table",
    "published_table",
    "write_preset_report",
    "idle_table",
    "small_sections",
    "write_small_report",
    "plot_precision_comparison",
    "precision_sections",
    "precision_table",
    "write_precision_report",
    "plot_genppl",
    "plot_nll",
    "print_sections",
    "quickstart_sections",
    "sections_markdown",
    "write_report",
]


# -- paper-scale presets: our records beside the published numbers ------------------------------------

_PUBLISHED_KIND = {"exact": "exact", "bound": "bound", "paper objective": "paper-objective"}


def _ours(record: dict[str, Any], name: str):
    from harness.views.table import Cell

    m = record.get("metrics", {}).get(name)
    return None if m is None else Cell(m["value"], m.get("stderr"), m.get("kind"), decimals=2)


def _published(row: dict[str, Any], key: str):
    from harness.views.table import Cell

    value = row.get(key)
    if value is None:
        return Cell()
    if isinstance(value, str):
        return Cell(text=value)
    return Cell(float(value), None, _PUBLISHED_KIND.get(row.get("kind"), "exact"), decimals=2, quoted=True)


def published_table(preset: str, records: list[dict[str, Any]]):
    """The preset's table: one row per record of ours (source "ours"), then the papers' published numbers
    (source "published", :data:`harness.reproduce.paper.PRESETS`), with the same columns and marks."""
    from harness.errors import PrimebenchError
    from harness.reproduce.paper import PRESETS, ZEROSHOT_SETS
    from harness.views.table import Cell, Column, Footnote, Table

    spec = PRESETS[preset]
    ours: list[tuple] = []

    def name(r):
        return str(r.get("model", {}).get("name") or r.get("model", {}).get("family") or "?")

    if preset == "owt":
        columns = (
            Column("ppl", "perplexity (exact or valid bound)"),
            Column("objective", "perplexity, paper objective", mark="paper-objective"),
        )
        for r in (r for r in records if r.get("evaluation") == "ppl"):
            ours.append((name(r), (_ours(r, "ppl") or Cell(), _ours(r, "ppl_token_joint") or Cell())))
        published = [
            (
                row["model"],
                (
                    _published(row, "ppl") if row.get("kind") != "paper objective" else Cell(),
                    _published(row, "ppl") if row.get("kind") == "paper objective" else Cell(),
                ),
            )
            for row in spec.published
        ]
    elif preset == "zeroshot":
        columns = tuple(Column(ds, ds) for ds in ZEROSHOT_SETS)
        by_model: dict[tuple[str, str], dict[str, Cell]] = {}
        for r in (r for r in records if r.get("evaluation") == "ppl"):
            ds = r.get("protocol", {}).get("dataset")
            for metric, label in (("ppl", ""), ("ppl_token_joint", " (paper objective)")):
                cell = _ours(r, metric)
                if cell is not None and ds in ZEROSHOT_SETS:
                    by_model.setdefault((name(r), label), {})[ds] = cell
        ours = [
            (m + label, tuple(cells.get(ds, Cell()) for ds in ZEROSHOT_SETS))
            for (m, label), cells in sorted(by_model.items())
        ]
        published = [(row["model"], tuple(_published(row, ds) for ds in ZEROSHOT_SETS)) for row in spec.published]
    elif preset == "genppl":
        columns = (
            Column("steps", "steps T", False),
            Column("dtype", "dtype", False),
            Column("gen_ppl", "Gen PPL"),
            Column("entropy", "entropy (nats)"),
        )
        for r in (r for r in records if r.get("evaluation") == "genppl"):
            p = r.get("protocol", {})
            ours.append(
                (
                    name(r),
                    (
                        Cell(text=str(p.get("steps"))),
                        Cell(text=str(p.get("dtype"))),
                        _ours(r, "gen_ppl") or Cell(),
                        _ours(r, "entropy_model") or Cell(),
                    ),
                )
            )
        published = [
            (row["model"], (Cell(text="–"), Cell(text="–"), _published(row, "gen_ppl"), _published(row, "entropy")))
            for row in spec.published
        ]
    elif preset == "precision":
        columns = (
            Column("steps", "steps T", False),
            Column("dtype", "dtype", False),
            Column("entropy", "entropy per sample (nats)"),
        )
        for r in (r for r in records if r.get("evaluation") == "precision"):
            for row in r.get("rows", []):
                p, m = row["protocol"], row["metrics"].get("entropy")
                cell = Cell() if m is None else Cell(m["value"], m.get("stderr"), m.get("kind"), decimals=3)
                ours.append(
                    (f"{name(r)} ({p['sampler']})", (Cell(text=str(p.get("steps"))), Cell(text=p["dtype"]), cell))
                )
        published = [
            (row["model"], (Cell(text=str(row.get("steps"))), Cell(text="–"), _published(row, "entropy")))
            for row in spec.published
        ]
    elif preset == "cifar10-fid":
        columns = (Column("fid", "FID (Inception)"), Column("is", "IS"))
        for r in (r for r in records if r.get("evaluation") == "fid"):
            fid = next((k for k in r.get("metrics", {}) if k.startswith("fid")), None)
            ours.append((name(r), ((_ours(r, fid) if fid else None) or Cell(), _ours(r, "inception_score") or Cell())))
        published = [(row["model"], (_published(row, "fid"), _published(row, "is"))) for row in spec.published]
    else:
        raise PrimebenchError(f"no table for preset {preset!r}", fix="use one of " + ", ".join(PRESETS))
    columns = (Column("model", "model", False), Column("source", "source", False)) + columns
    rows = [(Cell(text=m), Cell(text="ours")) + cells for m, cells in ours]
    rows += [(Cell(text=m), Cell(text="published")) + cells for m, cells in published]
    notes = (
        Footnote("bound", "upper bound (the true value is at most this)"),
        Footnote("paper-objective", "paper objective, not a bound"),
        Footnote("estimate", "estimate (sampled)"),
        Footnote(
            None,
            f"published: {spec.reproduces}; quoted as printed there (no standard errors), not "
            "computed here. ours: the records of this run, ± one standard error.",
        ),
    )
    return Table(preset, spec.title, columns, tuple(rows), notes, len(rows))


def write_preset_report(preset: str, root: Path) -> Path:
    """``ROOT/tables.md``: :func:`published_table` of the records under ``ROOT/records`` (none yet: the
    published numbers alone)."""
    from harness.io import atomic_write_text
    from harness.views import render
    from harness.views.records_io import load_records

    folder = Path(root) / "records"
    records = load_records([folder]) if folder.is_dir() and any(folder.rglob("*.json")) else []
    table = published_table(preset, records)
    return atomic_write_text(Path(root) / "tables.md", f"# primebench reproduce {preset}\n\n{render(table, 'md')}\n")
