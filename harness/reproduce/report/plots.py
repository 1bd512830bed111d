"""The PNG plots the quickstart and small reports share (NLL bars, Gen PPL against entropy, training
curves) and the record helpers and PNG writer every report's plots use."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.records import training_seed


def record_metric(record: dict[str, Any], name: str) -> tuple[float, float] | None:
    """``(value, standard error)`` of metric ``name`` of ``record`` (a missing or NaN standard error
    reads 0.0); None when the record has no value for it."""
    m = record.get("metrics", {}).get(name)
    if not m or m.get("value") is None:
        return None
    se = m.get("stderr")
    return float(m["value"]), 0.0 if se is None or se != se else float(se)


def record_label(record: dict[str, Any]) -> str:
    """The model name a record's rows and plot entries are labelled with (``"?"`` when it has none),
    with ``(seed S)`` when it was trained under another seed than its preset's (config ``seed`` > 0)."""

    model = record.get("model", {})
    seed = training_seed(model)
    return str(model.get("name") or "?") + (f" (seed {seed})" if seed > 0 else "")


def plot_nll(records: Sequence[dict[str, Any]], path: Path, *, title: str) -> Path:
    """Bars of NLL (nats/token) per model: the exact NLL or the valid bound, and Prime's paper
    objective beside it (hatched, labelled not a bound), with one-standard-error bars; the unigram
    and bigram references of the scored tokens as vertical lines (those of the last record that has
    them: the families' token counts differ by one per row, which moves them by about 0.01)."""
    # deferred: matplotlib loads only when a plot is drawn
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 0.6 * max(3, len(records)) + 1.8))
    ax = fig.add_subplot(1, 1, 1)
    labels, y = [], 0.0
    shown = set()
    for r in records:
        main = record_metric(r, "nll")
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
        joint = record_metric(r, "nll_token_joint")
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
        labels.append((y - (0.2 if joint is not None else 0.0), record_label(r)))
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
    return save_png(fig, path)


def plot_genppl(records: Sequence[dict[str, Any]], path: Path, *, title: str) -> Path:
    """Gen PPL (log scale) against entropy per sample, one marker per model and dtype, with
    one-standard-error bars in both directions: a low Gen PPL bought with low entropy shows."""
    # deferred: matplotlib loads only when a plot is drawn
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 4.5))
    ax = fig.add_subplot(1, 1, 1)
    markers = {"float32": "o", "float64": "s"}
    colors: dict[str, Any] = {}
    for r in records:
        g, h = record_metric(r, "gen_ppl"), record_metric(r, "entropy_model")
        if g is None or h is None:
            continue
        name, dtype = record_label(r), str(r.get("protocol", {}).get("dtype"))
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
    return save_png(fig, path)


def training_curves(records: Sequence[dict[str, Any]]) -> list[tuple[str, list[tuple[int, float]], float | None]]:
    """(label, [(step, validation loss)], unigram reference) per record whose checkpoint folder holds a
    training log with evaluations (imported checkpoints and runs without one are left out)."""

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
            curves.append((record_label(r), points, None if ref is None else float(ref)))
    return curves


def plot_training(records: Sequence[dict[str, Any]], path: Path, *, title: str) -> Path | None:
    """Validation loss of the EMA weights (each family's training objective, 4 batches) against
    steps, with each model's unigram reference of the same tokens dashed in its colour: a model on
    the unigram plateau runs along its line. None when no record's checkpoint has a training log."""
    # deferred: matplotlib loads only when a plot is drawn
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
    return save_png(fig, path)


def save_png(fig, path: Path) -> Path:
    """Write the matplotlib ``fig`` to ``path`` as a PNG (120 dpi, tight layout), creating its folder and
    replacing any earlier file in one step; returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, dpi=120, format="png")
    tmp.replace(path)
    return path
