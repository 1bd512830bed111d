"""What real text and a degenerate sampler score under a Gen PPL protocol: the ``references`` of a
``genppl`` record.

Three batches of token rows of the generated length, made in the model's own tokenizer and scored
exactly as the samples are (same judge, retokenisation, truncation and counting, same entropy and
diversity numbers):

* ``data``: the first ``samples`` rows of the checkpoint's held-out split, packed as its training
  data was (``[BOS] text [EOS]`` rows of L tokens): where real text sits;
* ``tiled``: the first of those rows repeated as every sample: what collapse looks like (its
  per-sample entropy and Gen PPL are a real row's; only the cross-sample numbers see it);
* ``unigram``: every token drawn independently from the train split's token frequencies: what a
  sampler that ignores context scores.

A run is flagged ``collapsed`` (:func:`collapse_check`) when its pooled distinct-4 is below
:data:`COLLAPSE_RATIO` of the ``data`` reference's, whatever its Gen PPL.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from harness.data import get_packed
from harness.data.corpora import get_corpus
from harness.errors import DataError
from harness.evaluation.genppl_scoring import Scorer
from harness.metrics.genppl import to_judge_ids
from harness.metrics.mauve_score import mauve_between, too_few_for_mauve
from harness.metrics.references import fit_counts
from harness.records import Metric

#: a run whose pooled distinct-4 is below this share of the data reference's is flagged collapsed
COLLAPSE_RATIO = 0.5
COLLAPSE_RULE = (
    f"collapsed when the pooled distinct-4 of the samples is below {COLLAPSE_RATIO} x that of the data "
    "reference (same number of samples, same length)"
)
NAMES = ("data", "tiled", "unigram")


def reference_token_rows(
    cfg, tokenizer, *, samples: int, seq_len: int, seed: int, held_out: bool = False
) -> tuple[dict, dict]:
    """``({name: (samples, L) LongTensor}, provenance)`` for the three references of a checkpoint
    whose training config is ``cfg``; the data come from the corpus it was trained on. With
    ``held_out`` also ``"held_out"``: the next ``samples`` rows, disjoint from ``data``, the text
    MAUVE compares every batch with."""
    data = cfg.data
    corpus = get_corpus(data.corpus)
    packing = {"wrap": data.wrap, "eos_between_docs": data.eos_between_docs, "remainder": "drop"}
    held = get_packed(corpus, data.valid_split, tokenizer=tokenizer, seq_len=seq_len, **packing)
    need = 2 * samples if held_out else samples
    if held.input_ids.shape[0] < need:
        raise DataError(
            f"{corpus.spec}:{data.valid_split} packs into {held.input_ids.shape[0]} rows of {seq_len} tokens, "
            f"fewer than the {need} the references need ({samples} for the data reference"
            + (f", {samples} more held out for MAUVE)" if held_out else ")"),
            fix="draw fewer --samples, or pass --no-references" + (" or --no-mauve" if held_out else ""),
        )
    rows = held.input_ids[:samples].clone()
    fit = get_packed(corpus, data.train_split, tokenizer=tokenizer, seq_len=seq_len, **packing)
    counts = fit_counts(fit.input_ids, fit.attention_mask, vocab_size=tokenizer.vocab_size)
    g = torch.Generator().manual_seed(seed)
    unigram = torch.multinomial(counts.n / counts.n.sum(), samples * seq_len, replacement=True, generator=g)
    batches = {"data": rows, "tiled": rows[:1].repeat(samples, 1), "unigram": unigram.view(samples, seq_len)}
    if held_out:
        batches["held_out"] = held.input_ids[samples : 2 * samples].clone()
    provenance = {
        "data": f"{corpus.spec}:{data.valid_split}, the first {samples} packed rows of {seq_len} tokens",
        "tiled": f"row 0 of the data reference repeated {samples} times",
        "unigram": f"tokens drawn independently from the {corpus.spec}:{data.train_split} token frequencies "
        f"({int(counts.n.sum())} tokens), torch.multinomial seeded with {seed}",
        "packing": packing,
    }
    if held_out:
        provenance["held_out"] = (
            f"{corpus.spec}:{data.valid_split}, packed rows {samples}..{2 * samples - 1} (MAUVE's text)"
        )
    return batches, provenance


def collapse_check(distinct_4: float, data_distinct_4: float) -> dict:
    """``{"collapsed", "distinct_4", "data_distinct_4", "rule", "why"}``: a run's pooled distinct-4
    against the data reference's (:data:`COLLAPSE_RULE`)."""
    collapsed = bool(distinct_4 < COLLAPSE_RATIO * data_distinct_4)
    return {
        "collapsed": collapsed,
        "distinct_4": distinct_4,
        "data_distinct_4": data_distinct_4,
        "rule": COLLAPSE_RULE,
        "why": (
            f"pooled distinct-4 {distinct_4:.3f} against {data_distinct_4:.3f} for held-out text "
            f"({'below' if collapsed else 'not below'} {COLLAPSE_RATIO} x)"
        ),
    }


class References(NamedTuple):
    """What :func:`reference_metrics` returns: the record's ``references`` ``block``, the samples'
    own MAUVE (a :class:`~harness.records.Metric`, None without MAUVE) and the MAUVE protocol (None
    without MAUVE; ``{"skipped": why}`` when there were too few rows)."""

    block: dict[str, Any]
    samples_mauve: Metric | None
    mauve_protocol: dict[str, Any] | None


def reference_metrics(cfg, scorer: Scorer, *, samples: int, seq_len: int, seed: int, sample_rows=None) -> References:
    """The ``references`` block of a ``genppl`` record: each reference batch's metrics (scored by
    ``scorer`` exactly as the samples are) and where it came from.

    With ``sample_rows`` (the run's scored rows, with the judge's features) and a judge, MAUVE too:
    every batch, the samples included, against held-out rows disjoint from ``data``
    (:mod:`harness.metrics.mauve_score`)."""
    mauve = sample_rows is not None and scorer.judge is not None
    batches, provenance = reference_token_rows(
        cfg, scorer.tokenizer, samples=samples, seq_len=seq_len, seed=seed, held_out=mauve
    )
    block: dict[str, Any] = {"provenance": provenance}
    scored = {name: scorer.rows(batches[name]) for name in NAMES}
    for name in NAMES:
        block[name] = {"metrics": {k: v.to_dict() for k, v in scorer.metrics(scored[name]).items()}}
    if not mauve:
        return References(block, None, None)
    why = too_few_for_mauve(len(batches["held_out"]), len(sample_rows))
    if why is not None:  # no number rather than one that cannot separate copies from text
        return References(block, None, {"skipped": why})
    held = _features(scorer, [to_judge_ids(r.tolist(), scorer.tokenizer, scorer.judge) for r in batches["held_out"]])
    what = f"MAUVE against {samples} held-out rows, {scorer.judge.spec} features"
    for name in NAMES:
        value, protocol = mauve_between(held, torch.stack([r["judge_features"] for r in scored[name]]), seed=seed)
        block[name]["metrics"]["mauve"] = Metric(value, None, "estimate", what).to_dict()
    value, protocol = mauve_between(held, torch.stack([r["judge_features"] for r in sample_rows]), seed=seed)
    return References(block, Metric(value, None, "estimate", what), protocol)


def _features(scorer: Scorer, judge_ids: list[list[int]]) -> torch.Tensor:
    return scorer.judge.features(judge_ids, max_length=scorer.max_length, batch_size=scorer.batch_size)


__all__ = [
    "COLLAPSE_RATIO",
    "COLLAPSE_RULE",
    "NAMES",
    "References",
    "collapse_check",
    "reference_metrics",
    "reference_token_rows",
]
