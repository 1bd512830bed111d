"""``primebench reproduce small``: the four families compared at CPU scale (sized to finish in about 90
minutes on a 2-core CPU; the measured wall time is in results/small/README.md), with the valid bound
and the paper objective side by side.

ARM, BD3-LM (blocks of 8), MDLM, the masked model, MDM-Prime (ell = 2, 4) on its paper objective and
MDM-Prime trained on its valid bound (ell = 2, 4, and binary with index shuffling; ``primebin`` is the
binary model on the paper objective) with the ``small/`` configs (one backbone,
tokenizer, data and token budget), then: perplexity with both estimators and K Monte-Carlo samples
(exact / valid bound / paper objective), Gen PPL with entropy in float64 under the offline judge,
zero-shot on the local tasks, and the idle steps measured on the real models' samples (NFE of the
cached two-stage sampler against T) beside the analytic ratio. The report states, per ell, the gap
between Prime's paper objective and its valid bound with its standard error (same corruptions, so
the gap's standard error is given conservatively, sqrt(se_bound^2 + se_objective^2), which holds
whenever the two estimates are not negatively correlated; they share every corruption, so the
paired error is smaller).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config import load_config, preset_names
from harness.errors import InputError
from harness.judges import check_judge_spec
from harness.logging import console, progress
from harness.records import training_seed
from harness.reproduce.quickstart import text_stages
from harness.reproduce.report import write_small_report
from harness.reproduce.seeds import base_name, seed_name, seed_overrides
from harness.reproduce.stages import Stages

#: the first models of the job, in the order they were added to it
FIRST_MODELS = (
    "arm",
    "bd3lm",
    "mdlm",
    "masked",
    "prime2",
    "prime4",
    "prime2-bound",
    "prime4-bound",
    "primebin",
    "primebin-bound",
)


def _job_models() -> tuple[str, ...]:
    """:data:`FIRST_MODELS`, then every other ``small/`` preset by name: a config placed in
    ``harness/configs/small/`` joins the job without an edit here."""

    later = sorted(
        n.removeprefix("small/") for n in preset_names() if n.startswith("small/") and n[6:] not in FIRST_MODELS
    )
    return FIRST_MODELS + tuple(later)


MODELS = _job_models()
PPL = dict(estimator="both", batch_size=32, mc_samples=4, seed=0)
GENPPL = dict(samples=32, batch_size=16, method="gumbel", seed=0)
ZEROSHOT = dict(tasks=["wiki_rolling", "wiki_lastword"], mc_samples=8, batch_size=32, max_rows=None, seed=0)


@dataclass(frozen=True)
class SmallRecords:
    out: Path
    ppl: list[dict[str, Any]]
    genppl: list[dict[str, Any]]
    zeroshot: list[dict[str, Any]]
    seeds: int = 1


def small_configs(seeds: int = 1, steps: int | None = None, first_seed: int = 0) -> dict[str, Any]:
    """Stage name -> config of every model and seed ``first_seed .. first_seed + seeds - 1``, in seed
    order: seed 0 is the preset as it is (stage ``NAME``), seed s > 0 is ``NAME-seed{s}`` with
    ``seed=s``; ``steps`` overrides every model's ``train.steps``."""

    if seeds < 1:
        raise InputError(f"seeds must be at least 1, got {seeds}")
    if first_seed < 0:
        raise InputError(f"the first training seed must be >= 0, got {first_seed}")
    overrides = (
        [] if steps is None else [f"train.steps={steps}", f"train.eval_every={steps}", f"train.save_every={steps}"]
    )
    return {
        seed_name(name, seed): load_config(f"small/{name}", overrides + seed_overrides(seed))
        for seed in range(first_seed, first_seed + seeds)
        for name in MODELS
    }


def run_small(
    out: Path,
    *,
    force: bool = False,
    judge: str = "smollm2",
    steps: int | None = None,
    max_rows: int | None = None,
    samples: int = GENPPL["samples"],
    seeds: int = 1,
    models=None,
    first_seed: int = 0,
) -> SmallRecords:
    """Train (or reuse) the ``small/`` models under ``out`` and compute (or reuse) every record.

    ``seeds``: training seeds per family, ``first_seed .. first_seed + seeds - 1``
    (:mod:`harness.reproduce.seeds`); seed 0 is the one-seed run's stages, so adding seeds to a
    finished run trains only the new ones. Every seed is evaluated with the same settings and
    evaluation seed. ``first_seed`` > 0 trains later seeds without seed 0's checkpoints: the
    records of the seeds not run that are already in ``OUT/records`` are read back into the tables.

    ``models``: the job's models to train and evaluate (default: all of :data:`MODELS`); the records
    of its other models already in ``OUT/records`` (an earlier run of the job, kept whole) are read
    back into the tables (:func:`kept_records`)."""

    check_judge_spec(judge)
    chosen = tuple(MODELS if models is None else models)
    unknown = sorted(set(chosen) - set(MODELS))
    if unknown or not chosen:
        raise InputError(f"unknown models {unknown} for reproduce small", fix=f"choose from {', '.join(MODELS)}")
    out = Path(out)
    cfgs = small_configs(seeds, steps, first_seed)
    zeroshot = dict(ZEROSHOT, max_rows=max_rows)
    with progress() as bar:
        stages = Stages(out, force=force, bar=bar, log=console().log)
        stages.task = bar.add_task("reproduce small", total=len(chosen) * seeds * 4, loss=float("nan"), tps=0.0)
        ppl, genppl, zs = [], [], []
        for seed in range(
            first_seed, first_seed + seeds
        ):  # each seed trained and evaluated before the next: a stopped run keeps them
            group = {seed_name(name, seed): cfgs[seed_name(name, seed)] for name in chosen}
            for name, cfg in group.items():
                stages.train(name, cfg)
            records = text_stages(
                stages,
                group,
                tuple(group),
                ppl=dict(PPL, max_rows=max_rows),
                genppl=dict(GENPPL, samples=samples, batch_size=min(GENPPL["batch_size"], samples)),
                dtypes=("float64",),
                zeroshot=zeroshot,
                judge=judge,
            )
            for into, got in zip((ppl, genppl, zs), records):
                into.extend(got)
    ran = {(cfg.name, int(cfg.seed)) for name, cfg in cfgs.items() if base_name(name) in chosen}
    names = list(dict.fromkeys(cfg.name for cfg in cfgs.values()))  # in MODELS order
    ppl, genppl, zs = (
        got + [r for r in kept_records(out, kind, names) if _seed_key(r) not in ran]
        for got, kind in zip((ppl, genppl, zs), KINDS)
    )
    order = {name: i for i, name in enumerate(names)}  # models in MODELS order, each model's seeds in order
    ppl, genppl, zs = (
        sorted(records, key=lambda r: (order[_seed_key(r)[0]], _seed_key(r)[1])) for records in (ppl, genppl, zs)
    )
    result = SmallRecords(out=out, ppl=ppl, genppl=genppl, zeroshot=zs, seeds=len({_seed_key(r)[1] for r in ppl}))
    write_small_report(result)
    return result


def _seed_key(record: dict[str, Any]) -> tuple[str, int]:
    """(config name, training seed) of a record."""

    return record["model"].get("name"), training_seed(record["model"])


#: the evaluations of the job, in the order of SmallRecords' lists
KINDS = ("ppl", "genppl", "zeroshot")


def kept_records(out: Path, kind: str, names) -> list[dict[str, Any]]:
    """The ``kind`` records (``ppl``, ``genppl``, ``zeroshot``; Gen PPL in float64 only) in
    ``OUT/records`` of the models named ``names`` (config names, e.g. ``small-arm``), one per model
    and training seed (the newest file when there are several), in name and seed order. Unreadable
    files are skipped."""

    found: dict[tuple[str, int], tuple[float, dict[str, Any]]] = {}
    for path in sorted((Path(out) / "records").glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or record.get("evaluation") != kind:
            continue
        name = record.get("model", {}).get("name")
        if name not in names or (kind == "genppl" and record.get("protocol", {}).get("dtype") != "float64"):
            continue
        key = _seed_key(record)
        stamp = path.stat().st_mtime
        if key not in found or stamp > found[key][0]:
            found[key] = (stamp, record)
    return [found[key][1] for key in sorted(found)]


__all__ = ["GENPPL", "KINDS", "MODELS", "kept_records", "PPL", "SmallRecords", "ZEROSHOT", "run_small", "small_configs"]
