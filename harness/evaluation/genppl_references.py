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

import torch

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
    from harness.data import get_packed
    from harness.data.corpora import get_corpus
    from harness.errors import DataError
    from harness.metrics.references import fit_counts

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


def reference_metrics(
    cfg, tokenizer, judge, *, samples, seq_len, seed, max_length, batch_size, bits, sample_rows=None
) -> dict:
    """The ``references`` block of a ``genppl`` record: each reference batch's metrics (scored by
    :func:`harness.evaluation.genppl.score_rows` and ``metrics_from_rows``, as the samples are) and where it came from.

    With ``sample_rows`` (the run's scored rows) and a judge, MAUVE too: every batch, the samples
    included, against held-out rows disjoint from ``data`` (:mod:`harness.metrics.mauve_score`);
    the samples' value is returned under ``block["mauve_of_samples"]`` for the run's own metrics."""
    from harness.evaluation.genppl import metrics_from_rows, score_rows
    from harness.metrics.genppl import to_judge_ids
    from harness.records import Metric

    mauve = sample_rows is not None and judge is not None
    batches, provenance = reference_token_rows(
        cfg, tokenizer, samples=samples, seq_len=seq_len, seed=seed, held_out=mauve
    )
    block = {"provenance": provenance}
    scored = {}
    for name in NAMES:
        scored[name] = score_rows(
            batches[name], tokenizer, judge, max_length=max_length, batch_size=batch_size, features=mauve
        )
        metrics = metrics_from_rows(scored[name], judge_spec=None if judge is None else judge.spec, bits=bits)
        block[name] = {"metrics": {k: v.to_dict() for k, v in metrics.items()}}
    if mauve:
        from harness.metrics.mauve_score import too_few_for_mauve

        why = too_few_for_mauve(len(batches["held_out"]), len(sample_rows))
        if why is not None:  # no number rather than one that cannot separate copies from text
            block["mauve_protocol"] = {"skipped": why}
            mauve = False
    if mauve:
        from harness.metrics.mauve_score import mauve_between

        def features(judge_ids):
            return judge.features(judge_ids, max_length=max_length, batch_size=batch_size)

        held = features([to_judge_ids(r.tolist(), tokenizer, judge) for r in batches["held_out"]])
        what = f"MAUVE against {samples} held-out rows, {judge.spec} features"
        for name in (*NAMES, "samples"):
            rows = sample_rows if name == "samples" else scored[name]
            value, protocol = mauve_between(held, torch.stack([r["judge_features"] for r in rows]), seed=seed)
            metric = Metric(value, None, "estimate", what).to_dict()
            if name == "samples":
                block["mauve_of_samples"] = metric
            else:
                block[name]["metrics"]["mauve"] = metric
        block["mauve_protocol"] = protocol
    return block


__all__ = ["COLLAPSE_RATIO", "COLLAPSE_RULE", "NAMES", "collapse_check", "reference_metrics", "reference_token_rows"]
