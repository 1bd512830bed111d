"""The reports of the paper-scale presets: our records beside the papers' published numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.errors import PrimebenchError
from harness.io import atomic_write_text
from harness.reproduce.paper import PRESETS, ZEROSHOT_SETS
from harness.views import render
from harness.views.records_io import load_records
from harness.views.table import Cell, Column, Footnote, Table

_PUBLISHED_KIND = {"exact": "exact", "bound": "bound", "paper objective": "paper-objective"}


def _ours(record: dict[str, Any], name: str):

    m = record.get("metrics", {}).get(name)
    return None if m is None else Cell(m["value"], m.get("stderr"), m.get("kind"), decimals=2)


def _published(row: dict[str, Any], key: str):

    value = row.get(key)
    if value is None:
        return Cell()
    if isinstance(value, str):
        return Cell(text=value)
    return Cell(float(value), None, _PUBLISHED_KIND.get(row.get("kind"), "exact"), decimals=2, quoted=True)


def _name(r: dict[str, Any]) -> str:
    return str(r.get("model", {}).get("name") or r.get("model", {}).get("family") or "?")


def _of(records, evaluation: str):
    return (r for r in records if r.get("evaluation") == evaluation)


def _owt(records, published_rows):

    columns = (
        Column("ppl", "perplexity (exact or valid bound)"),
        Column("objective", "perplexity, paper objective", mark="paper-objective"),
    )
    ours = [(_name(r), (_ours(r, "ppl") or Cell(), _ours(r, "ppl_token_joint") or Cell())) for r in _of(records, "ppl")]
    objective = [row.get("kind") == "paper objective" for row in published_rows]
    published = [
        (row["model"], (Cell() if paper else _published(row, "ppl"), _published(row, "ppl") if paper else Cell()))
        for row, paper in zip(published_rows, objective)
    ]
    return columns, ours, published


def _zeroshot(records, published_rows):

    by_model: dict[tuple[str, str], dict[str, Cell]] = {}
    for r in _of(records, "ppl"):
        ds = r.get("protocol", {}).get("dataset")
        for metric, label in (("ppl", ""), ("ppl_token_joint", " (paper objective)")):
            cell = _ours(r, metric)
            if cell is not None and ds in ZEROSHOT_SETS:
                by_model.setdefault((_name(r), label), {})[ds] = cell
    ours = [
        (m + label, tuple(cells.get(ds, Cell()) for ds in ZEROSHOT_SETS))
        for (m, label), cells in sorted(by_model.items())
    ]
    published = [(row["model"], tuple(_published(row, ds) for ds in ZEROSHOT_SETS)) for row in published_rows]
    return tuple(Column(ds, ds) for ds in ZEROSHOT_SETS), ours, published


def _genppl(records, published_rows):

    columns = (
        Column("steps", "steps T", False),
        Column("dtype", "dtype", False),
        Column("gen_ppl", "Gen PPL"),
        Column("entropy", "entropy (nats)"),
    )
    ours = []
    for r in _of(records, "genppl"):
        p = r.get("protocol", {})
        cells = (Cell(text=str(p.get("steps"))), Cell(text=str(p.get("dtype"))))
        ours.append((_name(r), cells + (_ours(r, "gen_ppl") or Cell(), _ours(r, "entropy_model") or Cell())))
    published = [
        (row["model"], (Cell(text="–"), Cell(text="–"), _published(row, "gen_ppl"), _published(row, "entropy")))
        for row in published_rows
    ]
    return columns, ours, published


def _precision(records, published_rows):

    columns = (
        Column("steps", "steps T", False),
        Column("dtype", "dtype", False),
        Column("entropy", "entropy per sample (nats)"),
    )
    ours = []
    for r in _of(records, "precision"):
        for row in r.get("rows", []):
            p, m = row["protocol"], row["metrics"].get("entropy")
            cell = Cell() if m is None else Cell(m["value"], m.get("stderr"), m.get("kind"), decimals=3)
            ours.append((f"{_name(r)} ({p['sampler']})", (Cell(text=str(p.get("steps"))), Cell(text=p["dtype"]), cell)))
    published = [
        (row["model"], (Cell(text=str(row.get("steps"))), Cell(text="–"), _published(row, "entropy")))
        for row in published_rows
    ]
    return columns, ours, published


def _fid(records, published_rows):

    ours = []
    for r in _of(records, "fid"):
        fid = next((k for k in r.get("metrics", {}) if k.startswith("fid")), None)
        ours.append((_name(r), ((_ours(r, fid) if fid else None) or Cell(), _ours(r, "inception_score") or Cell())))
    published = [(row["model"], (_published(row, "fid"), _published(row, "is"))) for row in published_rows]
    return (Column("fid", "FID (Inception)"), Column("is", "IS")), ours, published


#: preset -> its columns, our rows and the published rows
_TABLES = {"owt": _owt, "zeroshot": _zeroshot, "genppl": _genppl, "precision": _precision, "cifar10-fid": _fid}


def published_table(preset: str, records: list[dict[str, Any]]):
    """The preset's table: the rows of ours (source "ours", from ``records``), then the papers' published
    numbers (source "published", :data:`harness.reproduce.paper.PRESETS`), with the same columns and marks.

    ``preset``: a key of :data:`harness.reproduce.paper.PRESETS` (another raises
    :class:`harness.errors.PrimebenchError`); ``records``: loaded records of any evaluation (each preset
    reads the ones it tables). Returns a :class:`harness.views.table.Table`."""

    if preset not in _TABLES or preset not in PRESETS:
        raise PrimebenchError(f"no table for preset {preset!r}", fix="use one of " + ", ".join(PRESETS))
    spec = PRESETS[preset]
    columns, ours, published = _TABLES[preset](records, spec.published)
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
    """Write ``ROOT/tables.md``: :func:`published_table` of ``preset`` over the records under
    ``ROOT/records`` (none yet: the published numbers alone). Returns the path written."""

    folder = Path(root) / "records"
    records = load_records([folder]) if folder.is_dir() and any(folder.rglob("*.json")) else []
    table = published_table(preset, records)
    return atomic_write_text(Path(root) / "tables.md", f"# primebench reproduce {preset}\n\n{render(table, 'md')}\n")
