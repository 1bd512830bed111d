"""Generative perplexity with entropy: sample from a checkpoint, score the samples with a judge.

The protocol that moves the number is recorded in full: sampler, steps, dtype and method of the
categorical draw, nucleus p, temperature, number of samples, sequence length, judge (and that its
retokenisation adds no special tokens and truncates at ``max_length``), and the entropy convention
(per-sample unigram entropy, mean over samples, on the model's own ids and on the judge's ids).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import torch

from harness import distributed
from harness.errors import DataError
from harness.evaluation import load_for_evaluation
from harness.evaluation.genppl_references import References, collapse_check, reference_metrics
from harness.evaluation.genppl_scoring import SampleRows, Scorer, diversity_metrics, metrics_from_rows, score_rows
from harness.evaluation.samples_file import read_samples_file
from harness.judges import check_judge_spec, load_judge
from harness.logging import console
from harness.metrics.genppl import separator_ids
from harness.records import Metric, make_record, model_block, record_json
from harness.sampling import generate
from harness.settings import changed


@dataclass(frozen=True)
class GenPPLSettings:
    """Every setting of a Gen PPL run (:func:`run_genppl`), with the defaults of ``eval genppl``.

    The sampler's: ``sampler`` (None: the family's default), ``steps``, ``dtype``, ``method``,
    ``nucleus_p`` with ``nucleus_rule``, ``draw``, ``temperature`` (see
    :func:`harness.sampling.generate`). The run's: ``samples`` of ``seq_len`` tokens (None: the
    model's length) drawn in batches of ``batch_size`` from ``seed``; the ``judge`` spec (None: no
    judge numbers); entropies in ``bits``; ``device``; Prime's ``carry_over`` (None: as trained);
    the ``ema`` weights; the ``references`` batches and ``mauve``. ``samples_file``: score that
    JSONL file's samples instead of drawing any (the sampler's settings then do not apply).
    ``remask_*``: ReMDM's settings for ``sampler="remdm"`` (:class:`harness.sampling.remdm.RemaskSettings`;
    None: its defaults). ``correction_*``: GIDD's for ``sampler="self-correction"``
    (:class:`harness.sampling.correction.CorrectionSettings`; None: its defaults).
    """

    sampler: str | None = None
    steps: int | None = None
    samples: int = 16
    dtype: str = "float64"
    method: str = "gumbel"
    nucleus_p: float = 1.0
    nucleus_rule: str = "cross"
    draw: str = "two-stage"
    temperature: float = 1.0
    seq_len: int | None = None
    judge: str | None = "smollm2"
    batch_size: int = 8
    seed: int = 0
    bits: bool = False
    device: str = "cpu"
    carry_over: bool | None = None
    ema: bool = True
    references: bool = True
    mauve: bool = True
    samples_file: str | Path | None = None
    remask_schedule: str | None = None
    remask_eta: float | None = None
    remask_t_on: float | None = None
    remask_t_off: float | None = None
    remask_alpha_on: float | None = None
    correction_steps: int | None = None
    correction_temperature: float | None = None
    correction_t0: float | None = None
    correction_patience: int | None = None
    correction_tokens_per_step: int | None = None

    def sampling(self) -> dict[str, Any]:
        """The keywords of :func:`harness.sampling.generate` these settings fix (``remask``: the ReMDM
        settings given, None when none is; :func:`generate` refuses them for another sampler)."""
        keys = ("steps", "dtype", "method", "nucleus_p", "nucleus_rule", "draw", "temperature")
        remask = {
            name: getattr(self, f"remask_{name}")
            for name in ("schedule", "eta", "t_on", "t_off", "alpha_on")
            if getattr(self, f"remask_{name}") is not None
        }
        correction = {
            name: getattr(self, f"correction_{name}")
            for name in ("steps", "temperature", "t0", "patience", "tokens_per_step")
            if getattr(self, f"correction_{name}") is not None
        }
        return (
            {"sampler": self.sampler}
            | {k: getattr(self, k) for k in keys}
            | {"remask": remask or None, "correction": correction or None}
        )


class Drawn(NamedTuple):
    """A run's scored samples: ``rows`` in sample order, the sampler's ``protocol``, the sampling
    seconds summed over ranks (None for a samples file), their number and length."""

    rows: list[dict]
    protocol: dict[str, Any]
    wall: float | None
    samples: int
    seq_len: int


def sample_and_score(model, scorer: Scorer, settings: GenPPLSettings, seq_len: int, *, rank=0, world=1) -> SampleRows:
    """Draw and score this rank's batches of ``seq_len`` tokens; returns its :class:`SampleRows` (not
    yet reduced over ranks).

    Batch b (of ``settings.batch_size`` samples) is drawn with its own generator seeded by (seed, b)
    and is handled by rank ``b % world``, so the samples and every per-sample number are the same
    for any number of ranks.
    """
    state = SampleRows()
    size = settings.batch_size
    for b, start in enumerate(range(0, settings.samples, size)):
        if b % world != rank:
            continue
        n = min(size, settings.samples - start)
        t0 = time.time()
        out = generate(
            model,
            num_samples=n,
            batch_size=n,
            generator=torch.Generator(device=model.device).manual_seed(distributed.batch_seed(settings.seed, b)),
            bos_id=scorer.tokenizer.bos_id,
            seq_len=seq_len,
            **settings.sampling(),
        )
        wall = time.time() - t0
        rows = [
            {**row, "nfe": int(out.nfe[i]), "idle_steps": int(out.idle_steps[i])}
            for i, row in enumerate(scorer.rows(out.tokens, start))
        ]
        state.update(rows, out.protocol, wall)
    return state


def _draw(model, scorer: Scorer, settings: GenPPLSettings, info, L: int) -> Drawn:
    state = sample_and_score(model, scorer, settings, L, rank=info.rank, world=info.world)
    state.all_reduce()
    rows, protocol, wall = state.compute()
    return Drawn(rows, protocol, wall, settings.samples, L)


def _read(path, scorer: Scorer) -> tuple[Drawn, Scorer]:
    tokens, provenance = read_samples_file(path, scorer.tokenizer)
    L = max(len(t) for t in tokens)
    scorer = replace(scorer, max_length=L if scorer.judge is None else min(scorer.judge.context, L))
    protocol = {"sampler": "external (--samples-file)", "samples_file": provenance}
    return Drawn(scorer.rows(tokens), protocol, None, len(tokens), L), scorer


def _canvas(model, settings: GenPPLSettings) -> int:
    most = int(model.seq_len)
    L = settings.seq_len or most
    if L > most:
        raise DataError(
            f"--seq-len {L} is longer than the model's sequence length {most}", fix=f"use --seq-len <= {most}"
        )
    return L


def _retokenization(scorer: Scorer, rows: list[dict]) -> dict[str, Any]:
    separators = separator_ids(scorer.tokenizer)
    return {
        "special_tokens_added": False,
        "max_length": scorer.max_length,
        "pad": "judge EOS (never counted)",
        "counted_targets": "non-EOS targets plus the first EOS (MDLM)",
        "separators": {
            "model_ids": separators,
            "judge_eos_id": int(scorer.judge.eos_id),
            "rule": "text between separators re-encoded; each separator -> the judge's EOS",
        },
        "separators_mapped": sum(sum(1 for t in r["tokens"] if t in set(separators)) for r in rows),
    }


def _protocol(settings: GenPPLSettings, drawn: Drawn, scorer: Scorer, world: int) -> dict[str, Any]:
    """The record's protocol: the sampler's own (its per-call sizes replaced by the run's), the
    run's sizes and seeding, the judge and how samples reach it, and the entropy convention."""
    judge = scorer.judge
    protocol = {k: v for k, v in drawn.protocol.items() if k not in ("num_samples", "batch_size")}
    return protocol | dict(
        samples=drawn.samples,
        batch_size=settings.batch_size,
        seq_len=drawn.seq_len,
        seed=settings.seed,
        seeding="batch b of batch_size samples is drawn with its own generator seeded by (seed, b)",
        world_size=world,
        judge=scorer.judge_spec,
        judge_description=None if judge is None else judge.description,
        judge_retokenization=_retokenization(scorer, drawn.rows) if judge else None,
        judge_truncated_samples=None if judge is None else sum(1 for r in drawn.rows if r["judge_truncated"]),
        gen_ppl_aggregation="token-weighted over all samples: exp(sum nats / sum counted targets)",
        entropy={
            "definition": "per-sample unigram entropy of token ids, mean over samples",
            "units": "bits" if settings.bits else "nats",
            "ids": ["model (all L generated ids)", "judge (retokenised, unpadded)"],
        },
        tokenizer=scorer.tokenizer.spec,
    )


def _metrics(drawn: Drawn, scorer: Scorer, refs: References | None) -> dict[str, Metric]:
    metrics = scorer.metrics(drawn.rows)
    if refs is not None and refs.samples_mauve is not None:
        metrics["mauve"] = refs.samples_mauve
    if drawn.wall is not None:
        metrics["samples_per_s"] = Metric(
            drawn.samples / max(drawn.wall, 1e-9),
            None,
            "estimate",
            "samples per second of sampling time, summed over ranks",
        )
    return metrics


def _references_block(refs: References, metrics: dict[str, Metric]) -> dict[str, Any]:
    block = dict(refs.block)
    block["check"] = collapse_check(metrics["distinct_4"].value, block["data"]["metrics"]["distinct_4"]["value"])
    return block


def _public_rows(rows: list[dict]) -> list[dict]:
    """The samples file's rows: the judge's ids and features replaced by the judge token count."""
    return [
        {k: v for k, v in r.items() if k not in ("judge_ids", "judge_features")}
        | {"judge_tokens": None if r["judge_ids"] is None else len(r["judge_ids"])}
        for r in rows
    ]


def genppl_settings(settings: GenPPLSettings | None = None, **changes) -> GenPPLSettings:
    """``settings`` (default :class:`GenPPLSettings`) with ``changes`` by field name; an unknown
    name is an error naming the fields."""
    return changed(settings or GenPPLSettings(), changes, "Gen PPL")


def run_genppl(checkpoint, settings: GenPPLSettings | None = None, *, judge_obj=None, **changes):
    """Sample, score and return ``(record, samples as list of dicts)``.

    ``settings``: a :class:`GenPPLSettings` (default: ``eval genppl``'s defaults), with ``changes``
    by field name on top (``run_genppl(ckpt, samples=32, steps=64)``). ``judge_obj``: a loaded judge
    to reuse (its spec wins over ``settings.judge``). ``references``: also score the ``data``,
    ``tiled`` and ``unigram`` reference batches (:mod:`harness.evaluation.genppl_references`) under
    the same protocol, into the record's ``references`` with the ``collapsed`` check; they need the
    checkpoint's training corpus. ``mauve`` (with references and a judge): MAUVE of the samples and
    of every reference against held-out rows disjoint from ``data``, with the judge's features.

    Under ``torchrun`` the batches are shared out over the ranks and the per-sample results are
    reduced once; every rank returns the same record.
    """
    s = genppl_settings(settings, **changes)
    t0 = time.time()
    if judge_obj is None and s.judge:
        check_judge_spec(s.judge)  # a typo or an unreachable hub is reported before anything loads
    info, model, tokenizer, cfg = load_for_evaluation(checkpoint, s.device, carry_over=s.carry_over, ema=s.ema)
    judge = judge_obj if judge_obj is not None else (load_judge(s.judge, device=str(model.device)) if s.judge else None)
    L = _canvas(model, s)
    # MDLM truncates the retokenised sample at the model length; a judge with a different tokenizer
    # may need more tokens for the same text, so truncation is counted and recorded.
    features = s.references and s.mauve and judge is not None
    scorer = Scorer(tokenizer, judge, L if judge is None else min(judge.context, L), s.batch_size, s.bits, features)
    if s.samples_file is not None:
        drawn, scorer = _read(s.samples_file, scorer)
    else:
        drawn = _draw(model, scorer, s, info, L)
    refs = None
    if s.references:
        rows = drawn.rows if s.mauve else None
        refs = reference_metrics(
            cfg, scorer, samples=drawn.samples, seq_len=drawn.seq_len, seed=s.seed, sample_rows=rows
        )
    metrics = _metrics(drawn, scorer, refs)
    protocol = _protocol(s, drawn, scorer, info.world)
    if refs is not None and refs.mauve_protocol is not None:
        protocol["mauve"] = refs.mauve_protocol
    record = make_record(
        "genppl",
        model=model_block(Path(checkpoint), cfg),
        metrics=metrics,
        protocol=protocol,
        seed=s.seed,
        device=str(model.device),
        wall_s=time.time() - t0,
        extra=None if refs is None else {"references": _references_block(refs, metrics)},
    )
    _warn_if_collapsed(record)
    return record, _public_rows(drawn.rows)


def _warn_if_collapsed(record: dict) -> None:
    check = record.get("references", {}).get("check")
    if check is not None and check["collapsed"]:
        console().print(f"[yellow]warning:[/] {record['model']['name']}: the samples look collapsed: {check['why']}")


def samples_jsonl(rows: list[dict]) -> bytes:
    """Per-sample rows as JSON lines (strict JSON: a missing judge score is null)."""
    return "".join(record_json(r, indent=None) + "\n" for r in rows).encode("utf-8")


__all__ = [
    "GenPPLSettings",
    "diversity_metrics",
    "genppl_settings",
    "metrics_from_rows",
    "run_genppl",
    "sample_and_score",
    "samples_jsonl",
    "score_rows",
]
