"""Zero-shot evaluation through lm-evaluation-harness, fully offline for the local tasks.

* :mod:`harness.lmeval.adapter`: :class:`~harness.lmeval.adapter.PrimebenchLM`, one lm-eval
  ``LM`` for every family (exact log-likelihoods for the ARM, Monte-Carlo bounds otherwise);
* :mod:`harness.lmeval.tasks`: the local tasks ``wiki_rolling`` and ``wiki_lastword`` and the
  loading of any lm-eval registry task;
* :func:`run_zeroshot` (here): ``lm_eval.simple_evaluate`` with the adapter, turned into a
  ``zeroshot`` result record (its view is :func:`harness.views.render_zeroshot`).

Metric kinds in the record: every number of an ARM is ``exact`` (for tasks scored by
log-likelihood; generated text is ``estimate``). For a diffusion family, perplexities and bits per
byte come from lower bounds on log-likelihoods, so they are upper bounds (``bound``); accuracies
from the one-pass greedy check, and everything else, are ``estimate``.

Nothing here imports lm-eval or torch at import time.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from harness.errors import PrimebenchError
from harness.evaluation import load_for_evaluation
from harness.lmeval.adapter import PrimebenchLM
from harness.lmeval.tasks import load_tasks, parse_tasks
from harness.records import Metric, make_record, model_block
from harness.settings import changed

#: metrics that are monotone in the log-likelihood (a bound on it makes them bounds), with units
BOUND_METRICS = {
    "perplexity": "perplexity",
    "word_perplexity": "perplexity per word",
    "byte_perplexity": "perplexity per byte",
    "bits_per_byte": "bits/byte",
}
LIKELIHOOD_OUTPUTS = ("loglikelihood", "loglikelihood_rolling", "multiple_choice")


def _metric_kind(kind: str, metric: str, output_types: set[str]) -> str:
    if not output_types or not output_types <= set(LIKELIHOOD_OUTPUTS):
        return "estimate"  # sampled text, or a group we cannot vouch for
    if kind == "exact":
        return "exact"
    return "bound" if metric in BOUND_METRICS else "estimate"


def _units(metric: str) -> str:
    if metric in BOUND_METRICS:
        return BOUND_METRICS[metric]
    return "fraction" if metric.startswith(("acc", "exact_match")) else metric


def metrics_from_results(results: dict[str, Any], *, kind: str, output_types: dict[str, str]) -> dict:
    """lm-eval's ``results`` -> ``{"task/metric": Metric}`` (a filter other than ``none`` is kept as ``@filter``)."""

    groups = results.get("group_subtasks", {})
    out: dict[str, Metric] = {}
    for task, row in results["results"].items():
        types = {output_types[t] for t in groups.get(task, [task]) if t in output_types}
        for key, value in row.items():
            if "," not in key or "_stderr," in key or not isinstance(value, (int, float)):
                continue
            metric, filt = key.split(",", 1)
            se = row.get(f"{metric}_stderr,{filt}")
            se = float(se) if isinstance(se, (int, float)) and math.isfinite(se) else None
            metric_kind = _metric_kind(kind, metric, types)
            if metric_kind == "exact" and se is None:
                se = 0.0
            name = f"{task}/{metric}" + ("" if filt == "none" else f"@{filt}")
            out[name] = Metric(float(value), se, metric_kind, _units(metric))
    return out


@dataclass(frozen=True)
class ZeroShotSettings:
    """Every setting of a zero-shot run (:func:`run_zeroshot`), with the defaults of ``eval zeroshot``.

    ``tasks`` (comma-separated or a list); ``mc_samples`` per request, ``time_sampler`` (None: the
    family's) and rows in batches of ``batch_size`` from ``seed``; ``max_rows``: the first documents
    of each task (lm-eval's ``limit``; None: all); ``sampler``, ``steps`` and ``draw`` for generation
    tasks; lm-eval's ``bootstrap_iters``; ``device``; Prime's ``carry_over`` (None: as trained) and
    the ``ema`` weights, both recorded.
    """

    tasks: str | tuple[str, ...] | list[str] = "wiki_rolling,wiki_lastword"
    mc_samples: int = 32
    batch_size: int = 16
    max_rows: int | None = None
    seed: int = 0
    time_sampler: str | None = None
    sampler: str | None = None
    steps: int | None = None
    bootstrap_iters: int = 0
    device: str = "cpu"
    carry_over: bool | None = None
    ema: bool = True
    draw: str = "two-stage"


def _settings(settings: ZeroShotSettings | None, changes: dict[str, Any]) -> ZeroShotSettings:
    limit = changes.pop("limit", None)
    if limit is not None:
        warnings.warn("run_zeroshot(limit=) is deprecated; use max_rows=", DeprecationWarning, stacklevel=3)
        if changes.get("max_rows") is None:
            changes["max_rows"] = limit
    s = changed(settings or ZeroShotSettings(), changes, "zero-shot")
    if s.max_rows is not None and s.max_rows < 1:
        raise PrimebenchError(
            f"--max-rows must be a positive number of documents, got {s.max_rows}", fix="e.g. --max-rows 50"
        )
    return s


def _output_types(loaded: dict) -> dict[str, str]:
    """Every task's lm-eval output type (groups expanded into their tasks)."""
    output_types = {}
    for spec in loaded["specs"]:
        for task in spec.get_all_tasks() if hasattr(spec, "get_all_tasks") else [spec]:
            output_types[task.task_name] = task.get_config("output_type")
    return output_types


def _protocol(s: ZeroShotSettings, names, results: dict, local: dict, output_types: dict, model, tokenizer, lm):

    protocol = {
        "tasks": names,
        "max_rows": s.max_rows,
        "documents": {t: n.get("effective") for t, n in results.get("n-samples", {}).items()},
        "task_data": {n: t.protocol() for n, t in local.items()},
        "task_versions": results.get("versions", {}),
        "output_types": output_types,
        "lm_eval_version": metadata.version("lm_eval"),
        "bootstrap_iters": s.bootstrap_iters,
        "seq_len": model.seq_len,
        "tokenizer": tokenizer.spec,
        "batch_size": s.batch_size,
        "estimator": lm.describe(),
        "mc_samples": s.mc_samples if model.uses_time_sampler else None,
        "adapter": lm.stats.to_dict(),
        "rolling": lm.rolling_description(),
        "truncation": "context cut from the left (BOS kept); a continuation that cannot fit is an error",
        "bos": "every row starts with the tokenizer's BOS, given as context, never masked or scored",
        "weights": "EMA" if s.ema else "raw",
        **model.protocol(),
    }
    if lm.stats.requests["generate_until"]:
        protocol["generation"] = {
            "sampler": s.sampler or "family default",
            "steps": s.steps or "max_gen_toks",
            "temperature": lm.temperature,
            "dtype": lm.dtype,
            "draw": lm.draw,
        }
    return protocol


def run_zeroshot(checkpoint, settings: ZeroShotSettings | None = None, **changes) -> dict:
    """Evaluate a checkpoint on lm-eval tasks and return a ``zeroshot`` result record.

    ``settings``: a :class:`ZeroShotSettings` (default: ``eval zeroshot``'s defaults), with
    ``changes`` by field name on top; ``limit`` is the old spelling of ``max_rows``, accepted with a
    deprecation warning for one release. Every row starts with the tokenizer's BOS, given as context
    and never scored (what ``eval ppl --ignore-bos`` does for a whole row)."""
    # deferred: lm-eval is slow to import and only zero-shot runs need it
    import lm_eval  # the optional zero-shot dependency, loaded only by this evaluation

    s = _settings(settings, changes)
    t0 = time.time()
    names = parse_tasks(s.tasks)
    _, model, tokenizer, cfg = load_for_evaluation(checkpoint, s.device, carry_over=s.carry_over, ema=s.ema)
    knobs = dict(mc_samples=s.mc_samples, batch_size=s.batch_size, seed=s.seed, time_sampler=s.time_sampler)
    lm = PrimebenchLM(model, tokenizer, **knobs, sampler=s.sampler, steps=s.steps, draw=s.draw)
    loaded, local = load_tasks(names)  # after the checkpoint: a bad checkpoint fails before any download
    output_types = _output_types(loaded)
    seeds = dict(random_seed=s.seed, numpy_random_seed=s.seed, torch_random_seed=s.seed, fewshot_random_seed=s.seed)
    results = lm_eval.simple_evaluate(
        model=lm,
        tasks=loaded["specs"],
        task_manager=loaded["manager"],
        limit=s.max_rows,
        bootstrap_iters=s.bootstrap_iters,
        log_samples=False,
        **seeds,
    )
    return make_record(
        "zeroshot",
        model=model_block(Path(checkpoint), cfg),
        metrics=metrics_from_results(results, kind=lm.kind, output_types=output_types),
        protocol=_protocol(s, names, results, local, output_types, model, tokenizer, lm),
        seed=s.seed,
        device=s.device,
        wall_s=time.time() - t0,
    )


__all__ = ["BOUND_METRICS", "ZeroShotSettings", "metrics_from_results", "run_zeroshot"]
