"""Paper-style tables as views of result records (``primebench-record/1``).

Three steps, each a plain function:

* :func:`load_records` reads JSON record files (or every ``*.json`` under a folder);
* :func:`build_table` turns records into a :class:`Table` for one layout (``ppl``, ``zeroshot``,
  ``genppl``, ``precision``, ``idle``, ``fid``, ``bound``): one row per model (or per model and
  sampler setting), cells that keep the number, its standard error and its kind, and footnotes;
* :func:`render` writes the table as rich text, Markdown, LaTeX or CSV.

Marks are never hidden in the numbers' meaning: a bound is printed ``<= x``, Prime's paper
objective ``x†`` (footnote: not a bound), an estimate ``~x``, an exact number plain; ``± s`` is one
standard error (``n/a`` when it could not be estimated; exact numbers have none). Protocol keys
whose values differ between rows of the table are flagged (``‡a`` on the affected rows, and a
footnote with the key and every row's value) instead of being averaged away. Keys that belong to
the model (``ell``, ``base``, ``carry_over``, the schedule), to the run (checkpoint paths, device,
batch size, wall time) or that are derived from other keys are not compared; keys fixed by the model
family (the ARM's L-1 token convention) are compared only between rows of the same family and are
listed in an information footnote otherwise. Metrics a layout does not know get one generic
column each, so new evaluations render before a layout learns about them.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from harness.errors import PrimebenchError

FORMATS = ("rich", "md", "latex", "csv")

# Protocol keys (last dotted component) never compared: model-specific, run-specific or derived.
_IGNORED_LEAVES = frozenset({
    "ell", "base", "carry_over", "schedule", "family", "time_conditioning", "vocab_size", "bos_id", "eos_id", "pad_id",
    "checkpoint", "checkpoint_sha256", "samples_file", "device", "batch_size", "world_size", "wall_s", "created",
    "command", "seeded", "estimators", "judge_description",
})
# Keys fixed by the model family: compared only between rows of the same family.
_FAMILY_LEAVES = frozenset({"token_convention", "stderr_method", "noise_removal", "cache", "cache_exact",
                            "prefix_len", "time_sampler"})
# PPL records: the packing statistics follow from the data and the packing settings.
_PPL_IGNORED = frozenset({"rows_scored", "tokens_scored"} | {f"packing.{k}" for k in (
    "corpus", "split", "tokenizer", "seq_len", "documents", "document_tokens", "tokens_in", "tokens_dropped",
    "truncated_docs", "padded_rows", "rows", "tokens_out")})
_FAMILY_ORDER = {"arm": 0, "mdlm": 1, "masked": 2, "prime": 3}
_ZEROSHOT_ORDER = ("owt", "lambada", "wikitext2", "wikitext103", "ptb", "lm1b", "ag_news", "pubmed", "arxiv")
_PPL_METRICS = ("nll", "ppl", "nll_token_joint", "ppl_token_joint")
_TITLES = {
    "gen_ppl": "Gen PPL", "entropy_model": "entropy (model ids)", "entropy_judge": "entropy (judge ids)", "nfe": "NFE",
    "samples_per_s": "samples/s", "fid": "FID", "inception_score": "IS", "exact_nll": "exact NLL",
    "subtoken_bound": "sub-token bound", "token_joint": "paper objective (token-joint)", "isr": "ISR",
    "idle_steps": "idle steps", "nll": "NLL", "ppl": "PPL",
}
_TWO_DECIMALS = ("ppl", "gen_ppl", "fid", "inception_score", "nfe")
_LEGEND = {
    "bound": "upper bound (the true value is at most this)",
    "paper-objective": "paper objective, not a bound",
    "estimate": "estimate (sampled or Monte Carlo)",
}


@dataclass(frozen=True)
class Cell:
    """One cell: a number with its standard error and kind, or text. ``flags`` are footnote letters
    of protocol keys in which this row differs from the others."""

    value: float | None = None
    stderr: float | None = None
    kind: str | None = None
    text: str | None = None
    decimals: int = 4
    flags: tuple[str, ...] = ()

    @property
    def numeric(self) -> bool:
        return self.text is None


@dataclass(frozen=True)
class Column:
    """``key``: machine name (CSV header); ``title``: what a reader sees; ``numeric``: right-aligned,
    and in CSV followed by ``KEY_stderr`` and ``KEY_kind`` columns."""

    key: str
    title: str
    numeric: bool = True
    mark: str | None = None


@dataclass(frozen=True)
class Footnote:
    """``mark``: a kind (``bound``, ``paper-objective``, ``estimate``), ``flag:LETTER`` for a protocol
    difference (``key`` names it), or None for plain text."""

    mark: str | None
    text: str
    key: str | None = None


@dataclass(frozen=True)
class Table:
    layout: str
    title: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[Cell, ...], ...]
    footnotes: tuple[Footnote, ...] = ()
    records: int = 0

    def flag_keys(self, row: Sequence[Cell]) -> list[str]:
        """Protocol keys flagged anywhere in ``row`` (for CSV's ``protocol_differs`` column)."""
        letters = {f for c in row for f in c.flags}
        keys = [n.key for n in self.footnotes if n.mark and n.mark.startswith("flag:") and n.mark[5:] in letters]
        return list(dict.fromkeys(keys))


@dataclass(frozen=True)
class _Layout:
    evaluations: tuple[str, ...]
    title: str
    axes: tuple[str, ...] = ()          # protocol keys that identify a row (shown, never flagged)
    metrics: tuple[str, ...] = ()       # preferred metric order; others follow, one column each
    title_keys: tuple[str, ...] = ()    # protocol keys named in the title when all rows share them


LAYOUTS: dict[str, _Layout] = {
    "ppl": _Layout(("ppl",), "Perplexity"),
    "zeroshot": _Layout(("ppl", "zeroshot"), "Zero-shot perplexity"),
    "genppl": _Layout(("genppl",), "Generative perplexity", axes=("sampler", "steps", "dtype", "nucleus_p"),
                      metrics=("gen_ppl", "entropy_model", "entropy_judge", "nfe"), title_keys=("judge",)),
    "precision": _Layout(("precision",), "Sampling precision audit", axes=("sampler", "steps", "dtype"),
                         metrics=("entropy", "gen_ppl", "nfe", "idle_steps"), title_keys=("method",)),
    "idle": _Layout(("idle",), "Idle steps", axes=("ell", "steps", "seq_len", "length", "batch"),
                    metrics=("isr", "nfe"), title_keys=("schedule",)),
    "fid": _Layout(("fid",), "Sample quality (FID)", axes=("sampler", "steps"), metrics=("fid", "inception_score"),
                   title_keys=("features", "reference")),
    "bound": _Layout(("bound",), "Bound audit (nats/token)", axes=("case", "name", "source", "C", "ell", "L"),
                     metrics=("exact_nll", "subtoken_bound", "token_joint")),
}


# ------------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------------

def load_records(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Read every record named by ``paths``: JSON files, or folders (all ``*.json`` inside,
    recursively, in sorted order). A file that is not a record raises :func:`read_record`'s error."""
    from harness.records import read_record

    paths = [Path(p) for p in paths]
    files: list[Path] = []
    for path in paths:
        found = sorted(q for q in path.rglob("*.json") if q.is_file()) if path.is_dir() else [path]
        files.extend(f for f in found if f not in files)
    if not files:
        names = ", ".join(repr(str(p)) for p in paths) or "(none given)"
        raise PrimebenchError(f"no records found in {names}",
                              fix="pass record files or folders written by `primebench eval ... --out DIR`")
    return [read_record(f) for f in files]


# ------------------------------------------------------------------------------------------------
# Building
# ------------------------------------------------------------------------------------------------

def build_table(records: Sequence[dict[str, Any]], layout: str) -> Table:
    """The table model of ``records`` in ``layout`` (see the module docstring)."""
    if layout not in LAYOUTS:
        raise PrimebenchError(f"unknown table layout {layout!r}", fix=f"use one of {', '.join(LAYOUTS)}")
    if not records:
        raise PrimebenchError("no records to tabulate", fix="pass record files or folders")
    spec = LAYOUTS[layout]
    found = Counter(str(r.get("evaluation")) for r in records)
    wrong = sorted(e for e in found if e not in spec.evaluations)
    if wrong:
        fits = {e: [name for name, s in LAYOUTS.items() if e in s.evaluations] for e in found}
        listing = ", ".join(f"{n} {e!r}" for e, n in sorted(found.items()))
        advice = "; ".join(f"{e!r} records: --layout {' or '.join(fits[e]) or '(none yet; no layout takes them)'}"
                           for e in sorted(found))
        raise PrimebenchError(
            f"layout {layout!r} takes {' or '.join(map(repr, spec.evaluations))} records, found {listing}",
            fix=advice)
    if layout == "ppl":
        return _ppl_table(records, spec)
    if layout == "zeroshot":
        return _zeroshot_table(records, spec)
    return _generic_table(records, spec, layout)


@dataclass
class _Entry:
    """One record as a table row: label, family, flattened protocol and metrics."""

    label: str
    family: str
    protocol: dict[str, Any]
    metrics: dict[str, dict[str, Any]]
    model: dict[str, Any] = field(default_factory=dict)
    created: str | None = None


def _entries(records: Sequence[dict[str, Any]]) -> list[_Entry]:
    """One entry per record, or per item of a record's ``rows`` list (items with their own
    ``metrics`` and optional ``protocol`` overrides)."""
    out = []
    for rec in records:
        model = rec.get("model") or {}
        items = rec.get("rows") if isinstance(rec.get("rows"), list) else None
        items = [i for i in items if isinstance(i, dict) and isinstance(i.get("metrics"), dict)] if items else [None]
        for item in items or [None]:
            protocol = {**(rec.get("protocol") or {}), **((item or {}).get("protocol") or {})}
            metrics = (item or rec)["metrics"]
            for name, m in metrics.items():
                if not isinstance(m, dict) or "value" not in m:
                    raise PrimebenchError(f"metric {name!r} of the {rec.get('evaluation')!r} record of "
                                          f"{model.get('name')!r} has no value", fix="re-run the evaluation")
            out.append(_Entry(label=str(model.get("name") or model.get("family") or "(no model)"),
                              family=str(model.get("family") or "-"), protocol=_flatten(protocol),
                              metrics=metrics, model=model, created=(rec.get("provenance") or {}).get("created")))
    return out


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _unique_labels(entries: list[_Entry], extra=lambda e: ()) -> None:
    """Make labels unique: duplicates get ' (2)', ' (3)' ... in order."""
    seen: Counter = Counter()
    for e in entries:
        seen[(e.label, *extra(e))] += 1
        n = seen[(e.label, *extra(e))]
        if n > 1:
            e.label = f"{e.label} ({n})"


def _sort_key(e: _Entry, axes: Sequence[str] = ()):
    def val(v):
        return (2, "") if v is None else (0, float(v), "") if isinstance(v, (int, float)) else (1, 0.0, str(v))
    return (_FAMILY_ORDER.get(e.family, 9), e.label, *(val(e.protocol.get(a)) for a in axes))


def _family_text(e: _Entry) -> str:
    ell = e.protocol.get("ell") or (e.model.get("config") or {}).get("model", {}).get("ell")
    return f"{e.family}, ell={ell}" if e.family == "prime" and ell else e.family


def _metric_cell(m: dict[str, Any] | None, name: str) -> Cell:
    if m is None:
        return Cell()
    kind = m.get("kind")
    if kind is not None and kind not in _LEGEND and kind != "exact":
        raise PrimebenchError(f"metric {name!r} has unknown kind {kind!r}",
                              fix="kinds are exact, bound, paper-objective or estimate")
    two = name in _TWO_DECIMALS or name.startswith("ppl") or str(m.get("units", "")).startswith("perplexity")
    value = m.get("value")
    return Cell(value=None if value is None else float(value),
                stderr=None if m.get("stderr") is None else float(m["stderr"]), kind=kind,
                decimals=2 if two or (value is not None and abs(value) >= 100) else 4)


def _short(v: Any, width: int = 60) -> str:
    text = json.dumps(v, sort_keys=True, default=str) if isinstance(v, (list, dict)) else str(v)
    return text if len(text) <= width else text[: width - 1] + "…"


def _differences(groups: list[tuple[str, list[_Entry]]], ignored: frozenset[str], axes: Sequence[str]):
    """Protocol keys that differ within each group. Returns (footnotes, {(group, label): letters}).

    None means "does not apply to this row" and is not compared. The flagged rows are those whose
    value differs from the most common one (all of them on a tie)."""
    notes: list[Footnote] = []
    flags: dict[tuple[str, str], list[str]] = {}
    for group, entries in groups:
        keys = sorted({k for e in entries for k in e.protocol})
        for key in keys:
            leaf = key.rsplit(".", 1)[-1]
            if key in ignored or key in axes or not _IGNORED_LEAVES.isdisjoint(key.split(".")):
                continue
            subsets = ([[e for e in entries if e.family == f] for f in dict.fromkeys(e.family for e in entries)]
                       if leaf in _FAMILY_LEAVES else [entries])
            for subset in subsets:
                present = [(e.label, e.protocol[key]) for e in subset if e.protocol.get(key) is not None]
                canon = [json.dumps(v, sort_keys=True, default=str) for _, v in present]
                counts = Counter(canon)
                if len(counts) < 2:
                    continue
                top = counts.most_common()
                tie = top[0][1] == top[1][1]
                letter = _letter(len(notes))
                where = f" ({group})" if group else ""
                values = ", ".join(f"{label}={_short(v)}" for label, v in present)
                notes.append(Footnote(f"flag:{letter}", f"rows differ in {key}{where}: {values}",
                                      key=f"{group}:{key}" if group else key))
                for (label, _), c in zip(present, canon):
                    if tie or c != top[0][0]:
                        flags.setdefault((group, label), []).append(letter)
    return notes, flags


def _letter(i: int) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return letters[i] if i < 26 else letters[i // 26 - 1] + letters[i % 26]


def _family_info(entries: list[_Entry]) -> list[Footnote]:
    """Family-fixed conventions that differ between families (not flagged; stated once)."""
    out = []
    for leaf in sorted(_FAMILY_LEAVES):
        by_value: dict[str, list[str]] = {}
        for e in entries:
            for key, v in e.protocol.items():
                if key.rsplit(".", 1)[-1] == leaf and v is not None:
                    fams = by_value.setdefault(str(v), [])
                    if e.family not in fams:
                        fams.append(e.family)
        if len(by_value) > 1:
            out.append(Footnote(None, f"{leaf} (by family, not flagged): "
                                + "; ".join(f"{'/'.join(f)}: {v}" for v, f in by_value.items())))
    return out


def _legend(rows: Sequence[Sequence[Cell]]) -> list[Footnote]:
    kinds = {c.kind for r in rows for c in r if c.numeric and c.value is not None}
    notes = [Footnote(k, _LEGEND[k]) for k in _LEGEND if k in kinds]
    text = "exact numbers are plain" if "exact" in kinds else ""
    if any(c.numeric and c.value is not None and c.stderr is None for r in rows for c in r):
        text += ("; " if text else "") + "n/a: standard error not estimable (e.g. one Monte-Carlo sample)"
    return notes + [Footnote(None, ("± one standard error; " + text).rstrip("; "))]


def _units(entries: list[_Entry], names: Sequence[str]) -> Footnote | None:
    parts = []
    for name in names:
        units = list(dict.fromkeys(str(e.metrics[name].get("units")) for e in entries if name in e.metrics))
        if units:
            parts.append(f"{name}: {' | '.join(units)}{' (differ between rows)' if len(units) > 1 else ''}")
    return Footnote(None, "units: " + "; ".join(parts)) if parts else None


def _shared_title(base: str, entries: list[_Entry], keys: Sequence[str]) -> str:
    shared = []
    for key in keys:
        values = {json.dumps(e.protocol.get(key), default=str) for e in entries}
        if len(values) == 1 and entries[0].protocol.get(key) is not None:
            shared.append(f"{key} {_short(entries[0].protocol[key], 40)}")
    return base + (" — " + ", ".join(shared) if shared else "")


def _count_note(n_records: int, evaluations: set[str]) -> Footnote:
    return Footnote(None, f"{n_records} record{'s' if n_records != 1 else ''} "
                          f"({', '.join(sorted(evaluations))}); tables are views of these records")


def _apply_flags(rows: list[list[Cell]], targets: list[list[tuple[int, str, str]]], flags) -> None:
    """``targets[r]``: (column index, group, label) of the cells in row r that carry that row's flags."""
    for r, cells in enumerate(rows):
        for col, group, label in targets[r]:
            letters = flags.get((group, label))
            if letters:
                cells[col] = replace(cells[col], flags=tuple(letters))


def _ppl_protocol_summary(p: dict[str, Any], *, with_data: bool = True) -> str:
    parts = [str(p.get("data") or p.get("dataset") or "?")] if with_data else []
    if p.get("seq_len") is not None:
        parts.append(f"L={p['seq_len']}")
    if p.get("tokenizer") is not None:
        parts.append(str(p["tokenizer"]))
    if p.get("packing.wrap") is not None:
        parts.append("wrap" if p["packing.wrap"] else "no-wrap")
    if p.get("packing.eos_between_docs") is not None:
        parts.append("eos" if p["packing.eos_between_docs"] else "no-eos")
    if p.get("packing.remainder") is not None:
        parts.append(str(p["packing.remainder"]))
    if p.get("mc_samples") is not None:
        parts.append(f"K={p['mc_samples']}")
    if p.get("max_rows") is not None:
        parts.append(f"{p.get('rows_scored', p['max_rows'])} rows")
    return ", ".join(parts)


def _extra_metrics(entries: list[_Entry], known: Sequence[str]) -> list[str]:
    return [n for n in dict.fromkeys(k for e in entries for k in e.metrics) if n not in known]


def _ppl_table(records, spec: _Layout) -> Table:
    entries = sorted(_entries(records), key=_sort_key)
    _unique_labels(entries)
    paper = any(k in e.metrics for e in entries for k in ("ppl_token_joint", "nll_token_joint"))
    extra = _extra_metrics(entries, _PPL_METRICS)
    columns = [Column("model", "model", False), Column("family", "family", False),
               Column("ppl", "PPL"), Column("nll", "NLL (nats/token)"), Column("kind", "kind", False)]
    if paper:
        columns += [Column("ppl_token_joint", "PPL, paper objective", mark="paper-objective"),
                    Column("nll_token_joint", "NLL, paper objective", mark="paper-objective")]
    columns += [Column(n, _TITLES.get(n, n)) for n in extra]
    columns += [Column("tokens_scored", "tokens scored"), Column("protocol", "protocol", False)]
    shared_data = len({json.dumps(e.protocol.get("data"), default=str) for e in entries}) == 1
    rows, targets = [], []
    for e in entries:
        cells = [Cell(text=e.label), Cell(text=_family_text(e)), _metric_cell(e.metrics.get("ppl"), "ppl"),
                 _metric_cell(e.metrics.get("nll"), "nll"),
                 Cell(text=str((e.metrics.get("ppl") or e.metrics.get("nll") or {}).get("kind", "-")))]
        if paper:
            cells += [_metric_cell(e.metrics.get(n), n) for n in ("ppl_token_joint", "nll_token_joint")]
        cells += [_metric_cell(e.metrics.get(n), n) for n in extra]
        tokens = e.protocol.get("tokens_scored")
        cells += [Cell() if tokens is None else Cell(value=float(tokens), kind="exact", stderr=0.0, decimals=0),
                  Cell(text=_ppl_protocol_summary(e.protocol, with_data=not shared_data))]
        rows.append(cells)
        targets.append([(0, "", e.label)])
    diff_notes, flags = _differences([("", entries)], _PPL_IGNORED, ())
    _apply_flags(rows, targets, flags)
    notes = _legend(rows) + diff_notes + _family_info(entries)
    units = _units(entries, [n for n in ("ppl", "nll", *extra) if any(n in e.metrics for e in entries)])
    notes += [units] if units else []
    notes.append(_count_note(len(records), {str(r.get("evaluation")) for r in records}))
    title = _shared_title(spec.title, entries, ("data",))
    return Table("ppl", title, tuple(columns), tuple(tuple(r) for r in rows), tuple(notes), len(records))


def _primary(metrics: dict[str, Any]) -> str | None:
    """The metric a zero-shot cell shows: ``ppl``, else the first perplexity-like one, else the first."""
    if "ppl" in metrics:
        return "ppl"
    return next((n for n in metrics if n.startswith("ppl")), next(iter(metrics), None))


def _zeroshot_table(records, spec: _Layout) -> Table:
    entries = _entries(records)
    for e in entries:
        e.protocol.setdefault("dataset", e.protocol.get("data"))
    datasets = list(dict.fromkeys(str(e.protocol.get("dataset")) for e in entries))
    datasets.sort(key=lambda d: (_ZEROSHOT_ORDER.index(d) if d in _ZEROSHOT_ORDER else len(_ZEROSHOT_ORDER), d))
    models: dict[tuple[str, str], dict[str, _Entry]] = {}
    for e in sorted(entries, key=_sort_key):
        cells = models.setdefault((e.label, e.family), {})
        dataset = str(e.protocol.get("dataset"))
        if dataset in cells:
            raise PrimebenchError(f"two records for model {e.label!r} on dataset {dataset!r} "
                                  f"(created {cells[dataset].created} and {e.created})",
                                  fix="pass one record per model and dataset (remove the older file)")
        cells[dataset] = e
    columns = [Column("model", "model", False), Column("family", "family", False)]
    columns += [Column(d, d) for d in datasets]
    rows, targets = [], []
    for (label, family), by_ds in models.items():
        first = next(iter(by_ds.values()))
        variants = [(None, label)]
        if any("ppl_token_joint" in e.metrics and "ppl" in e.metrics for e in by_ds.values()):
            variants.append(("ppl_token_joint", f"{label}, paper objective"))
        for metric, row_label in variants:
            cells = [Cell(text=row_label), Cell(text=_family_text(first))]
            for d in datasets:
                e = by_ds.get(d)
                name = metric or (None if e is None else _primary(e.metrics))
                cells.append(_metric_cell(None if e is None else e.metrics.get(name), name or ""))
            rows.append(cells)
            targets.append([(2 + i, d, label) for i, d in enumerate(datasets)])
    groups = [(d, [e for e in entries if str(e.protocol.get("dataset")) == d]) for d in datasets]
    ignored = _PPL_IGNORED | {"dataset", "data", "split", "detokenizer"}
    diff_notes, flags = _differences(groups, ignored, ())
    _apply_flags(rows, targets, flags)
    notes = _legend(rows) + diff_notes + _family_info(entries)
    notes.append(Footnote(None, "cells: perplexity (exp of nats/token) of each dataset; rows: models"))
    notes.append(_count_note(len(records), {str(r.get("evaluation")) for r in records}))
    return Table("zeroshot", spec.title, tuple(columns), tuple(tuple(r) for r in rows), tuple(notes), len(records))


def _generic_table(records, spec: _Layout, layout: str) -> Table:
    entries = _entries(records)
    axes = [a for a in spec.axes if any(e.protocol.get(a) is not None for e in entries)]
    entries.sort(key=lambda e: _sort_key(e, axes))
    _unique_labels(entries, extra=lambda e: tuple(json.dumps(e.protocol.get(a), default=str) for a in axes))
    names = [n for n in spec.metrics if any(n in e.metrics for e in entries)]
    names += _extra_metrics(entries, names)
    columns = [Column("model", "model", False), Column("family", "family", False)]
    columns += [Column(a, a, False) for a in axes]
    columns += [Column(n, _TITLES.get(n, n), mark="paper-objective" if n == "token_joint" else None) for n in names]
    rows = []
    for e in entries:
        cells = [Cell(text=e.label), Cell(text=_family_text(e))]
        cells += [Cell(text="-" if e.protocol.get(a) is None else _short(e.protocol[a], 30)) for a in axes]
        cells += [_metric_cell(e.metrics.get(n), n) for n in names]
        rows.append(cells)
    for e in entries:  # the axes are part of a row's name in the footnotes
        if axes:
            e.label = f"{e.label}[{', '.join(_short(e.protocol.get(a), 20) for a in axes)}]"
    diff_notes, flags = _differences([("", entries)], frozenset(), axes)
    targets = [[(0, "", e.label)] for e in entries]
    _apply_flags(rows, targets, flags)
    notes = _legend(rows) + diff_notes + _family_info(entries)
    units = _units(entries, names)
    notes += [units] if units else []
    notes.append(_count_note(len(records), {str(r.get("evaluation")) for r in records}))
    title = _shared_title(spec.title, entries, spec.title_keys)
    return Table(layout, title, tuple(columns), tuple(tuple(r) for r in rows), tuple(notes), len(records))


# ------------------------------------------------------------------------------------------------
# Rendering
# ------------------------------------------------------------------------------------------------

_SYMBOLS = {
    "text": {"bound": "<=", "paper-objective": "†", "estimate": "~", "flag": "‡{}", "pm": "±", "none": "–"},
    "latex": {"bound": r"$\le$", "paper-objective": r"$^{\dagger}$", "estimate": r"$\sim$",
              "flag": r"$^{{\ddagger {}}}$", "pm": r"$\pm$", "none": "--"},
}
_LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "±": r"$\pm$", "†": r"$^{\dagger}$", "‡": r"$^{\ddagger}$", "…": r"\ldots{}", "—": "---"}


def _latex_escape(text: str) -> str:
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in text)


def _number(x: float, decimals: int) -> str:
    if math.isnan(x) or math.isinf(x):
        return str(x)
    return f"{x:.{decimals}f}"


def _cell_text(cell: Cell, style: str) -> str:
    sym = _SYMBOLS[style]
    flags = sym["flag"].format(",".join(cell.flags)) if cell.flags else ""
    if not cell.numeric:
        text = _latex_escape(cell.text) if style == "latex" else cell.text
        return text + flags
    if cell.value is None:
        return sym["none"]
    out = _number(cell.value, cell.decimals)
    if cell.kind == "bound":
        out = sym["bound"] + out
    elif cell.kind == "estimate":
        out = sym["estimate"] + out
    elif cell.kind == "paper-objective":
        out = out + sym["paper-objective"]
    if cell.stderr is None:
        out += f" {sym['pm']} n/a"
    elif not (cell.stderr == 0 and cell.kind == "exact"):
        out += f" {sym['pm']} {_number(cell.stderr, cell.decimals)}"
    return out + flags


def _title_text(col: Column, style: str) -> str:
    title = _latex_escape(col.title) if style == "latex" else col.title
    return title + (_SYMBOLS[style][col.mark] if col.mark else "")


def _footnote_text(note: Footnote, style: str) -> str:
    sym = _SYMBOLS[style]
    text = _latex_escape(note.text) if style == "latex" else note.text
    if note.mark is None:
        return text
    mark = sym["flag"].format(note.mark[5:]) if note.mark.startswith("flag:") else sym[note.mark]
    return f"{mark} {text}"


def to_rich(table: Table):
    """A rich ``Table`` (cells as ``Text``, so no markup is interpreted)."""
    from rich.table import Table as RichTable
    from rich.text import Text

    caption = Text("\n".join(_footnote_text(n, "text") for n in table.footnotes))
    out = RichTable(title=Text(table.title), caption=caption, caption_justify="left")
    for col in table.columns:
        out.add_column(Text(_title_text(col, "text").replace(", ", "\n")), justify="right" if col.numeric else "left",
                       no_wrap=col.key not in ("protocol", "case"))
    for row in table.rows:
        out.add_row(*(Text(_cell_text(c, "text")) for c in row))
    return out


def _render_rich(table: Table) -> str:
    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None, force_terminal=False, legacy_windows=False).print(to_rich(table))
    return buf.getvalue()


def _render_md(table: Table) -> str:
    def esc(s: str) -> str:
        return s.replace("|", r"\|").replace("~", r"\~")

    lines = [f"**{esc(table.title)}**", ""]
    lines.append("| " + " | ".join(esc(_title_text(c, "text")) for c in table.columns) + " |")
    lines.append("|" + "|".join("---:" if c.numeric else ":---" for c in table.columns) + "|")
    for row in table.rows:
        lines.append("| " + " | ".join(esc(_cell_text(c, "text")) for c in row) + " |")
    lines.append("")
    lines += [f"- {esc(_footnote_text(n, 'text'))}" for n in table.footnotes]
    return "\n".join(lines) + "\n"


def _render_latex(table: Table) -> str:
    spec = "".join("r" if c.numeric else "l" for c in table.columns)
    lines = [f"% {table.title}", f"\\begin{{tabular}}{{{spec}}}", r"\toprule",
             " & ".join(_title_text(c, "latex") for c in table.columns) + r" \\", r"\midrule"]
    lines += [" & ".join(_cell_text(c, "latex") for c in row) + r" \\" for row in table.rows]
    lines += [r"\bottomrule", r"\end{tabular}", r"\par\smallskip", r"{\footnotesize"]
    lines += [_footnote_text(n, "latex") + r"\\" for n in table.footnotes]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _render_csv(table: Table) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    header = []
    for col in table.columns:
        header += [col.key, f"{col.key}_stderr", f"{col.key}_kind"] if col.numeric else [col.key]
    writer.writerow(header + ["protocol_differs"])
    for row in table.rows:
        out = []
        for col, cell in zip(table.columns, row):
            if col.numeric:
                out += ["" if cell.value is None else repr(cell.value),
                        "" if cell.stderr is None or cell.value is None else repr(cell.stderr), cell.kind or ""]
            else:
                out.append(cell.text or "")
        writer.writerow(out + [";".join(table.flag_keys(row))])
    return buf.getvalue()


def render(table: Table, fmt: str) -> str:
    """``table`` as text: ``rich`` (plain text of the rich table), ``md``, ``latex`` or ``csv``."""
    renderers = {"rich": _render_rich, "md": _render_md, "latex": _render_latex, "csv": _render_csv}
    if fmt not in renderers:
        raise PrimebenchError(f"unknown table format {fmt!r}", fix=f"use one of {', '.join(FORMATS)}")
    return renderers[fmt](table)


__all__ = ["Cell", "Column", "FORMATS", "Footnote", "LAYOUTS", "Table", "build_table", "load_records", "render",
           "to_rich"]
