"""Several training seeds per family in a reproduce job, summarised as a mean with the seed-to-seed
spread beside the Monte-Carlo error of the evaluation.

Seed 0 keeps the model's own name (``mdlm``), so a one-seed run and the first seed of a several-seed
run are the same stages and share their checkpoints and records; seed s > 0 is ``mdlm-seed{s}``,
trained with the config override ``seed=s`` (model initialisation, data order and training draws).
Every seed is evaluated with the same evaluation settings and evaluation seed, so the spread between
seeds is the training seed's effect plus each evaluation's own Monte-Carlo error.

For each family and metric (the valid bound, exact for the ARM; Prime's paper objective):

* ``mean``: the mean over seeds;
* ``spread``: the seed-to-seed standard deviation (``ddof=1``; none with one seed);
* ``mc_error``: the Monte-Carlo standard error of the mean, ``sqrt(sum se_i^2) / n``;
* ``seed_error``: the standard error of the mean from the seeds, ``spread / sqrt(n)``.

Two families' difference "exceeds the spread" when ``|mean_a - mean_b| > 2 sqrt(s_a^2/n_a + s_b^2/n_b)``
(``s`` the seed spread). With two seeds each ``s`` rests on one degree of freedom: a rough screen,
which the tables say.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.errors import InputError
from harness.records import training_seed
from harness.views.table import Cell, Column, Footnote, Table

Z = 2.0  # how many seed standard errors a difference must exceed
_SEED_NAME = re.compile(r"^(?P<base>.+)-seed(?P<seed>[1-9][0-9]*)$")


def seed_name(name: str, seed: int) -> str:
    """The stage and folder name of ``name`` trained with ``seed`` (seed 0 keeps ``name``)."""
    if seed < 0:
        raise InputError(f"seed must be >= 0, got {seed}")
    return name if seed == 0 else f"{name}-seed{seed}"


def seed_overrides(seed: int) -> list[str]:
    """The config overrides that train seed ``seed`` (none for seed 0: the preset's own config)."""
    return [] if seed == 0 else [f"seed={seed}"]


def base_name(name: str) -> str:
    """``mdlm-seed2`` -> ``mdlm``; any other name is returned unchanged."""
    m = _SEED_NAME.match(name)
    return m.group("base") if m else name


@dataclass(frozen=True)
class SeedSummary:
    """One family's metric over its seeds (``values[i]`` and ``stderrs[i]`` of ``seeds[i]``)."""

    model: str
    metric: str
    kind: str | None
    seeds: tuple[int, ...]
    values: tuple[float, ...]
    stderrs: tuple[float, ...]
    reference: float | None = None  # the unigram reference of the scored tokens (the same for every seed)

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return math.fsum(self.values) / self.n

    @property
    def spread(self) -> float | None:
        if self.n < 2:
            return None
        m = self.mean
        return math.sqrt(math.fsum((v - m) ** 2 for v in self.values) / (self.n - 1))

    @property
    def seed_error(self) -> float | None:
        s = self.spread
        return None if s is None else s / math.sqrt(self.n)

    @property
    def mc_error(self) -> float:
        return math.sqrt(math.fsum(se * se for se in self.stderrs)) / self.n

    @property
    def gap(self) -> float | None:
        """The unigram reference minus the mean (how far below the context-free model)."""
        return None if self.reference is None else self.reference - self.mean


@dataclass(frozen=True)
class SeedDifference:
    a: SeedSummary
    b: SeedSummary

    @property
    def value(self) -> float:
        return self.a.mean - self.b.mean

    @property
    def stderr(self) -> float | None:
        if self.a.spread is None or self.b.spread is None:
            return None
        return math.sqrt(self.a.spread**2 / self.a.n + self.b.spread**2 / self.b.n)

    @property
    def exceeds_spread(self) -> bool | None:
        """True when the difference is more than ``Z`` seed standard errors; None with one seed."""
        se = self.stderr
        return None if se is None else abs(self.value) > Z * se


def _model_key(record: dict[str, Any]) -> str:
    model = record.get("model", {})
    checkpoint = str(model.get("checkpoint") or "")
    name = checkpoint.rstrip("/").rsplit("/", 1)[-1] if checkpoint else str(model.get("label") or model.get("name"))
    return base_name(name)


def _seed(record: dict[str, Any]) -> int:

    return training_seed(record.get("model", {}))


def summarise(ppl_records: Sequence[dict[str, Any]], metric: str = "nll") -> list[SeedSummary]:
    """Per model (seed suffix stripped, first-seen order): ``metric`` over its seeds. Records without
    the metric are skipped; a model evaluated twice under one seed is an error."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in ppl_records:
        m = r.get("metrics", {}).get(metric)
        if m and m.get("value") is not None:
            groups.setdefault(_model_key(r), []).append(r)
    out = []
    for model, records in groups.items():
        records = sorted(records, key=_seed)
        seeds = tuple(_seed(r) for r in records)
        if len(set(seeds)) != len(seeds):
            raise InputError(f"model {model!r} has two records for one seed: {seeds}")
        ms = [r["metrics"][metric] for r in records]
        refs = [r.get("references", {}).get("unigram", {}).get("nll", {}).get("value") for r in records]
        refs = [x for x in refs if x is not None]
        out.append(
            SeedSummary(
                model=model,
                metric=metric,
                kind=ms[0].get("kind"),
                seeds=seeds,
                values=tuple(float(x["value"]) for x in ms),
                stderrs=tuple(float(x.get("stderr") or 0.0) for x in ms),
                reference=(math.fsum(refs) / len(refs)) if refs else None,
            )
        )
    return out


def differences(summaries: Sequence[SeedSummary]) -> list[SeedDifference]:
    """Every pair of models, in table order."""
    return [SeedDifference(a, b) for i, a in enumerate(summaries) for b in summaries[i + 1 :]]


def _num(x: float | None, missing: str = "–") -> str:
    return missing if x is None else f"{x:.4f}"


def _mean_cell(s: SeedSummary, kind: str | None):
    """The mean with the seeds' standard error, or with one seed its Monte-Carlo error."""

    return Cell(s.mean, s.seed_error if s.n > 1 else s.mc_error, kind)


def seed_table(ppl_records: Sequence[dict[str, Any]]):
    """Mean over seeds of each model's valid bound (exact for the ARM) and of Prime's paper objective,
    with the seed-to-seed spread beside the Monte-Carlo error, and the gap to the unigram reference."""

    objective = {s.model: s for s in summarise(ppl_records, "nll_token_joint")}
    rows = []
    for s in summarise(ppl_records, "nll"):
        j = objective.get(s.model)
        rows.append(
            (
                Cell(text=s.model),
                Cell(text=str(s.n)),
                _mean_cell(s, s.kind),
                Cell(text=_num(s.spread, "– (1 seed)")),
                Cell(text=_num(s.mc_error)),
                Cell(text=f"{min(s.values):.4f} .. {max(s.values):.4f}"),
                _mean_cell(j, "paper-objective") if j else Cell(text="–"),
                Cell(text=_num(s.gap)),
            )
        )
    columns = (
        Column("model", "model", False),
        Column("seeds", "seeds", False),
        Column("mean", "mean NLL (nats/token)"),
        Column("spread", "seed sd"),
        Column("mc", "MC error of the mean"),
        Column("range", "range over seeds", False),
        Column("objective", "paper objective, mean", mark="paper-objective"),
        Column("gap", "unigram ref - mean"),
    )
    notes = (
        Footnote("bound", "upper bound (the true value is at most this)"),
        Footnote("paper-objective", "paper objective, not a bound"),
        Footnote(
            None,
            "± after a mean: its standard error from the seeds (seed sd / sqrt(n)); with one seed, "
            "the Monte-Carlo error. seed sd: the "
            "standard deviation between seeds (ddof 1), which holds the training seed's effect and each "
            "evaluation's Monte-Carlo error; MC error of the mean: sqrt(sum se_i^2) / n from the "
            "records' own standard errors. Every seed is scored on the same tokens with the same "
            "evaluation seed.",
        ),
    )
    return Table("ppl", "Perplexity over training seeds", columns, tuple(rows), notes, len(ppl_records))


def seed_difference_table(ppl_records: Sequence[dict[str, Any]]):
    """Every pair of models: the difference of their mean NLL and whether it exceeds the seed spread."""

    rows = []
    for d in differences(summarise(ppl_records, "nll")):
        verdict = {True: "yes", False: "no", None: "– (1 seed)"}[d.exceeds_spread]
        rows.append(
            (Cell(text=d.a.model), Cell(text=d.b.model), Cell(d.value, d.stderr, "estimate"), Cell(text=verdict))
        )
    columns = (
        Column("a", "model a", False),
        Column("b", "model b", False),
        Column("difference", "mean NLL a - b"),
        Column("exceeds", f"beyond {Z:g} seed SE", False),
    )
    notes = (
        Footnote(
            "estimate",
            "estimate (a difference of a bound and a bound, or of a bound and the ARM's exact "
            "NLL, is not itself a bound)",
        ),
        Footnote(
            None,
            f"± : sqrt(s_a^2/n_a + s_b^2/n_b) with s the seed sd; 'yes' when |difference| > {Z:g} of "
            "it. With two seeds per model each s rests on one degree of freedom, so this is a rough "
            "screen, not a test at a stated level.",
        ),
    )
    return Table(
        "ppl", "Differences between models against the seed spread", columns, tuple(rows), notes, len(ppl_records)
    )


__all__ = [
    "SeedDifference",
    "SeedSummary",
    "Z",
    "base_name",
    "differences",
    "seed_difference_table",
    "seed_name",
    "seed_overrides",
    "seed_table",
    "summarise",
]
