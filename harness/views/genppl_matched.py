"""Gen PPL at the data reference's entropy (``genppl-matched`` records from ``eval genppl --sweep``):
the table, the one-record view and the plot of the curves."""

from __future__ import annotations

from io import BytesIO

from rich.table import Table

from harness.logging import stdout_console
from harness.views.entries import Layout

LAYOUT = Layout(
    "genppl-matched",
    ("genppl-matched",),
    "Gen PPL at the entropy of held-out text",
    axes=("sweep", "target_entropy", "bracket"),
    metrics=("gen_ppl_at_data_entropy",),
    title_keys=("judge",),
)


def render_matched(record: dict) -> None:
    """One ``genppl-matched`` record on stdout: the curve, the references and the matched Gen PPL."""

    p = record["protocol"]
    table = Table(title=f"{record['model']['name']}: Gen PPL against entropy, sweep {p['sweep']} (judge {p['judge']})")
    for col in ("point", "entropy (nats/sample)", "Gen PPL"):
        table.add_column(col)
    for point in record["curve"]:
        table.add_row(f"{point['value']:g}", f"{point['entropy']:.4f}", f"{point['gen_ppl']:.2f}")
    for name in ("data", "tiled", "unigram"):
        m = record["references"][name]["metrics"]
        table.add_row(f"{name} reference", f"{m['entropy_model']['value']:.4f}", f"{m['gen_ppl']['value']:.2f}")
    console = stdout_console()
    console.print(table)
    got = record["metrics"].get("gen_ppl_at_data_entropy")
    if got is None:
        console.print(f"not matched: {p['not_bracketed']}; extend the sweep")
    else:
        se = "n/a" if got["stderr"] is None else f"{got['stderr']:.2f}"
        console.print(
            f"Gen PPL at the data reference's entropy {p['target_entropy']:.4f}: {got['value']:.2f} ± {se} "
            f"(between {p['bracket']}; an estimate)"
        )


def plot_matched(records, *, title: str = "Gen PPL against entropy") -> bytes:
    """PNG bytes: one Gen PPL (log) against entropy curve per ``genppl-matched`` record, the
    references of each as points, and the data reference's entropy as a vertical line."""
    # deferred: matplotlib loads only when a plot is drawn
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 4.5))
    ax = fig.add_subplot(1, 1, 1)
    shapes = {"data": "*", "tiled": "x", "unigram": "v"}
    for r in records:
        curve = sorted(r["curve"], key=lambda p: p["entropy"])
        line = ax.plot(
            [p["entropy"] for p in curve], [p["gen_ppl"] for p in curve], marker="o", label=r["model"]["name"]
        )
        color = line[0].get_color()
        for name, shape in shapes.items():
            m = r["references"][name]["metrics"]
            ax.plot(m["entropy_model"]["value"], m["gen_ppl"]["value"], shape, color=color, markersize=10, label=None)
        ax.axvline(r["protocol"]["target_entropy"], color=color, linestyle=":", linewidth=1)
    for name, shape in shapes.items():
        ax.plot([], [], shape, color="gray", label=f"{name} reference")
    ax.set_yscale("log")
    ax.set_xlabel("unigram entropy per sample (nats, model ids)")
    ax.set_ylabel(f"Gen PPL under {records[0]['protocol']['judge']}")
    ax.set_title(title)
    ax.legend(fontsize="x-small")
    fig.tight_layout()
    buffer = BytesIO()
    fig.savefig(buffer, dpi=120, format="png")
    return buffer.getvalue()


__all__ = ["LAYOUT", "plot_matched", "render_matched"]
