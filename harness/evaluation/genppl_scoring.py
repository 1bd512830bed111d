"""Scoring token rows for Gen PPL, and the numbers of a batch of scored rows.

One path for the samples and every reference batch (:mod:`harness.evaluation.genppl_references`):
:func:`score_rows` turns (N, L) model ids into per-sample rows (the decoded text, the ids, the
judge's nats, counted targets, ids and truncation flag), :class:`SampleRows` holds a rank's rows and
reduces itself over torch.distributed ranks, and :func:`metrics_from_rows` makes the record's
metrics (Gen PPL, per-sample and pooled entropies, diversity, NFE) from them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from harness.metrics.base import Accumulator
from harness.metrics.diversity import diversity, pooled_entropy
from harness.metrics.entropy import MeanEntropy, units_of
from harness.metrics.genppl import GenPPL, score_ids, to_judge_ids
from harness.records import Metric


def score_rows(
    tokens, tokenizer, judge, *, max_length: int, batch_size: int, start: int = 0, features: bool = False
) -> list[dict]:
    """Per-sample rows for token rows ``tokens`` ((N, L) model ids, a tensor or lists): the decoded
    text, the ids and, with a judge, its nats, counted targets, ids and truncation flag (and, with
    ``features``, its MAUVE features). Row i is numbered ``start + i``."""
    tokens = [r.tolist() if hasattr(r, "tolist") else list(r) for r in tokens]
    judged = None
    if judge is not None:
        samples_ids = [to_judge_ids(r, tokenizer, judge) for r in tokens]
        metric, judge_ids = score_ids(
            judge, samples_ids, max_length=max_length, batch_size=batch_size, features=features
        )
        judged = (metric.nats, metric.counts, judge_ids, metric.truncated_flags)
    return [
        {
            "index": start + i,
            "text": tokenizer.decode(row),
            "tokens": row,
            "judge_nats": None if judged is None else judged[0][i],
            "judge_targets": None if judged is None else judged[1][i],
            "judge_ids": None if judged is None else judged[2][i],
            "judge_truncated": None if judged is None else judged[3][i],
            **({"judge_features": metric.features[i]} if judged is not None and features else {}),
        }
        for i, row in enumerate(tokens)
    ]


@dataclass(frozen=True)
class Scorer:
    """How every batch of a Gen PPL run is scored: the model's ``tokenizer``, the ``judge`` (None: no
    judge numbers), the judge's ``max_length`` and ``batch_size``, entropies in ``bits`` or nats,
    and whether the judge's MAUVE ``features`` are kept."""

    tokenizer: Any
    judge: Any
    max_length: int
    batch_size: int
    bits: bool = False
    features: bool = False

    @property
    def judge_spec(self) -> str | None:
        return None if self.judge is None else self.judge.spec

    def rows(self, tokens, start: int = 0) -> list[dict]:
        """:func:`score_rows` of ``tokens`` ((N, L) model ids), numbered from ``start``."""
        return score_rows(
            tokens,
            self.tokenizer,
            self.judge,
            max_length=self.max_length,
            batch_size=self.batch_size,
            start=start,
            features=self.features,
        )

    def metrics(self, rows: list[dict]) -> dict:
        """:func:`metrics_from_rows` of scored rows."""
        return metrics_from_rows(rows, judge_spec=self.judge_spec, bits=self.bits)


class SampleRows(Accumulator):
    """A run's scored rows, the sampler's protocol and the sampling seconds; reduced over ranks by
    :meth:`all_reduce` (rows and protocols joined, seconds summed), then :meth:`compute` gives the
    rows in sample order, the protocol and the summed seconds."""

    def __init__(self) -> None:
        super().__init__()
        self.add_state("rows", [], dist_reduce_fx="cat")
        self.add_state("protocols", [], dist_reduce_fx="cat")
        self.add_state("wall", 0.0, dist_reduce_fx="sum")

    def update(self, rows: list[dict], protocol: dict[str, Any], wall: float) -> None:
        self.rows.extend(rows)
        self.protocols.append(protocol)
        self.wall += wall

    def compute(self) -> tuple[list[dict], dict[str, Any], float]:
        # every rank that drew a batch has the same sampler protocol; a rank that drew none has none
        protocol = self.protocols[0] if self.protocols else {}
        return sorted(self.rows, key=lambda r: r["index"]), dict(protocol), float(self.wall)


def diversity_metrics(samples, *, base="e") -> dict:
    """The cross-sample numbers of :mod:`harness.metrics.diversity` on ``samples`` (model ids) as
    record metrics, each with its jackknife standard error."""
    what = {
        "pooled_entropy": f"{units_of(base)}, all samples' model ids counted together",
        "cross_repeat_4": "share of 4-gram occurrences also found in another sample",
    }
    return {
        name: Metric(got.value, got.stderr, "estimate", what.get(name, f"distinct {name[-1]}-grams / all, pooled"))
        for name, got in diversity(samples, base=base).items()
    }


def _judge_metrics(rows: list[dict], judge_spec: str, base, units: str) -> dict:
    gp = GenPPL()
    gp.add(
        torch.tensor([r["judge_nats"] for r in rows], dtype=torch.float64),
        torch.tensor([r["judge_targets"] for r in rows], dtype=torch.float64),
    )
    res = gp.compute()
    ent_judge = MeanEntropy(base=base)
    ent_judge.update([r["judge_ids"] for r in rows])
    ej = ent_judge.compute()
    return {
        "gen_ppl": Metric(res.gen_ppl, res.stderr, "estimate", f"perplexity under {judge_spec}"),
        "entropy_judge": Metric(ej.mean, ej.stderr, "estimate", f"{units} per sample, judge ids"),
    }


def metrics_from_rows(rows: list[dict], *, judge_spec: str | None, bits: bool = False) -> dict:
    """Gen PPL, entropies and NFE from per-sample rows (see :mod:`harness.metrics.genppl`); a
    reference batch (rows without ``nfe``: no sampler ran) gets no NFE."""
    base = 2 if bits else "e"
    units = "bits" if bits else "nats"
    metrics = {} if judge_spec is None else _judge_metrics(rows, judge_spec, base, units)
    ent_model = MeanEntropy(base=base)
    ent_model.update([r["tokens"] for r in rows])
    em = ent_model.compute()
    metrics["entropy_model"] = Metric(em.mean, em.stderr, "estimate", f"{units} per sample, model ids")
    metrics.update(diversity_metrics([r["tokens"] for r in rows], base=base))
    if judge_spec is not None:
        pooled = pooled_entropy([r["judge_ids"] for r in rows], base=base)
        metrics["pooled_entropy_judge"] = Metric(
            pooled.value, pooled.stderr, "estimate", f"{units}, all samples' judge ids counted together"
        )
    if "nfe" not in rows[0]:
        return metrics
    nfe = torch.tensor([r["nfe"] for r in rows], dtype=torch.float64)
    metrics["nfe"] = Metric(
        float(nfe.mean()),
        float(nfe.std() / math.sqrt(nfe.numel())) if nfe.numel() > 1 else None,
        "estimate",
        "denoiser calls per sample",
    )
    return metrics


__all__ = ["SampleRows", "Scorer", "diversity_metrics", "metrics_from_rows", "score_rows"]
