"""Perplexity over a packed dataset, accumulated in float64.

The per-token NLL is total nats / total scored tokens over the whole set (MDLM's token-weighted
convention), never a mean of per-sequence perplexities; the last partial batch is scored too.
Its standard error combines the per-sequence Monte-Carlo standard errors (zero when exact).
``docs/ppl-trace.md`` follows ``primebench eval ppl`` from the command to the record, hop by hop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from harness.metrics.nll import NLLAccumulator, PerplexityResult
from harness.models.base import Estimator
from harness.records import Metric


def batch_seed(seed: int, index: int) -> int:
    """Seed of batch ``index``: the draws of a batch do not depend on which rank scores it."""
    return (seed * 1_000_003 + index * 7_919 + 17) % (2**63 - 1)


@torch.no_grad()
def evaluate_nll(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    estimators: Sequence[str] | None = None,
    time_sampler: str | None = None,
    batch_size: int = 16,
    num_samples: int = 1,
    seed: int = 0,
    corruptible: torch.Tensor | None = None,
    rank: int = 0,
    world: int = 1,
) -> list[PerplexityResult]:
    """Score every row of ``input_ids`` (N, L) with ``model.nll`` and reduce token-weighted: one
    :class:`~harness.metrics.nll.PerplexityResult` per name of ``estimators`` (None: the family's
    default estimator alone), all from the same corruptions and forward passes.

    ``attention_mask`` (N, L): the real tokens. ``corruptible`` (N, L) bool: the positions scored
    (and, for diffusion families, the only ones ever masked); the others are given context.
    ``time_sampler`` and ``num_samples`` go to ``model.nll`` (see ``model.time_sampler``). Batches
    are fixed slices of ``batch_size`` rows, each with its own seeded generator, and batch b is
    scored by rank ``b % world``; the reduced result is therefore the same for any number of ranks
    (up to the order of float64 sums).
    """
    from harness.resources import check_inference_fits

    names = [model.estimators[0].name] if estimators is None else list(estimators)
    check_inference_fits(
        model,
        batch=min(batch_size, input_ids.shape[0]),
        seq_len=input_ids.shape[1],
        doing="scoring",
        sized_by="--batch-size or the row length (--seq-len)",
    )
    model.eval()
    accs = [NLLAccumulator() for _ in names]
    device = model.device
    for index, start in enumerate(range(0, input_ids.shape[0], batch_size)):
        if index % world != rank:
            continue
        rows = slice(start, start + batch_size)
        results = model.nll(
            input_ids[rows].to(device),
            estimators=names,
            num_samples=num_samples,
            generator=torch.Generator(device=device).manual_seed(batch_seed(seed, index)),
            attention_mask=None if attention_mask is None else attention_mask[rows].to(device),
            corruptible=None if corruptible is None else corruptible[rows].to(device),
            time_sampler=time_sampler,
        )
        for acc, res in zip(accs, results):
            acc.update(res)
    if world > 1:
        import torch.distributed as dist

        for acc in accs:
            kinds = [None] * world
            dist.all_gather_object(kinds, (acc.kind, acc.num_samples))
            known = [k for k in kinds if k[0] is not None]
            acc.kind, acc.num_samples = known[0]
            acc.all_reduce()
    return [acc.compute() for acc in accs]


def estimator_plan(model, estimator: str) -> list[Estimator]:
    """The family's estimators that ``--estimator`` asks for: default (the first), both (all), or one by name."""
    from harness.errors import InputError
    from harness.models import families_offering

    if estimator in ("default", "both"):
        return list(model.estimators[: 1 if estimator == "default" else None])
    plan = [e for e in model.estimators if e.name == estimator]
    if plan:
        return plan
    offering = families_offering(estimator)
    if offering:
        raise InputError(
            f"--estimator {estimator!r} only applies to {', '.join(offering)} checkpoints; this is {model.family!r}",
            fix=f"use default, both, or one of {[e.name for e in model.estimators]}",
        )
    raise InputError(
        f"unknown estimator {estimator!r}",
        fix=f"use default, both, or one of {[e.name for e in model.estimators]}",
    )


class Scored(NamedTuple):
    """What :func:`score_rows` returns: the ``metrics`` by name, the ``protocol`` fields shared by
    text and image records, and the ``kinds`` of the estimators scored (by metric suffix)."""

    metrics: dict[str, Metric]
    protocol: dict[str, Any]
    kinds: dict[str, str]


def score_rows(
    model,
    ids: torch.Tensor,
    mask: torch.Tensor,
    *,
    estimator: str,
    time_sampler: str | None,
    batch_size: int,
    mc_samples: int,
    seed: int,
    info,
    units: tuple[str, str],
    exp_name: str,
    ignore_bos: bool = False,
) -> Scored:
    """Score every row of ``ids`` (N, L) (real tokens ``mask`` (N, L)) with each estimator that
    ``estimator`` plans (:func:`estimator_plan`), all in one :func:`evaluate_nll` pass.

    ``time_sampler``: None for the family's default (``model.time_sampler``). ``info``: the rank
    and world of :func:`harness.distributed.setup`. ``ignore_bos``: position 0 of every row is
    given context, never masked and never scored (BD3-LMs' ``ignore_bos``, which their zero-shot
    numbers use). ``units``: the (nll, per-unit) names, e.g. ("nats/token", "perplexity");
    ``exp_name`` names the second metric (``ppl``, or ``bpd`` for images, which is nats / ln 2
    rather than exp).
    """
    from harness.diffusion import time_sampler_text

    plan = estimator_plan(model, estimator)
    sampler = model.time_sampler(time_sampler)
    results = evaluate_nll(
        model,
        ids,
        mask,
        estimators=[est.name for est in plan],
        time_sampler=sampler,
        batch_size=batch_size,
        num_samples=mc_samples,
        seed=seed,
        corruptible=_first_given(mask) if ignore_bos else None,
        rank=info.rank,
        world=info.world,
    )
    metrics: dict[str, Metric] = {}
    for est, res in zip(plan, results):
        metrics[f"nll{est.suffix}"] = Metric(res.nll, res.stderr, res.kind, units[0])
        if exp_name == "bpd":
            metrics[f"bpd{est.suffix}"] = Metric(res.bits_per_token, res.stderr / math.log(2), res.kind, units[1])
        else:
            metrics[f"ppl{est.suffix}"] = Metric(res.ppl, res.ppl * res.stderr, res.kind, units[1])
    first = results[0]
    protocol = {
        "tokens_scored": first.tokens,
        "batch_size": batch_size,
        "world_size": info.world,
        "mc_samples": mc_samples if model.uses_time_sampler else None,
        "time_sampler": None
        if sampler is None
        else time_sampler_text(sampler, model.nelbo_block_size) + f" [{sampler}]",
        "stderr_method": first.stderr_method,
        "schedule": model.hparams.get("schedule"),
        "ignore_bos": bool(ignore_bos),
    }
    return Scored(metrics, protocol, {est.suffix or "nll": est.kind for est in plan})


def _image_spec(data: str | None, cfg) -> str | None:
    """The ``image:NAME[:SPLIT]`` spec to score, with the checkpoint's validation split by default; None for text."""
    from harness.data.images import is_image_spec, parse_image_spec

    spec = data or f"{cfg.data.corpus}:{cfg.data.valid_split}"
    if not is_image_spec(spec):
        if data is None or not is_image_spec(cfg.data.corpus):
            return None
        from harness.errors import DataError

        raise DataError(
            f"--data {data!r}: this checkpoint was trained on images ({cfg.data.corpus})",
            fix=f"pass --data {cfg.data.corpus}:test, or leave --data unset",
        )
    return str(parse_image_spec(spec).with_default_split(cfg.data.valid_split))


def run_image_bpd(
    model,
    tokenizer,
    cfg,
    spec: str,
    *,
    estimator: str,
    time_sampler: str | None,
    mc_samples: int,
    batch_size: int,
    seed: int,
    max_rows: int | None,
    info,
) -> tuple[dict, dict]:
    """Bits per dimension of ``model`` on the image dataset ``spec``: (metrics, protocol).

    Every one of the H*W*ch tokens of an image is scored (the ARM through its start token), so
    ``bpd`` = nats per dimension / ln 2, with the family's kind (ARM exact, diffusion bound, Prime's
    token-joint estimator the paper objective) and the standard error of :func:`evaluate_nll`.
    """
    from harness.data.images import get_image_dataset
    from harness.errors import DataError

    ds = get_image_dataset(spec[len("image:") :])
    if ds.levels != model.vocab_size or ds.seq_len != model.seq_len:
        raise DataError(
            f"{spec} ({ds.height}x{ds.width}x{ds.channels}, {ds.levels} levels) does not fit the model "
            f"(L={model.seq_len}, C={model.vocab_size})",
            fix="score the image dataset the checkpoint was trained on",
        )
    if model.image_unscored_first_pixel:
        raise DataError(model.image_unscored_first_pixel, fix="train the ARM on images with model.start_token=true")
    ids = ds.tokens if max_rows is None else ds.tokens[:max_rows]
    metrics, shared, kinds = score_rows(
        model,
        ids,
        torch.ones_like(ids),
        estimator=estimator,
        time_sampler=time_sampler,
        batch_size=batch_size,
        mc_samples=mc_samples,
        seed=seed,
        info=info,
        units=("nats/dim", "bits/dim"),
        exp_name="bpd",
    )
    protocol = {
        "dataset": ds.name,
        "data": spec,
        "split": ds.split,
        "height": ds.height,
        "width": ds.width,
        "channels": ds.channels,
        "levels": ds.levels,
        "detokenizer": None,
        "packing": {},
        "rows_scored": int(ids.shape[0]),
        "max_rows": max_rows,
        "tokenizer": tokenizer.spec,
        "seq_len": ds.seq_len,
        "token_convention": "one image per row, all H*W*ch dimensions scored" + model.image_token_note,
        **shared,
        "positions": model.hparams.get("positions"),
        "estimators": kinds,
    }
    return metrics, protocol


def run_ppl(
    checkpoint,
    *,
    data: str | None = None,
    seq_len: int | None = None,
    wrap: bool | None = None,
    eos_between_docs: bool | None = None,
    remainder: str | None = None,
    mc_samples: int = 1,
    batch_size: int = 16,
    estimator: str = "default",
    time_sampler: str | None = None,
    seed: int = 0,
    max_rows: int | None = None,
    device: str = "cpu",
    ignore_bos: bool = False,
    carry_over: bool | None = None,
    ema: bool = True,
    references: bool = True,
) -> dict:
    """Evaluate a checkpoint's perplexity (or bound) on a dataset and return a result record.

    ``ignore_bos``: the first position of every row is context, never masked or scored (BD3-LMs).
    ``references``: also score the unigram and bigram references (:mod:`harness.metrics.references`)
    on the same tokens, into the record's ``references`` (text data only)."""
    import time as _time
    from pathlib import Path

    from harness.data import get_packed
    from harness.errors import DataError
    from harness.evaluation import load_for_evaluation
    from harness.evaluation.references import text_references, warn_if_not_learned
    from harness.records import make_record, model_block

    t0 = _time.time()
    info, model, tokenizer, cfg = load_for_evaluation(checkpoint, device, carry_over=carry_over, ema=ema)
    d = cfg.data
    image_spec = _image_spec(data, cfg)
    refs = None
    if image_spec is not None:
        if ignore_bos:
            raise DataError(
                "--ignore-bos applies to text rows ([BOS] chunk [EOS]); image rows have no BOS",
                fix="drop --ignore-bos for image data",
            )
        metrics, protocol = run_image_bpd(
            model,
            tokenizer,
            cfg,
            image_spec,
            estimator=estimator,
            time_sampler=time_sampler,
            mc_samples=mc_samples,
            batch_size=batch_size,
            seed=seed,
            max_rows=max_rows,
            info=info,
        )
    else:
        spec = data or f"{d.corpus}:{d.valid_split}"
        L = seq_len or model.seq_len
        if L > model.seq_len:
            raise DataError(
                f"--seq-len {L} is longer than the model's sequence length {model.seq_len}",
                fix=f"use --seq-len <= {model.seq_len}",
            )
        from harness.data.datasets import resolve_dataset

        dataset = resolve_dataset(spec, default_split=d.valid_split)
        packing = dict(
            wrap=d.wrap if wrap is None else wrap,
            eos_between_docs=(dataset.eos_between_docs if dataset.eos_between_docs is not None else d.eos_between_docs)
            if eos_between_docs is None
            else eos_between_docs,
            remainder=remainder or d.remainder,
        )
        packed = get_packed(dataset.corpus, dataset.split, tokenizer=tokenizer, seq_len=L, **packing)
        ids, mask = packed.input_ids, packed.attention_mask
        if max_rows is not None:
            ids, mask = ids[:max_rows], mask[:max_rows]
        metrics, shared, kinds = score_rows(
            model,
            ids,
            mask,
            estimator=estimator,
            time_sampler=time_sampler,
            batch_size=batch_size,
            mc_samples=mc_samples,
            seed=seed,
            info=info,
            units=("nats/token", "perplexity"),
            exp_name="ppl",
            ignore_bos=ignore_bos,
        )
        protocol = {
            "dataset": dataset.name,
            "data": spec,
            "split": dataset.split,
            "detokenizer": dataset.detokenizer,
            "packing": packed.protocol,
            "rows_scored": int(ids.shape[0]),
            "max_rows": max_rows,
            "tokenizer": tokenizer.spec,
            "seq_len": L,
            "token_convention": model.token_convention,
            **shared,
            "estimators": kinds,
        }
        if references:
            scored = model.scored_positions(ids, mask, _first_given(mask) if ignore_bos else None)
            refs = text_references(
                dataset,
                cfg,
                tokenizer,
                ids,
                mask,
                scored,
                seq_len=L,
                packing=packing,
                tokens_scored=shared["tokens_scored"],
            )
    protocol.update(model.protocol(), weights="EMA" if ema else "raw")
    record = make_record(
        "ppl",
        model=model_block(Path(checkpoint), cfg),
        metrics=metrics,
        protocol=protocol,
        seed=seed,
        device=str(model.device),
        wall_s=_time.time() - t0,
        extra=None if refs is None else {"references": refs},
    )
    warn_if_not_learned(record)
    return record


def _first_given(mask: torch.Tensor) -> torch.Tensor:
    """``corruptible`` of ``--ignore-bos``: every real token but the first of each row."""
    corruptible = mask.bool().clone()
    corruptible[:, 0] = False
    return corruptible
