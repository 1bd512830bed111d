"""Sample quality: the paper-table layout of ``fid`` records and the one-record view that
``primebench eval fid`` prints."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from harness.logging import stdout_console
from harness.views.entries import Layout

LAYOUT = Layout(
    "fid",
    ("fid",),
    "Sample quality (FID)",
    axes=("sampler", "steps"),
    metrics=("fid", "inception_score"),
    title_keys=("features", "reference"),
)


def render_fid(record: dict) -> None:
    """One ``fid`` record on stdout: its metrics, the feature space and the sampler; a non-Inception
    space is named as such (its numbers are not comparable to published FID)."""

    p = record["protocol"]
    s = p.get("sampler") or {}
    table = Table(
        title=escape(
            f"{record['model'].get('name')} ({record['model'].get('family')}): {p['samples']} samples vs "
            f"{p['reference']} ({p['reference_size']}), {p['backend']}"
        )
    )
    for col in ("metric", "kind", "value", "units"):
        table.add_column(col)
    for name, m in record["metrics"].items():
        table.add_row(escape(name), m["kind"], f"{m['value']:.4f}", escape(m["units"]))
    console = stdout_console()
    console.print(table)
    acc = p.get("feature_extractor_accuracy")
    note = f"; classifier held-out accuracy {acc:.4f}" if acc is not None else ""
    console.print(
        f"features: {p['features']}{note}; sampler {s.get('sampler')} steps={s.get('steps')} "
        f"dtype={s.get('dtype')} method={s.get('method')}"
    )
    if p["features"] != "inception":
        console.print(f"this is a Frechet distance in {p['features']} features, not Inception FID")


__all__ = ["LAYOUT", "render_fid"]
