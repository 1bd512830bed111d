"""Records as table entries: one :class:`Entry` per record (or per item of its ``rows``), the cells
of its metrics, and the :class:`Layout` that says which records a table takes.

Tables know no model family: a record's model block carries its display ``label`` (e.g.
``"prime, ell=2"``) and its sort ``order``; a record without them (written before they existed)
shows its bare ``family`` and sorts after every ranked one.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.errors import PrimebenchError
from harness.records import training_seed
from harness.views.table import Cell

#: sort rank of a record whose model block has no ``order`` (after every ranked family)
UNRANKED = 1000
TITLES = {
    "gen_ppl": "Gen PPL",
    "entropy_model": "entropy (model ids)",
    "entropy_judge": "entropy (judge ids)",
    "pooled_entropy": "pooled entropy (model ids)",
    "pooled_entropy_judge": "pooled entropy (judge ids)",
    "distinct_1": "distinct-1",
    "distinct_2": "distinct-2",
    "distinct_3": "distinct-3",
    "distinct_4": "distinct-4",
    "cross_repeat_4": "4-grams shared across samples",
    "mauve": "MAUVE",
    "gen_ppl_at_data_entropy": "Gen PPL at the data entropy",
    "nfe": "NFE",
    "samples_per_s": "samples/s",
    "fid": "FID",
    "inception_score": "IS",
    "exact_nll": "exact NLL",
    "subtoken_bound": "sub-token bound",
    "token_joint": "paper objective (token-joint)",
    "isr": "ISR",
    "idle_steps": "idle steps",
    "nll": "NLL",
    "ppl": "PPL",
}
_TWO_DECIMALS = ("ppl", "gen_ppl", "gen_ppl_at_data_entropy", "fid", "inception_score", "nfe")
LEGEND = {
    "bound": "upper bound (the true value is at most this)",
    "paper-objective": "paper objective, not a bound",
    "estimate": "estimate (sampled or Monte Carlo)",
    "exact-policy": "exact likelihood of the model's sampler under the named unmasking policy (DUEL), "
    "not of the model its bound bounds",
}


@dataclass(frozen=True)
class Layout:
    """A table layout: the record ``evaluations`` it takes, its ``title``, the protocol ``axes`` that
    identify a row (shown, never flagged), the preferred ``metrics`` order (others follow, one column
    each), the ``title_keys`` named in the title when all rows share them, and its ``build``
    function (records, layout) -> Table; None: the generic one-row-per-entry table."""

    name: str
    evaluations: tuple[str, ...]
    title: str
    axes: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    title_keys: tuple[str, ...] = ()
    build: Callable | None = field(default=None, compare=False)


@dataclass
class Entry:
    """One record as a table row: its row ``label`` (the model's name), ``family`` (compared only for
    equality: family-fixed keys are compared within one family), ``family_label`` (display text)
    and ``order`` (sort rank) from the record's model block, flattened protocol and metrics."""

    label: str
    family: str
    protocol: dict[str, Any]
    metrics: dict[str, dict[str, Any]]
    family_label: str = "-"
    order: int = UNRANKED
    model: dict[str, Any] = field(default_factory=dict)
    created: str | None = None
    #: the record's ``references`` (unigram and bigram cross-entropy of the same tokens), if any
    references: dict[str, Any] | None = None


def entries(records: Sequence[dict[str, Any]]) -> list[Entry]:
    """One entry per record, or per item of a record's ``rows`` list (items with their own
    ``metrics`` and optional ``protocol`` overrides)."""
    out = []
    for rec in records:
        model = rec.get("model") or {}
        items = rec.get("rows") if isinstance(rec.get("rows"), list) else None
        items = [i for i in items if isinstance(i, dict) and isinstance(i.get("metrics"), dict)] if items else [None]
        order = model.get("order")
        for item in items or [None]:
            protocol = {**(rec.get("protocol") or {}), **((item or {}).get("protocol") or {})}
            metrics = (item or rec)["metrics"]
            for name, m in metrics.items():
                if not isinstance(m, dict) or "value" not in m:
                    raise PrimebenchError(
                        f"metric {name!r} of the {rec.get('evaluation')!r} record of "
                        f"{model.get('name')!r} has no value",
                        fix="re-run the evaluation",
                    )
            family = str(model.get("family") or "-")
            out.append(
                Entry(
                    label=str(model.get("name") or model.get("family") or "(no model)"),
                    family=family,
                    protocol=flatten(protocol),
                    metrics=metrics,
                    family_label=str(model.get("label") or family),
                    order=order if isinstance(order, int) else UNRANKED,
                    model=model,
                    created=(rec.get("provenance") or {}).get("created"),
                    references=rec.get("references") if isinstance(rec.get("references"), dict) else None,
                )
            )
    return out


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested protocol dicts as dotted keys: {"packing": {"wrap": True}} -> {"packing.wrap": True}."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def unique_labels(items: list[Entry], extra=lambda e: ()) -> None:
    """Make labels unique: a duplicate trained with another seed than the preset's (the config's
    ``seed`` > 0, as ``reproduce small --seeds`` trains them) gets ' (seed S)'; the duplicates left get
    ' (2)', ' (3)' ... in order."""

    counts = Counter((e.label, *extra(e)) for e in items)
    for e in items:
        seed = training_seed(e.model)
        if counts[(e.label, *extra(e))] > 1 and seed > 0:
            e.label = f"{e.label} (seed {seed})"
    seen: Counter = Counter()
    for e in items:
        seen[(e.label, *extra(e))] += 1
        n = seen[(e.label, *extra(e))]
        if n > 1:
            e.label = f"{e.label} ({n})"


def sort_key(e: Entry, axes: Sequence[str] = ()):
    """Rows by the family's rank, then name, then the layout's axes (numbers before text before None)."""

    def val(v):
        return (2, "") if v is None else (0, float(v), "") if isinstance(v, (int, float)) else (1, 0.0, str(v))

    return (e.order, e.label, *(val(e.protocol.get(a)) for a in axes))


def metric_cell(m: dict[str, Any] | None, name: str) -> Cell:
    """The cell of metric ``name`` (``{"value", "stderr", "kind", "units"}``); empty when absent.
    Perplexity-like numbers and values >= 100 get two decimals, others four."""
    if m is None:
        return Cell()
    kind = m.get("kind")
    if kind is not None and kind not in LEGEND and kind != "exact":
        raise PrimebenchError(
            f"metric {name!r} has unknown kind {kind!r}",
            fix="kinds are exact, bound, paper-objective, estimate or exact-policy",
        )
    two = name in _TWO_DECIMALS or name.startswith("ppl") or str(m.get("units", "")).startswith("perplexity")
    value = m.get("value")
    return Cell(
        value=None if value is None else float(value),
        stderr=None if m.get("stderr") is None else float(m["stderr"]),
        kind=kind,
        decimals=2 if two or (value is not None and abs(value) >= 100) else 4,
    )


def short(v: Any, width: int = 60) -> str:
    """``v`` as text of at most ``width`` characters (JSON for lists and dicts)."""
    text = json.dumps(v, sort_keys=True, default=str) if isinstance(v, (list, dict)) else str(v)
    return text if len(text) <= width else text[: width - 1] + "…"


def extra_metrics(items: list[Entry], known: Sequence[str]) -> list[str]:
    """Metric names found in ``items`` that are not in ``known``, in first-seen order."""
    return [n for n in dict.fromkeys(k for e in items for k in e.metrics) if n not in known]


__all__ = [
    "Entry",
    "LEGEND",
    "Layout",
    "TITLES",
    "UNRANKED",
    "entries",
    "extra_metrics",
    "flatten",
    "metric_cell",
    "short",
    "sort_key",
    "unique_labels",
]
