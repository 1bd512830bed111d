"""Perplexity over a packed dataset, accumulated in float64.

The per-token NLL is total nats / total scored tokens over the whole set (MDLM's token-weighted
convention), never a mean of per-sequence perplexities; the last partial batch is scored too.
Its standard error combines the per-sequence Monte-Carlo standard errors (zero when exact).
"""

from __future__ import annotations

import math

import torch

from harness.metrics.nll import NLLAccumulator, PerplexityResult


def batch_seed(seed: int, index: int) -> int:
    """Seed of batch ``index``: the draws of a batch do not depend on which rank scores it."""
    return (seed * 1_000_003 + index * 7_919 + 17) % (2**63 - 1)


@torch.no_grad()
def evaluate_nll(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    batch_size: int = 16,
    num_samples: int = 1,
    seed: int = 0,
    nll_kwargs: dict | None = None,
    rank: int = 0,
    world: int = 1,
    corruptible: torch.Tensor | None = None,
    estimators: list[str] | None = None,
) -> PerplexityResult | list[PerplexityResult]:
    """Score every row of ``input_ids`` (N, L) with ``model.nll`` and reduce token-weighted.

    Batches are fixed slices of ``batch_size`` rows, each with its own seeded generator, and batch
    b is scored by rank ``b % world``; the reduced result is therefore the same for any number of
    ranks (up to the order of float64 sums). ``corruptible`` (N, L) bool: the positions scored (and,
    for diffusion families, the only ones ever masked); the others are given context.
    ``estimators``: several estimators scored from the same corruptions and forward passes
    (``model.nll_many``); a list of results comes back, equal to separate runs with the same seed.
    """
    model.eval()
    accs = [NLLAccumulator() for _ in (estimators or [None])]
    for index, start in enumerate(range(0, input_ids.shape[0], batch_size)):
        if index % world != rank:
            continue
        g = torch.Generator(device=model.device).manual_seed(batch_seed(seed, index))
        x = input_ids[start : start + batch_size].to(model.device)
        m = None if attention_mask is None else attention_mask[start : start + batch_size].to(model.device)
        kw = dict(nll_kwargs or {})
        if corruptible is not None:
            kw["corruptible"] = corruptible[start : start + batch_size].to(model.device)
        if estimators:
            kw.pop("estimator", None)
            results = model.nll_many(
                x, estimators=estimators, num_samples=num_samples, generator=g, attention_mask=m, **kw
            )
        else:
            results = [model.nll(x, num_samples=num_samples, generator=g, attention_mask=m, **kw)]
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
    out = [acc.compute() for acc in accs]
    return out if estimators else out[0]


def estimator_plan(model, estimator: str):
    """The family's estimators that ``--estimator`` asks for: default (the first), both (all), or one by name."""
    from harness.models import families_offering

    if estimator == "default":
        return [model.estimators[0]]
    if estimator == "both":
        return list(model.estimators)
    if any(e.name == estimator for e in model.estimators):
        return [model.estimator(estimator)]
    offering = families_offering(estimator)
    if offering:
        raise ValueError(
            f"--estimator {estimator!r} only applies to {', '.join(offering)} checkpoints; this is {model.family!r}"
        )
    raise ValueError(
        f"unknown estimator {estimator!r}: use default, both, or one of {[e.name for e in model.estimators]}"
    )


def score_rows(
    model,
    ids,
    mask,
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
) -> tuple[dict, dict]:
    """Score every row with each planned estimator: (metrics, protocol fields shared by text and images).

    ``ignore_bos``: position 0 of every row is given context, never masked and never scored
    (BD3-LMs' ``ignore_bos``, which their zero-shot numbers use).

    ``units``: the (nll, per-unit) names, e.g. ("nats/token", "perplexity"); ``exp_name`` names the
    second metric (``ppl``, or ``bpd`` for images, which is nats / ln 2 rather than exp).
    """
    from harness.diffusion import TIME_SAMPLERS
    from harness.records import Metric

    plan = estimator_plan(model, estimator)
    sampler = (time_sampler or model.default_time_sampler) if model.uses_time_sampler else None
    metrics: dict[str, Metric] = {}
    first = None
    corruptible = None
    if ignore_bos:
        corruptible = mask.bool().clone()
        corruptible[:, 0] = False
    shared = len(plan) > 1 and hasattr(model, "nll_many")  # one forward pass for all the estimators
    results = (
        evaluate_nll(
            model,
            ids,
            mask,
            batch_size=batch_size,
            num_samples=mc_samples,
            seed=seed,
            nll_kwargs={"time_sampler": sampler},
            rank=info.rank,
            world=info.world,
            corruptible=corruptible,
            estimators=[e.name for e in plan],
        )
        if shared
        else None
    )
    for i, est in enumerate(plan):
        res = (
            results[i]
            if shared
            else evaluate_nll(
                model,
                ids,
                mask,
                batch_size=batch_size,
                num_samples=mc_samples,
                seed=seed,
                nll_kwargs={"estimator": est.name, "time_sampler": sampler},
                rank=info.rank,
                world=info.world,
                corruptible=corruptible,
            )
        )
        first = first or res
        metrics[f"nll{est.suffix}"] = Metric(res.nll, res.stderr, res.kind, units[0])
        if exp_name == "bpd":
            metrics[f"bpd{est.suffix}"] = Metric(res.bits_per_token, res.stderr / math.log(2), res.kind, units[1])
        else:
            metrics[f"ppl{est.suffix}"] = Metric(res.ppl, res.ppl * res.stderr, res.kind, units[1])
    protocol = {
        "tokens_scored": first.tokens,
        "batch_size": batch_size,
        "world_size": info.world,
        "mc_samples": mc_samples if model.uses_time_sampler else None,
        "time_sampler": None if sampler is None else TIME_SAMPLERS[sampler] + f" [{sampler}]",
        "stderr_method": first.stderr_method,
        "schedule": model.hparams.get("schedule"),
        "ignore_bos": bool(ignore_bos),
    }
    return metrics, protocol, {est.suffix or "nll": est.kind for est in plan}


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


def warn_if_not_learned(record: dict) -> bool:
    """Say on stderr when the record's NLL is not below the unigram reference of its tokens."""
    from harness.logging import console
    from harness.metrics.references import NOT_LEARNED, no_better_than_unigram

    nll = record["metrics"].get("nll")
    refs = record.get("references")
    if nll is None or not no_better_than_unigram(nll["value"], refs):
        return False
    console().print(
        f"[yellow]warning:[/] {record['model']['name']}: NLL {nll['value']:.4f} is {NOT_LEARNED} "
        f"(unigram reference {refs['unigram']['nll']['value']:.4f} nats/token on the same tokens)"
    )
    return True


def _first_given(mask: torch.Tensor) -> torch.Tensor:
    """``corruptible`` of ``--ignore-bos``: every real token but the first of each row."""
    corruptible = mask.bool().clone()
    corruptible[:, 0] = False
    return corruptible


def text_references(
    dataset, cfg, tokenizer, ids, mask, scored, *, seq_len: int, packing: dict, tokens_scored: float
) -> dict:
    """The unigram and bigram references of the scored tokens, fitted on a train split packed as the
    scored data: the scored corpus's train split when it has one other than the scored split, else
    the checkpoint's own training corpus (named in ``fit_on``, with a note)."""
    from harness.data import get_packed
    from harness.data.corpora import get_corpus
    from harness.errors import DataError
    from harness.metrics.references import fit_counts, references_block

    train = cfg.data.train_split
    note = None
    if train in dataset.corpus.splits and train != dataset.split and dataset.corpus.splits[train]:
        corpus = dataset.corpus
    else:
        corpus = get_corpus(cfg.data.corpus)
        note = (
            f"{dataset.name} has no {train!r} split apart from the scored one; the references are fitted on "
            f"the checkpoint's training corpus {cfg.data.corpus}:{train}"
        )
        if train not in corpus.splits or not corpus.splits[train]:
            raise DataError(
                f"no train split to fit the unigram/bigram references on ({dataset.name}, {cfg.data.corpus})",
                fix="evaluate with --no-references, or on a corpus with a train split",
            )
    fit = get_packed(corpus, train, tokenizer=tokenizer, seq_len=seq_len, **packing)
    counts = fit_counts(fit.input_ids, fit.attention_mask, vocab_size=tokenizer.vocab_size)
    block = references_block(counts, ids, scored, mask, fit_on=f"{corpus.spec}:{train}", note=note)
    if block["tokens_scored"] != int(tokens_scored):
        raise RuntimeError(
            f"the references counted {block['tokens_scored']} tokens where the model scored "
            f"{int(tokens_scored)}: the family's scored_positions disagrees with its nll"
        )
    return block
