"""``primebench reproduce precision``: the float32 temperature effect, visible on a 2-core CPU.

Zheng et al. (2409.02908) report MDLM's unigram entropy falling from about 5.6 to 4.9 nats as the
steps grow from 100 to 10,000 with float32 draws, and flat with float64. The effect lives where a
token's share of a step, p(token) x (reveal probability), falls near 2^-24, so it needs a large
vocabulary: at the quickstart's C = 1000 float32 and float64 agree. This job therefore

1. trains a small MDLM and a small MDM-Prime (ell = 2) with the real GPT-2 BPE (V = 50257) on the
   embedded Wikipedia text (``precision/mdlm``, ``precision/prime``);
2. runs the precision audit on each: MDLM's joint draw (method ``mdlm-legacy``, MDLM's own race with
   its offsets) in float32 and float64 over a sweep of steps, the same seed in every run, and the
   two-stage draw as a control (its float32 run should match float64);
3. predicts each entropy from the exact law of the draw (:func:`harness.audit.gumbel.mdlm_joint_draw_law`,
   the grid model of ``torch.rand`` integrated over the T steps) for the model's *context-free*
   marginal: the denoiser's output on the all-masked sequence, averaged over positions. The
   prediction is the expected per-sample entropy of L tokens drawn from that law (Monte Carlo, with
   its standard error), and the population entropy of the law itself.

The prediction ignores context (a real sample conditions later tokens on earlier ones), so its
level is not the measured one; what it predicts is the *shape*: whether, and by how much, float32
falls below float64 as T grows. For Prime the token is drawn over C classes without the stay mass
(its reveal decision is a separate two-way draw), so the law predicts no effect at any T.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.audit.gumbel import entropy
from harness.audit.precision import all_masked_marginal, audit_checkpoint
from harness.config import load_config
from harness.errors import PrimebenchError
from harness.evaluation import load_for_evaluation
from harness.logging import console, progress
from harness.metrics.entropy import MeanEntropy
from harness.records import Metric, make_record
from harness.reproduce.report import write_precision_report
from harness.reproduce.stages import Stages

MODELS = ("mdlm", "prime")
AUDIT = dict(
    steps=[16, 64, 256], num_samples=8, dtypes=["float32", "float64"], method="mdlm-legacy", batch_size=8, seed=0
)
# samples per run: MDLM's float32 drop in marginal surprisal at T = 256 measured 0.22 +- 0.08 nats with 16 samples
# (per-sample standard deviation near 0.23 nats per dtype), so 48 samples put a drop of that size about 4.7 standard
# errors out; Prime (whose law predicts no drop) is the control and keeps 8
SAMPLES = {"mdlm": 48, "prime": 8}
STATISTICS = ("entropy", "surprisal")  # what each audit record measures (part of its stage config)
DRAWS = ("joint", "two-stage")
PREDICTION = dict(mc_samples=4000, seed=0)


@dataclass(frozen=True)
class PrecisionRecords:
    """The records of one ``reproduce precision`` run."""

    out: Path
    audits: dict[str, dict[str, Any]]  # "MODEL-DRAW" -> precision record
    predictions: dict[str, dict[str, Any]]  # MODEL -> precision-prediction record


def predict(model, *, steps: list[int], dtypes: list[str], seq_len: int, mc_samples: int, seed: int) -> dict[str, Any]:
    """A ``precision-prediction`` record: per (T, dtype) the law's entropy, the expected per-sample
    entropy of ``seq_len`` tokens drawn from it (Monte Carlo over ``mc_samples`` samples) and the expected
    marginal surprisal -log p(x) of a token drawn from it (exact for the law). Every number is labelled
    an estimate: the law is exact for the context-free model, which only approximates the real one. A model
    sampled in sub-tokens (Prime) draws its token over C classes with no stay mass, so its law is the
    grid law of the marginal at every T; the others follow MDLM's joint draw over C + 1 outcomes."""

    p = all_masked_marginal(model)
    surprisal = -p.log()
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for T in steps:
        for dtype in dtypes:
            law = model.context_free_token_law(p, steps=T, dtype=dtype)
            tokens = torch.multinomial(law, mc_samples * seq_len, replacement=True, generator=gen)
            metric = MeanEntropy(base="e")
            metric.update(tokens.view(mc_samples, seq_len))
            ent = metric.compute()
            rows.append(
                {
                    "steps": T,
                    "dtype": dtype,
                    "metrics": {
                        "entropy": Metric(
                            ent.mean, ent.stderr, "estimate", f"nats per sample of L = {seq_len} tokens"
                        ).to_dict(),
                        "surprisal": Metric(
                            float((law * surprisal).sum()),
                            None,
                            "estimate",
                            "nats per token, -log p(x) under the all-masked marginal, expected under the predicted law",
                        ).to_dict(),
                        "law_entropy": Metric(
                            float(entropy(law)), None, "estimate", "nats, entropy of the predicted token law"
                        ).to_dict(),
                    },
                }
            )
    protocol = {
        "prediction": "context-free: the denoiser's all-masked output averaged over positions, drawn with the "
        "exact law of the categorical draw in each dtype",
        "law": model.context_free_law,
        "marginal_entropy": float(entropy(p)),
        "mc_samples": mc_samples,
        "seq_len": seq_len,
        "seed": seed,
        "steps": list(steps),
        "dtypes": list(dtypes),
    }
    return make_record(
        "precision-prediction", model=None, metrics={}, protocol=protocol, seed=seed, extra={"rows": rows}
    )


def run_precision(
    out: Path,
    *,
    force: bool = False,
    steps: int | None = None,
    audit_steps: list[int] | None = None,
    samples: int | dict[str, int] | None = None,
) -> PrecisionRecords:
    """Train (or reuse) ``precision/mdlm`` and ``precision/prime`` under ``out``, audit and predict.

    ``steps`` overrides ``train.steps`` (a smoke run); ``audit_steps`` the sweep of T; ``samples``
    the samples per run: one number for every model, or ``{model: n}`` for some of them (the others keep
    :data:`SAMPLES`); the batch is at most ``AUDIT``'s."""

    out = Path(out)
    overrides = (
        [] if steps is None else [f"train.steps={steps}", f"train.eval_every={steps}", f"train.save_every={steps}"]
    )
    cfgs = {name: load_config(f"precision/{name}", overrides) for name in MODELS}
    audit = dict(AUDIT, steps=list(audit_steps or AUDIT["steps"]))
    given = {} if samples is None else samples if isinstance(samples, dict) else dict.fromkeys(MODELS, samples)
    if set(given) - set(MODELS) or any(int(n) < 1 for n in given.values()):
        raise PrimebenchError(
            f"samples {given} must be integers >= 1 for models among {', '.join(MODELS)}",
            fix="pass e.g. samples={'mdlm': 48} (CLI: --samples mdlm=48)",
        )
    per_model = {**SAMPLES, **given}
    log = console().log
    audits, predictions = {}, {}
    with progress() as bar:
        stages = Stages(out, force=force, bar=bar, log=log)
        stages.task = bar.add_task(
            "reproduce precision", total=len(MODELS) * (2 + len(DRAWS)), loss=float("nan"), tps=0.0
        )
        for name, cfg in cfgs.items():
            stages.train(name, cfg)
        for name, cfg in cfgs.items():
            base = {"checkpoint": name, "train": cfg.to_dict()}
            n = int(per_model[name])
            for draw in DRAWS:
                kw = dict(
                    audit, draw=draw, controls=draw == "joint", num_samples=n, batch_size=min(n, AUDIT["batch_size"])
                )
                config = dict(base, **kw, statistics=list(STATISTICS))
                audits[f"{name}-{draw}"] = stages.record(
                    f"precision-{name}-{draw}",
                    config,
                    lambda: audit_checkpoint(out / name, **kw, sampler=None, entropy_base="e", log=log).record,
                )
            pred_kw = dict(PREDICTION, steps=audit["steps"], dtypes=audit["dtypes"])
            pred_config = dict(base, **pred_kw, statistics=["entropy", "surprisal", "law_entropy"])

            def make_prediction():
                _, model, _, _ = load_for_evaluation(out / name, "cpu")
                record = predict(model, seq_len=cfg.data.seq_len, **pred_kw)
                record["model"] = audits[f"{name}-joint"]["model"]
                return record

            predictions[name] = stages.record(f"prediction-{name}", pred_config, make_prediction)
    result = PrecisionRecords(out=out, audits=audits, predictions=predictions)
    write_precision_report(result)
    return result


__all__ = [
    "AUDIT",
    "DRAWS",
    "MODELS",
    "PREDICTION",
    "SAMPLES",
    "STATISTICS",
    "PrecisionRecords",
    "predict",
    "run_precision",
]
