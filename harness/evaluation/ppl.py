"""Perplexity over a packed dataset, accumulated in float64.

The per-token NLL is total nats / total scored tokens over the whole set (MDLM's token-weighted
convention), never a mean of per-sequence perplexities; the last partial batch is scored too.
Its standard error combines the per-sequence Monte-Carlo standard errors (zero when exact).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PerplexityResult:
    """Token-weighted NLL over a dataset. ``nll`` in nats per token; ``kind`` as in :class:`harness.results.NLL`.

    ``stderr_method``: "exact" (no Monte-Carlo error), "per-sequence" (from the K > 1 samples of
    each sequence) or "between-sequence" (K = 1: the spread of the per-sequence estimates, which
    also contains the variation between sequences and so overstates the Monte-Carlo error).
    """

    nll: float
    stderr: float
    tokens: float
    sequences: int
    kind: str
    num_samples: int
    stderr_method: str = "exact"

    @property
    def ppl(self) -> float:
        return math.exp(self.nll)

    @property
    def bits_per_token(self) -> float:
        return self.nll / math.log(2)


class NLLAccumulator:
    """update/compute/reset with float64 state; batch size does not change the result."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.nats = torch.zeros((), dtype=torch.float64)
        self.var = torch.zeros((), dtype=torch.float64)
        self.tokens = torch.zeros((), dtype=torch.float64)
        self.sequences = 0
        self.sum_x = torch.zeros((), dtype=torch.float64)
        self.sum_x2 = torch.zeros((), dtype=torch.float64)
        self.per_sequence_se = True
        self.kind: str | None = None
        self.num_samples = 1

    def update(self, result) -> None:
        if self.kind is not None and result.kind != self.kind:
            raise ValueError(f"cannot accumulate {result.kind!r} with {self.kind!r}")
        self.kind = result.kind
        self.num_samples = result.num_samples
        self.nats += result.nats.detach().double().sum().cpu()
        se = result.stderr.detach().double().cpu()
        if torch.isnan(se).any():
            self.per_sequence_se = False
        else:
            self.var += (se**2).sum()
        x = result.nats.detach().double().cpu()
        self.sum_x += x.sum()
        self.sum_x2 += (x**2).sum()
        self.tokens += torch.as_tensor(result.tokens).double().sum().cpu()
        self.sequences += int(result.nats.numel())

    def compute(self) -> PerplexityResult:
        if self.tokens <= 0:
            raise ValueError("no tokens were scored")
        if self.kind == "exact":
            stderr, method = 0.0, "exact"
        elif self.per_sequence_se:
            stderr, method = float(self.var.sqrt() / self.tokens), "per-sequence"
        else:
            n = self.sequences
            var = (self.sum_x2 - self.sum_x**2 / n) / max(n - 1, 1)
            stderr, method = float((n * var.clamp_min(0)).sqrt() / self.tokens), "between-sequence"
        return PerplexityResult(
            nll=float(self.nats / self.tokens),
            stderr=stderr,
            stderr_method=method,
            tokens=float(self.tokens),
            sequences=self.sequences,
            kind=self.kind or "exact",
            num_samples=self.num_samples,
        )


    def all_reduce(self) -> None:
        """Sum the state over torch.distributed ranks (once, before ``compute``)."""
        from harness import distributed

        state = torch.stack(
            [self.nats, self.var, self.tokens, torch.tensor(float(self.sequences), dtype=torch.float64), self.sum_x, self.sum_x2,
             torch.tensor(0.0 if self.per_sequence_se else 1.0, dtype=torch.float64)]
        )
        distributed.all_reduce_sum(state)
        self.nats, self.var, self.tokens = state[0], state[1], state[2]
        self.sequences = int(state[3])
        self.sum_x, self.sum_x2 = state[4], state[5]
        self.per_sequence_se = bool(state[6] == 0)


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
) -> PerplexityResult:
    """Score every row of ``input_ids`` (N, L) with ``model.nll`` and reduce token-weighted.

    Batches are fixed slices of ``batch_size`` rows, each with its own seeded generator, and batch
    b is scored by rank ``b % world``; the reduced result is therefore the same for any number of
    ranks (up to the order of float64 sums).
    """
    model.eval()
    acc = NLLAccumulator()
    for index, start in enumerate(range(0, input_ids.shape[0], batch_size)):
        if index % world != rank:
            continue
        g = torch.Generator(device=model.device).manual_seed(batch_seed(seed, index))
        x = input_ids[start : start + batch_size].to(model.device)
        m = None if attention_mask is None else attention_mask[start : start + batch_size].to(model.device)
        acc.update(model.nll(x, num_samples=num_samples, generator=g, attention_mask=m, **(nll_kwargs or {})))
    if world > 1:
        kinds = [None] * world
        import torch.distributed as dist

        dist.all_gather_object(kinds, (acc.kind, acc.num_samples))
        known = [k for k in kinds if k[0] is not None]
        acc.kind, acc.num_samples = known[0]
        acc.all_reduce()
    return acc.compute()


TOKEN_CONVENTION = {
    "arm": "exact NLL of the L-1 shifted targets of each row (the first token is given), as MDLM's AR baseline",
    "diffusion": "all L positions of each row are scored, BOS/EOS included, as MDLM's NELBO",
}

ESTIMATORS = {
    "arm": ("exact",),
    "mdlm": ("bound",),
    "masked": ("bound",),
    "prime": ("subtoken", "token_joint"),
}


def _estimator_plan(family: str, estimator: str) -> list[tuple[str, dict, str]]:
    """[(metric suffix, nll kwargs, label)] for the family and the requested estimator."""
    if family != "prime":
        if estimator not in ("default", "both", "subtoken"):
            raise ValueError(f"--estimator {estimator!r} only applies to prime checkpoints; this is {family!r}")
        return [("", {}, "exact" if family == "arm" else "bound")]
    if estimator in ("default", "subtoken"):
        return [("", {"estimator": "subtoken"}, "bound")]
    if estimator == "token_joint":
        return [("_token_joint", {"estimator": "token_joint"}, "paper-objective")]
    if estimator == "both":
        return [("", {"estimator": "subtoken"}, "bound"), ("_token_joint", {"estimator": "token_joint"}, "paper-objective")]
    raise ValueError(f"unknown estimator {estimator!r}: use subtoken, token_joint or both")


def _run_plan(model, ids, mask, plan, *, sampler: str, batch_size: int, mc_samples: int, seed: int, info) -> dict:
    """{metric suffix: PerplexityResult} for each (suffix, nll kwargs, label) of ``plan``."""
    results = {}
    for suffix, kwargs, _label in plan:
        kw = dict(kwargs)
        if model.family != "arm":
            kw["time_sampler"] = sampler
        results[suffix] = evaluate_nll(
            model, ids, mask, batch_size=batch_size, num_samples=mc_samples, seed=seed, nll_kwargs=kw,
            rank=info.rank, world=info.world,
        )
    return results


TIME_SAMPLERS = {
    "t": "one t per sequence in [1e-3, 1], stratified over the batch (K=1) or over K samples; weight -alpha'/(1-alpha)",
    "n": "exact mask count n = ceil(N u), stratified; weight N/n (unbiased for a time-independent network)",
}


def _image_spec(data: str | None, cfg) -> str | None:
    """The ``image:NAME[:SPLIT]`` spec to score, with the checkpoint's validation split by default; None for text."""
    import re

    from harness.data.images import IMAGE_SPLITS

    spec = data or f"{cfg.data.corpus}:{cfg.data.valid_split}"
    if not spec.startswith("image:"):
        if data is None or not cfg.data.corpus.startswith("image:"):
            return None
        from harness.errors import DataError

        raise DataError(f"--data {data!r}: this checkpoint was trained on images ({cfg.data.corpus})",
                        fix=f"pass --data {cfg.data.corpus}:test, or leave --data unset")
    if not re.search(r":(" + "|".join(IMAGE_SPLITS) + r")$", spec):
        spec = f"{spec}:{cfg.data.valid_split}"
    return spec


def run_image_bpd(model, tokenizer, cfg, spec: str, *, plan, sampler: str, mc_samples: int, batch_size: int,
                  seed: int, max_rows: int | None, info) -> tuple[dict, dict]:
    """Bits per dimension of ``model`` on the image dataset ``spec``: (metrics, protocol).

    Every one of the H*W*ch tokens of an image is scored (the ARM through its start token), so
    ``bpd`` = nats per dimension / ln 2, with the family's kind (ARM exact, diffusion bound, Prime's
    token-joint estimator the paper objective) and the standard error of :func:`evaluate_nll`.
    """
    from harness.data.images import get_image_dataset
    from harness.errors import DataError
    from harness.records import Metric

    ds = get_image_dataset(spec[len("image:"):])
    if ds.levels != model.vocab_size or ds.seq_len != model.seq_len:
        raise DataError(
            f"{spec} ({ds.height}x{ds.width}x{ds.channels}, {ds.levels} levels) does not fit the model "
            f"(L={model.seq_len}, C={model.vocab_size})",
            fix="score the image dataset the checkpoint was trained on",
        )
    if model.family == "arm" and not getattr(model, "start_token", False):
        raise DataError("this ARM has no start token: its first pixel is unscored, so bits/dim would not be exact",
                        fix="train the ARM on images with model.start_token=true")
    ids = ds.tokens if max_rows is None else ds.tokens[:max_rows]
    mask = torch.ones_like(ids)
    results = _run_plan(model, ids, mask, plan, sampler=sampler, batch_size=batch_size, mc_samples=mc_samples,
                        seed=seed, info=info)
    metrics = {}
    for suffix, res in results.items():
        metrics[f"nll{suffix}"] = Metric(res.nll, res.stderr, res.kind, "nats/dim")
        metrics[f"bpd{suffix}"] = Metric(res.bits_per_token, res.stderr / math.log(2), res.kind, "bits/dim")
    first = results[plan[0][0]]
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
        "token_convention": "one image per row, all H*W*ch dimensions scored"
        + (" (the ARM conditions the first pixel on its start token)" if model.family == "arm" else ""),
        "tokens_scored": first.tokens,
        "batch_size": batch_size,
        "world_size": info.world,
        "mc_samples": mc_samples if model.family != "arm" else None,
        "time_sampler": None if model.family == "arm" else TIME_SAMPLERS[sampler] + f" [{sampler}]",
        "stderr_method": first.stderr_method,
        "schedule": model.hparams.get("schedule"),
        "positions": model.hparams.get("positions"),
        "estimators": {suffix or "nll": label for suffix, _, label in plan},
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
) -> dict:
    """Evaluate a checkpoint's perplexity (or bound) on a dataset and return a result record."""
    import time as _time
    from pathlib import Path

    from harness.data import get_corpus, get_packed, parse_corpus_split
    from harness.errors import DataError
    from harness.records import Metric, make_record, model_block

    from harness.evaluation import load_for_evaluation

    t0 = _time.time()
    info, model, tokenizer, cfg = load_for_evaluation(checkpoint, device)
    device = str(model.device)
    d = cfg.data
    image_spec = _image_spec(data, cfg)
    if image_spec is not None:
        family = model.family
        plan = _estimator_plan(family, estimator)
        sampler = time_sampler or getattr(model, "default_nll_sampler", "t")
        metrics, protocol = run_image_bpd(model, tokenizer, cfg, image_spec, plan=plan, sampler=sampler,
                                          mc_samples=mc_samples, batch_size=batch_size, seed=seed, max_rows=max_rows, info=info)
        if family == "prime":
            protocol.update(ell=model.ell, base=model.base, carry_over=model.carry_over)
        return make_record("ppl", model=model_block(Path(checkpoint), cfg), metrics=metrics, protocol=protocol,
                           seed=seed, device=device, wall_s=_time.time() - t0)
    spec = data or f"{d.corpus}:{d.valid_split}"
    L = seq_len or model.seq_len
    if L > model.seq_len:
        raise DataError(
            f"--seq-len {L} is longer than the model's sequence length {model.seq_len}",
            fix=f"use --seq-len <= {model.seq_len}",
        )
    from harness.data.zeroshot import resolve_dataset

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
    family = model.family
    plan = _estimator_plan(family, estimator)
    metrics: dict[str, Metric] = {}
    sampler = time_sampler or getattr(model, "default_nll_sampler", "t")
    results = _run_plan(model, ids, mask, plan, sampler=sampler, batch_size=batch_size, mc_samples=mc_samples,
                        seed=seed, info=info)
    for suffix, res in results.items():
        metrics[f"nll{suffix}"] = Metric(res.nll, res.stderr, res.kind, "nats/token")
        metrics[f"ppl{suffix}"] = Metric(res.ppl, res.ppl * res.stderr, res.kind, "perplexity")
    first = results[plan[0][0]]
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
        "token_convention": TOKEN_CONVENTION["arm" if family == "arm" else "diffusion"],
        "tokens_scored": first.tokens,
        "batch_size": batch_size,
        "world_size": info.world,
        "mc_samples": mc_samples if family != "arm" else None,
        "time_sampler": None if family == "arm" else TIME_SAMPLERS[sampler] + f" [{sampler}]",
        "stderr_method": first.stderr_method,
        "schedule": model.hparams.get("schedule"),
        "estimators": {suffix or "nll": label for suffix, _, label in plan},
    }
    if family == "prime":
        protocol.update(ell=model.ell, base=model.base, carry_over=model.carry_over)
    return make_record(
        "ppl",
        model=model_block(Path(checkpoint), cfg),
        metrics=metrics,
        protocol=protocol,
        seed=seed,
        device=device,
        wall_s=_time.time() - t0,
    )
