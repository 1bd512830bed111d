"""Perplexity over a packed dataset, accumulated in float64.

The per-token NLL is total nats / total scored tokens over the whole set (MDLM's token-weighted
convention), never a mean of per-sequence perplexities; the last partial batch is scored too.
Its standard error combines the per-sequence Monte-Carlo standard errors (zero when exact).
``docs/ppl-trace.md`` follows ``primebench eval ppl`` from the command to the record, hop by hop.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch

from harness.data import get_packed
from harness.data.datasets import resolve_dataset
from harness.data.images import get_image_dataset, is_image_spec, parse_image_spec
from harness.diffusion import time_sampler_text
from harness.distributed import batch_seed
from harness.errors import DataError, InputError
from harness.evaluation import load_for_evaluation
from harness.evaluation.duel import DUEL, Policy, check_model, duel_nll
from harness.evaluation.references import text_references, warn_if_not_learned
from harness.metrics.nll import NLLAccumulator, PerplexityResult
from harness.models import families_offering
from harness.models.base import Estimator
from harness.records import Metric, make_record, model_block
from harness.resources import check_inference_fits
from harness.settings import changed


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
    policy: Policy | None = None,
    passes: list[torch.Tensor] | None = None,
) -> list[PerplexityResult]:
    """Score every row of ``input_ids`` (N, L) with ``model.nll`` and reduce token-weighted: one
    :class:`~harness.metrics.nll.PerplexityResult` per name of ``estimators`` (None: the family's
    default estimator alone), all from the same corruptions and forward passes.

    ``attention_mask`` (N, L): the real tokens. ``corruptible`` (N, L) bool: the positions scored
    (and, for diffusion families, the only ones ever masked); the others are given context.
    ``time_sampler`` and ``num_samples`` go to ``model.nll`` (see ``model.time_sampler``). The name
    ``duel`` scores DUEL's exact likelihood under ``policy`` (:mod:`harness.evaluation.duel`) beside
    the family's own estimators; the forward passes it took per row are appended to ``passes``. Batches
    are fixed slices of ``batch_size`` rows, each with its own seeded generator, and batch b is
    scored by rank ``b % world``; the reduced result is therefore the same for any number of ranks
    (up to the order of float64 sums).
    """

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
        x = input_ids[rows].to(device)
        given = dict(
            attention_mask=None if attention_mask is None else attention_mask[rows].to(device),
            corruptible=None if corruptible is None else corruptible[rows].to(device),
        )
        results = {}
        family = [n for n in names if n != DUEL.name]
        if family:
            results = dict(
                zip(
                    family,
                    model.nll(
                        x,
                        estimators=family,
                        num_samples=num_samples,
                        generator=torch.Generator(device=device).manual_seed(batch_seed(seed, index)),
                        time_sampler=time_sampler,
                        **given,
                    ),
                )
            )
        if DUEL.name in names:
            results[DUEL.name], used = duel_nll(model, x, policy or Policy(), **given)
            if passes is not None:
                passes.append(used.cpu())
        for acc, name in zip(accs, names):
            acc.update(results[name])
    for acc in accs:
        acc.all_reduce()  # a no-op in one process
    return [acc.compute() for acc in accs]


def estimator_plan(model, estimator: str) -> list[Estimator]:
    """The family's estimators that ``--estimator`` asks for: default (the first), both (all), or one by name."""

    if estimator in ("default", "both"):
        return list(model.estimators[: 1 if estimator == "default" else None])
    if estimator == DUEL.name:
        check_model(model)
        return [DUEL]
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


@dataclass(frozen=True)
class PPLSettings:
    """Every setting of a perplexity run (:func:`run_ppl`), with the defaults of ``eval ppl``.

    ``data``: a corpus spec (``NAME[:SPLIT]``) or ``image:NAME[:SPLIT]`` (None: the checkpoint's
    validation split); ``seq_len`` (None: the model's), ``wrap``, ``eos_between_docs`` and
    ``remainder`` (None: as trained) pack the text; ``estimator`` (``default``, ``both`` or a name),
    ``time_sampler`` (None: the family's) and ``mc_samples`` choose the estimate (``estimator="duel"``:
    DUEL's exact likelihood under the unmasking ``policy``, default confidence, revealing
    ``policy_tokens`` per step, default 1, inside blocks of ``policy_block``, default the whole row;
    :mod:`harness.evaluation.duel`); rows are scored in
    batches of ``batch_size`` from ``seed``, the first ``max_rows`` only when set; ``ignore_bos``:
    the first position of every row is context, never masked or scored (BD3-LMs); ``device``;
    Prime's ``carry_over`` (None: as trained); the ``ema`` weights; ``references``: also score the
    unigram and bigram references (:mod:`harness.metrics.references`) on the same tokens (text only).
    """

    data: str | None = None
    seq_len: int | None = None
    wrap: bool | None = None
    eos_between_docs: bool | None = None
    remainder: str | None = None
    mc_samples: int = 1
    batch_size: int = 16
    estimator: str = "default"
    time_sampler: str | None = None
    seed: int = 0
    max_rows: int | None = None
    device: str = "cpu"
    ignore_bos: bool = False
    carry_over: bool | None = None
    ema: bool = True
    references: bool = True
    policy: str | None = None
    policy_tokens: int | None = None
    policy_block: int | None = None

    def duel_policy(self) -> Policy | None:
        """The unmasking policy of ``estimator="duel"`` (None for any other estimator); the policy
        settings without that estimator, or Monte-Carlo samples with it, are refused."""
        given = {
            k: v
            for k, v in (
                ("--policy", self.policy),
                ("--policy-tokens", self.policy_tokens),
                ("--policy-block", self.policy_block),
            )
            if v is not None
        }
        if self.estimator != DUEL.name:
            if given:
                raise InputError(
                    f"{', '.join(given)} set the unmasking policy of DUEL's estimator",
                    fix="add --estimator duel, or drop them",
                )
            return None
        if self.mc_samples != 1:
            raise InputError(
                f"--mc-samples {self.mc_samples}: DUEL's likelihood is exact, it draws nothing",
                fix="drop --mc-samples",
            )
        return Policy(self.policy or "confidence", self.policy_tokens or 1, self.policy_block).check()


class Scored(NamedTuple):
    """What :func:`score_rows` returns: the ``metrics`` by name, the ``protocol`` fields shared by
    text and image records, and the ``kinds`` of the estimators scored (by metric suffix)."""

    metrics: dict[str, Metric]
    protocol: dict[str, Any]
    kinds: dict[str, str]


#: the metric names and units of a text and an image record: (nll units, second metric, its units)
TEXT_UNITS = ("nats/token", "ppl", "perplexity")
IMAGE_UNITS = ("nats/dim", "bpd", "bits/dim")


def _metrics_of(plan: list[Estimator], results: list[PerplexityResult], units: tuple[str, str, str]) -> dict:
    metrics: dict[str, Metric] = {}
    for est, res in zip(plan, results):
        metrics[f"nll{est.suffix}"] = Metric(res.nll, res.stderr, res.kind, units[0])
        if units[1] == "bpd":  # nats / ln 2, not exp
            metrics[f"bpd{est.suffix}"] = Metric(res.bits_per_token, res.stderr / math.log(2), res.kind, units[2])
        else:
            metrics[f"ppl{est.suffix}"] = Metric(res.ppl, res.ppl * res.stderr, res.kind, units[2])
    return metrics


def score_rows(model, ids: torch.Tensor, mask: torch.Tensor, settings: PPLSettings, info, units=TEXT_UNITS) -> Scored:
    """Score every row of ``ids`` (N, L) (real tokens ``mask`` (N, L)) with each estimator that
    ``settings.estimator`` plans (:func:`estimator_plan`), all in one :func:`evaluate_nll` pass.

    ``info``: the rank and world of :func:`harness.distributed.setup`. ``units``: :data:`TEXT_UNITS`
    or :data:`IMAGE_UNITS`, the metric names and units.
    """

    policy = settings.duel_policy()
    plan = estimator_plan(model, settings.estimator)
    drawn = any(est is not DUEL for est in plan)
    sampler = model.time_sampler(settings.time_sampler) if drawn else None
    passes: list[torch.Tensor] = []
    results = evaluate_nll(
        model,
        ids,
        mask,
        estimators=[est.name for est in plan],
        time_sampler=sampler,
        batch_size=settings.batch_size,
        num_samples=settings.mc_samples,
        seed=settings.seed,
        corruptible=_first_given(mask) if settings.ignore_bos else None,
        rank=info.rank,
        world=info.world,
        policy=policy,
        passes=passes,
    )
    first = results[0]
    protocol = {
        "tokens_scored": first.tokens,
        "batch_size": settings.batch_size,
        "world_size": info.world,
        "mc_samples": settings.mc_samples if model.uses_time_sampler and drawn else None,
        "time_sampler": None
        if sampler is None
        else time_sampler_text(sampler, model.nelbo_block_size) + f" [{sampler}]",
        "stderr_method": first.stderr_method,
        "schedule": model.hparams.get("schedule"),
        "ignore_bos": bool(settings.ignore_bos),
    }
    if policy is not None:
        used = torch.cat(passes).double() if passes else torch.zeros(1)
        protocol["duel"] = {
            **policy.protocol(model),
            "forward_passes_per_row": float(used.mean()),
            "t_input": "fraction of the row still masked" if model.time_conditioning else None,
        }
    return Scored(_metrics_of(plan, results, units), protocol, {est.suffix or "nll": est.kind for est in plan})


def _image_spec(data: str | None, cfg) -> str | None:
    """The ``image:NAME[:SPLIT]`` spec to score, with the checkpoint's validation split by default; None for text."""

    spec = data or f"{cfg.data.corpus}:{cfg.data.valid_split}"
    if not is_image_spec(spec):
        if data is None or not is_image_spec(cfg.data.corpus):
            return None
        raise DataError(
            f"--data {data!r}: this checkpoint was trained on images ({cfg.data.corpus})",
            fix=f"pass --data {cfg.data.corpus}:test, or leave --data unset",
        )
    return str(parse_image_spec(spec).with_default_split(cfg.data.valid_split))


def run_image_bpd(model, tokenizer, spec: str, settings: PPLSettings, info) -> tuple[dict, dict]:
    """Bits per dimension of ``model`` on the image dataset ``spec``: (metrics, protocol).

    Every one of the H*W*ch tokens of an image is scored (the ARM through its start token), so
    ``bpd`` = nats per dimension / ln 2, with the family's kind (ARM exact, diffusion bound, Prime's
    token-joint estimator the paper objective) and the standard error of :func:`evaluate_nll`.
    """

    if settings.ignore_bos:
        raise DataError(
            "--ignore-bos applies to text rows ([BOS] chunk [EOS]); image rows have no BOS",
            fix="drop --ignore-bos for image data",
        )
    ds = get_image_dataset(spec[len("image:") :])
    if ds.levels != model.vocab_size or ds.seq_len != model.seq_len:
        raise DataError(
            f"{spec} ({ds.height}x{ds.width}x{ds.channels}, {ds.levels} levels) does not fit the model "
            f"(L={model.seq_len}, C={model.vocab_size})",
            fix="score the image dataset the checkpoint was trained on",
        )
    if model.image_unscored_first_pixel:
        raise DataError(model.image_unscored_first_pixel, fix="train the ARM on images with model.start_token=true")
    ids = ds.tokens if settings.max_rows is None else ds.tokens[: settings.max_rows]
    metrics, shared, kinds = score_rows(model, ids, torch.ones_like(ids), settings, info, IMAGE_UNITS)
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
        "max_rows": settings.max_rows,
        "tokenizer": tokenizer.spec,
        "seq_len": ds.seq_len,
        "token_convention": "one image per row, all H*W*ch dimensions scored" + model.image_token_note,
        **shared,
        "positions": model.hparams.get("positions"),
        "estimators": kinds,
    }
    return metrics, protocol


class TextRows(NamedTuple):
    """The packed rows of a text evaluation: the dataset, its ``ids`` and ``mask`` (N, L), the
    packing settings and the packer's protocol, and L."""

    dataset: Any
    ids: torch.Tensor
    mask: torch.Tensor
    packing: dict[str, Any]
    packed_protocol: dict[str, Any]
    seq_len: int


def text_rows(model, tokenizer, cfg, settings: PPLSettings) -> TextRows:
    """Resolve ``settings.data`` (default the checkpoint's validation split) and pack it as the
    settings say (each unset packing setting as the checkpoint was trained)."""

    d = cfg.data
    L = settings.seq_len or model.seq_len
    if L > model.seq_len:
        raise DataError(
            f"--seq-len {L} is longer than the model's sequence length {model.seq_len}",
            fix=f"use --seq-len <= {model.seq_len}",
        )
    dataset = resolve_dataset(settings.data or f"{d.corpus}:{d.valid_split}", default_split=d.valid_split)
    eos = settings.eos_between_docs
    if eos is None:
        eos = dataset.eos_between_docs if dataset.eos_between_docs is not None else d.eos_between_docs
    packing = dict(
        wrap=d.wrap if settings.wrap is None else settings.wrap,
        eos_between_docs=eos,
        remainder=settings.remainder or d.remainder,
    )
    packed = get_packed(dataset.corpus, dataset.split, tokenizer=tokenizer, seq_len=L, **packing)
    ids, mask = packed.input_ids, packed.attention_mask
    if settings.max_rows is not None:
        ids, mask = ids[: settings.max_rows], mask[: settings.max_rows]
    return TextRows(dataset, ids, mask, packing, packed.protocol, L)


def run_text_ppl(model, tokenizer, cfg, settings: PPLSettings, info) -> tuple[dict, dict, dict | None]:
    """Perplexity of ``model`` on text: (metrics, protocol, references block or None)."""

    rows = text_rows(model, tokenizer, cfg, settings)
    metrics, shared, kinds = score_rows(model, rows.ids, rows.mask, settings, info)
    protocol = {
        "dataset": rows.dataset.name,
        "data": settings.data or f"{cfg.data.corpus}:{cfg.data.valid_split}",
        "split": rows.dataset.split,
        "detokenizer": rows.dataset.detokenizer,
        "packing": rows.packed_protocol,
        "rows_scored": int(rows.ids.shape[0]),
        "max_rows": settings.max_rows,
        "tokenizer": tokenizer.spec,
        "seq_len": rows.seq_len,
        "token_convention": model.token_convention,
        **shared,
        "estimators": kinds,
    }
    if not settings.references:
        return metrics, protocol, None
    scored = model.scored_positions(rows.ids, rows.mask, _first_given(rows.mask) if settings.ignore_bos else None)
    refs = text_references(
        rows.dataset,
        cfg,
        tokenizer,
        rows.ids,
        rows.mask,
        scored,
        seq_len=rows.seq_len,
        packing=rows.packing,
        tokens_scored=shared["tokens_scored"],
    )
    return metrics, protocol, refs


def ppl_settings(settings: PPLSettings | None = None, **changes) -> PPLSettings:
    """``settings`` (default :class:`PPLSettings`) with ``changes`` by field name; an unknown name is
    an error naming the fields."""
    return changed(settings or PPLSettings(), changes, "perplexity")


def run_ppl(checkpoint, settings: PPLSettings | None = None, **changes) -> dict:
    """Evaluate a checkpoint's perplexity (or bound) on a dataset and return a result record.

    ``settings``: a :class:`PPLSettings` (default: ``eval ppl``'s defaults), with ``changes`` by field
    name on top (``run_ppl(ckpt, max_rows=8, estimator="both")``)."""

    s = ppl_settings(settings, **changes)
    t0 = time.time()
    info, model, tokenizer, cfg = load_for_evaluation(checkpoint, s.device, carry_over=s.carry_over, ema=s.ema)
    image_spec = _image_spec(s.data, cfg)
    if image_spec is not None:
        (metrics, protocol), refs = run_image_bpd(model, tokenizer, image_spec, s, info), None
    else:
        metrics, protocol, refs = run_text_ppl(model, tokenizer, cfg, s, info)
    protocol.update(model.protocol(), weights="EMA" if s.ema else "raw")
    record = make_record(
        "ppl",
        model=model_block(Path(checkpoint), cfg),
        metrics=metrics,
        protocol=protocol,
        seed=s.seed,
        device=str(model.device),
        wall_s=time.time() - t0,
        extra=None if refs is None else {"references": refs},
    )
    warn_if_not_learned(record)
    return record


def _first_given(mask: torch.Tensor) -> torch.Tensor:
    """``corruptible`` of ``--ignore-bos``: every real token but the first of each row."""
    corruptible = mask.bool().clone()
    corruptible[:, 0] = False
    return corruptible
