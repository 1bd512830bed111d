"""Generative perplexity with entropy: sample from a checkpoint, score the samples with a judge.

The protocol that moves the number is recorded in full: sampler, steps, dtype and method of the
categorical draw, nucleus p, temperature, number of samples, sequence length, judge (and that its
retokenisation adds no special tokens and truncates at ``max_length``), and the entropy convention
(per-sample unigram entropy, mean over samples, on the model's own ids and on the judge's ids).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch

from harness.metrics.entropy import MeanEntropy


def _sample_batch(
    model,
    tokenizer,
    *,
    sampler,
    steps,
    n,
    dtype,
    method,
    nucleus_p,
    temperature,
    seed,
    nucleus_rule="cross",
    draw="two-stage",
):
    from harness.sampling import generate

    g = torch.Generator(device=model.device).manual_seed(seed)
    return generate(
        model,
        sampler,
        num_samples=n,
        batch_size=n,
        steps=steps,
        temperature=temperature,
        nucleus_p=nucleus_p,
        nucleus_rule=nucleus_rule,
        dtype=dtype,
        method=method,
        generator=g,
        bos_id=tokenizer.bos_id,
        draw=draw,
    )


def sample_and_score(
    model,
    tokenizer,
    judge,
    *,
    sampler,
    steps,
    samples,
    dtype,
    method,
    nucleus_p,
    temperature,
    batch_size,
    seed,
    max_length,
    rank: int = 0,
    world: int = 1,
    nucleus_rule: str = "cross",
    draw: str = "two-stage",
    features: bool = False,
):
    """Draw and score this rank's batches. Returns (per-sample rows, sampler protocol, sampling seconds).

    Batch b (of ``batch_size`` samples) is drawn with its own generator seeded by (seed, b) and is
    handled by rank ``b % world``, so the samples and every per-sample number are the same for any
    number of ranks.
    """
    from harness.evaluation.ppl import batch_seed

    rows, protocol, wall = [], None, 0.0
    for b, start in enumerate(range(0, samples, batch_size)):
        if b % world != rank:
            continue
        n = min(batch_size, samples - start)
        t0 = time.time()
        out = _sample_batch(
            model,
            tokenizer,
            sampler=sampler,
            steps=steps,
            n=n,
            dtype=dtype,
            method=method,
            nucleus_p=nucleus_p,
            temperature=temperature,
            seed=batch_seed(seed, b),
            nucleus_rule=nucleus_rule,
            draw=draw,
        )
        wall += time.time() - t0
        protocol = out.protocol
        scored = score_rows(
            out.tokens, tokenizer, judge, max_length=max_length, batch_size=n, start=start, features=features
        )
        for i, row in enumerate(scored):
            rows.append({**row, "nfe": int(out.nfe[i]), "idle_steps": int(out.idle_steps[i])})
    return rows, protocol, wall


def score_rows(
    tokens, tokenizer, judge, *, max_length: int, batch_size: int, start: int = 0, features: bool = False
) -> list[dict]:
    """Per-sample rows for token rows ``tokens`` ((N, L) model ids, a tensor or lists): the decoded
    text, the ids and, with a judge, its nats, counted targets, ids and truncation flag. The samples
    and every reference batch are scored by this one function."""
    from harness.metrics.genppl import score_ids, to_judge_ids

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


def gather_rows(rows: list[dict], world: int) -> list[dict]:
    """All ranks' per-sample rows, in sample order (one all-gather: the only reduction)."""
    if world > 1:
        import torch.distributed as dist

        parts = [None] * world
        dist.all_gather_object(parts, rows)
        rows = [r for part in parts for r in part]
    return sorted(rows, key=lambda r: r["index"])


def diversity_metrics(samples, *, base="e") -> dict:
    """The cross-sample numbers of :mod:`harness.metrics.diversity` on ``samples`` (model ids) as
    record metrics, each with its jackknife standard error."""
    from harness.metrics.diversity import diversity
    from harness.metrics.entropy import units_of
    from harness.records import Metric

    what = {
        "pooled_entropy": f"{units_of(base)}, all samples' model ids counted together",
        "cross_repeat_4": "share of 4-gram occurrences also found in another sample",
    }
    return {
        name: Metric(got.value, got.stderr, "estimate", what.get(name, f"distinct {name[-1]}-grams / all, pooled"))
        for name, got in diversity(samples, base=base).items()
    }


def metrics_from_rows(rows: list[dict], *, judge_spec: str | None, bits: bool = False) -> dict:
    """Gen PPL, entropies and NFE from per-sample rows (see :mod:`harness.metrics.genppl`)."""
    from harness.metrics.diversity import pooled_entropy
    from harness.metrics.genppl import GenPPL
    from harness.records import Metric

    base = 2 if bits else "e"
    units = "bits" if bits else "nats"
    metrics = {}
    if judge_spec is not None:
        gp = GenPPL()
        gp.add(
            torch.tensor([r["judge_nats"] for r in rows], dtype=torch.float64),
            torch.tensor([r["judge_targets"] for r in rows], dtype=torch.float64),
        )
        res = gp.compute()
        metrics["gen_ppl"] = Metric(res.gen_ppl, res.stderr, "estimate", f"perplexity under {judge_spec}")
        ent_judge = MeanEntropy(base=base)
        ent_judge.update([r["judge_ids"] for r in rows])
        ej = ent_judge.compute()
        metrics["entropy_judge"] = Metric(ej.mean, ej.stderr, "estimate", f"{units} per sample, judge ids")
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
    if "nfe" not in rows[0]:  # a reference batch: no sampler ran
        return metrics
    nfe = torch.tensor([r["nfe"] for r in rows], dtype=torch.float64)
    metrics["nfe"] = Metric(
        float(nfe.mean()),
        float(nfe.std() / math.sqrt(nfe.numel())) if nfe.numel() > 1 else None,
        "estimate",
        "denoiser calls per sample",
    )
    return metrics


def _draw_and_score(model, tokenizer, judge, info, *, L, max_length, samples, batch_size, seed, **sampling):
    """Draw ``samples`` of length L with this rank's share of the batches, score them and gather:
    ``(rows in sample order, sampler protocol, sampling seconds summed over ranks)``."""
    from harness import distributed

    original = model.seq_len
    model.seq_len = L  # generate a canvas of L tokens (the backbone accepts any length up to its own)
    try:
        rows, sampler_protocol, sample_wall = sample_and_score(
            model,
            tokenizer,
            judge,
            samples=samples,
            batch_size=batch_size,
            seed=seed,
            max_length=max_length,
            rank=info.rank,
            world=info.world,
            **sampling,
        )
    finally:
        model.seq_len = original
    rows = gather_rows(rows, info.world)
    walls = distributed.all_reduce_sum(torch.tensor([sample_wall], dtype=torch.float64))
    if sampler_protocol is None:  # this rank drew no batch: another rank's protocol is gathered below
        sampler_protocol = {}
    if info.world > 1:
        import torch.distributed as dist

        protos = [None] * info.world
        dist.all_gather_object(protos, sampler_protocol)
        sampler_protocol = next(p for p in protos if p)
    return rows, sampler_protocol, walls


def run_genppl(
    checkpoint,
    *,
    sampler: str | None = None,
    steps: int | None = None,
    samples: int = 16,
    dtype: str = "float64",
    method: str = "gumbel",
    nucleus_p: float = 1.0,
    nucleus_rule: str = "cross",
    draw: str = "two-stage",
    temperature: float = 1.0,
    seq_len: int | None = None,
    judge: str | None = "smollm2",
    batch_size: int = 8,
    seed: int = 0,
    bits: bool = False,
    device: str = "cpu",
    judge_obj=None,
    carry_over: bool | None = None,
    ema: bool = True,
    references: bool = True,
    mauve: bool = True,
    samples_file=None,
):
    """Sample, score and return ``(record, samples as list of dicts)``.

    ``references``: also score the ``data``, ``tiled`` and ``unigram`` reference batches
    (:mod:`harness.evaluation.genppl_references`) under the same protocol, into the record's
    ``references`` with the ``collapsed`` check; they need the checkpoint's training corpus.
    ``mauve`` (with references and a judge): MAUVE of the samples and of every reference against
    held-out rows disjoint from ``data``, with the judge's features. ``samples_file``: score the
    samples of that JSONL file (:mod:`harness.evaluation.samples_file`) instead of drawing any;
    ``samples`` and ``seq_len`` then come from the file and the sampling settings are not used.

    Under ``torchrun`` the batches are shared out over the ranks and the per-sample results are
    gathered once; every rank returns the same record.
    """
    from harness.errors import DataError
    from harness.evaluation import load_for_evaluation
    from harness.evaluation.genppl_references import collapse_check, reference_metrics
    from harness.judges import check_judge_spec, load_judge
    from harness.metrics.genppl import separator_ids
    from harness.records import Metric, make_record, model_block

    t0 = time.time()
    if judge_obj is None and judge:
        check_judge_spec(judge)  # a typo or an unreachable hub is reported before anything loads
    info, model, tokenizer, cfg = load_for_evaluation(checkpoint, device, carry_over=carry_over, ema=ema)
    device = str(model.device)
    the_judge = judge_obj if judge_obj is not None else (load_judge(judge, device=device) if judge else None)
    original = model.seq_len
    L = seq_len or original
    if L > original:
        raise DataError(
            f"--seq-len {L} is longer than the model's sequence length {original}", fix=f"use --seq-len <= {original}"
        )
    # MDLM truncates the retokenised sample at the model length; a judge with a different tokenizer
    # may need more tokens for the same text, so truncation is counted and recorded.
    max_length = L if the_judge is None else min(the_judge.context, L)
    if samples_file is not None:
        from harness.evaluation.samples_file import read_samples_file

        tokens, provenance = read_samples_file(samples_file, tokenizer)
        samples, L = len(tokens), max(len(t) for t in tokens)
        max_length = L if the_judge is None else min(the_judge.context, L)
        rows = score_rows(
            tokens, tokenizer, the_judge, max_length=max_length, batch_size=batch_size, features=references and mauve
        )
        sampler_protocol, walls = {"sampler": "external (--samples-file)", "samples_file": provenance}, None
    else:
        rows, sampler_protocol, walls = _draw_and_score(
            model,
            tokenizer,
            the_judge,
            info,
            L=L,
            max_length=max_length,
            samples=samples,
            batch_size=batch_size,
            seed=seed,
            sampler=sampler,
            steps=steps,
            dtype=dtype,
            method=method,
            nucleus_p=nucleus_p,
            nucleus_rule=nucleus_rule,
            temperature=temperature,
            draw=draw,
            features=references and mauve and the_judge is not None,
        )
    judge_spec = None if the_judge is None else the_judge.spec
    metrics = metrics_from_rows(rows, judge_spec=judge_spec, bits=bits)
    refs = None
    if references:
        refs = reference_metrics(
            cfg,
            tokenizer,
            the_judge,
            samples=samples,
            seq_len=L,
            seed=seed,
            max_length=max_length,
            batch_size=batch_size,
            bits=bits,
            sample_rows=rows if mauve else None,
        )
        if "mauve_of_samples" in refs:
            metrics["mauve"] = Metric(**refs.pop("mauve_of_samples"))
        refs["check"] = collapse_check(metrics["distinct_4"].value, refs["data"]["metrics"]["distinct_4"]["value"])
    if walls is not None:
        metrics["samples_per_s"] = Metric(
            samples / max(float(walls), 1e-9),
            None,
            "estimate",
            "samples per second of sampling time, summed over ranks",
        )
    protocol = dict(sampler_protocol)
    protocol.pop("num_samples", None)
    protocol.pop("batch_size", None)
    protocol.update(
        samples=samples,
        batch_size=batch_size,
        seq_len=L,
        seed=seed,
        seeding="batch b of batch_size samples is drawn with its own generator seeded by (seed, b)",
        world_size=info.world,
        judge=None if the_judge is None else the_judge.spec,
        judge_description=None if the_judge is None else the_judge.description,
        judge_retokenization={
            "special_tokens_added": False,
            "max_length": max_length,
            "pad": "judge EOS (never counted)",
            "counted_targets": "non-EOS targets plus the first EOS (MDLM)",
            "separators": {
                "model_ids": separator_ids(tokenizer),
                "judge_eos_id": int(the_judge.eos_id),
                "rule": "text between separators re-encoded; each separator -> the judge's EOS",
            },
            "separators_mapped": sum(sum(1 for t in r["tokens"] if t in set(separator_ids(tokenizer))) for r in rows),
        }
        if the_judge
        else None,
        judge_truncated_samples=None if the_judge is None else sum(1 for r in rows if r["judge_truncated"]),
        gen_ppl_aggregation="token-weighted over all samples: exp(sum nats / sum counted targets)",
        entropy={
            "definition": "per-sample unigram entropy of token ids, mean over samples",
            "units": "bits" if bits else "nats",
            "ids": ["model (all L generated ids)", "judge (retokenised, unpadded)"],
        },
        tokenizer=tokenizer.spec,
    )
    if refs is not None and "mauve_protocol" in refs:
        protocol["mauve"] = refs.pop("mauve_protocol")
    out_rows = [
        {k: v for k, v in r.items() if k not in ("judge_ids", "judge_features")}
        | {"judge_tokens": None if r["judge_ids"] is None else len(r["judge_ids"])}
        for r in rows
    ]
    record = make_record(
        "genppl",
        model=model_block(Path(checkpoint), cfg),
        metrics=metrics,
        protocol=protocol,
        seed=seed,
        device=device,
        wall_s=time.time() - t0,
        extra=None if refs is None else {"references": refs},
    )
    if refs is not None and refs["check"]["collapsed"]:
        from harness.logging import console

        console().print(
            f"[yellow]warning:[/] {record['model']['name']}: the samples look collapsed: {refs['check']['why']}"
        )
    return record, out_rows


def samples_jsonl(rows: list[dict]) -> bytes:
    """Per-sample rows as JSON lines (strict JSON: a missing judge score is null)."""
    from harness.records import record_json

    return "".join(record_json(r, indent=None) + "\n" for r in rows).encode("utf-8")
