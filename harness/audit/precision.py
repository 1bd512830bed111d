"""The fp32-versus-fp64 sampling audit (Zheng et al. 2409.02908 Sec. 5.2-5.3, Table 2).

MDLM's code draws its categorical in float32; the float32 uniforms cap the Gumbel noise at
M = 16.64, which lowers the effective temperature and, in the ancestral sampler whose categorical
includes the "stay masked" mass, makes unmasking prioritised. The symptom is a unigram entropy that
falls as the number of steps grows (5.6 -> 4.9 nats from 100 to 10,000 steps for MDLM on OWT),
with a Gen PPL that improves for the wrong reason. In float64 the entropy stays flat.

The audit runs the *same* sampler with the *same* seed in each dtype, for each number of steps,
and reports the mean per-sample unigram entropy (model token ids; nats or bits) with its standard
error, the mean NFE, idle steps and wall time per sample. For the masked families it also reports
the mean *marginal surprisal* of the sampled tokens, -log p(x) under the model's own context-free
marginal (the denoiser's output on the all-masked sequence, averaged over positions): a statistic
of the whole token distribution, not capped at log L like the per-sample entropy, so a float32 draw
that starves rare tokens shows as a lower surprisal even in short samples. Token-by-token samplers (first-hitting
for the diffusion families, autoregressive for the ARM) are the controls: one unit per draw, so
the truncation barely matters for them (Zheng et al. Sec. 5.3) and their entropy is a reference
line. The result is a :class:`PrecisionAudit` of rows, a JSON record and a plot (these live in
:mod:`harness.audit.precision_results` and are importable from here); :func:`audit_checkpoint` runs
the audit on a checkpoint.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from harness.audit.precision_results import (
    PrecisionAudit,
    PrecisionRow,
    audit_from_record,
    plot,
    plot_record,
    record,
)
from harness.errors import PrimebenchError
from harness.evaluation import load_for_evaluation
from harness.judges import check_judge_spec, load_judge
from harness.metrics.entropy import MeanEntropy, units_of
from harness.metrics.genppl import score_texts
from harness.sampling.categorical import METHODS, parse_dtype
from harness.sampling.samplers import generate, get_sampler, sampler_for, token_by_token_sampler
from harness.sampling.units import UnitModel
from harness.settings import changed

DEFAULT_STEPS = (64, 256, 1024, 4096)
DEFAULT_DTYPES = ("float32", "float64")


def _check_steps(steps: Sequence[int]) -> tuple[int, ...]:
    out = tuple(steps)
    if not out or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in out):
        raise PrimebenchError(
            f"steps must be a non-empty list of positive integers, got {steps!r}", fix="e.g. --steps 64,256,1024,4096"
        )
    return out


def all_masked_marginal(model) -> torch.Tensor:
    """The denoiser's token distribution on the all-masked sequence at t = 1, averaged over positions
    (float64, (C,), renormalised): a masked-diffusion model's context-free marginal, the law of its first
    revealed token."""

    units = UnitModel(model)
    with torch.no_grad():
        y = units.initial_state(1, None)
        log_p = units.log_probs(y, 1.0)[0].to(torch.float64)  # (L, C)
    p = log_p.exp().mean(0)
    return p / p.sum()  # the network's float32 softmax sums to 1 only within its rounding


def marginal_surprisal(
    tokens: torch.Tensor, log_marginal: torch.Tensor, *, base: str | int = "e"
) -> tuple[float, float]:
    """Mean over samples of each sample's mean -log p(x) under ``log_marginal`` ((C,), natural log),
    in the units of ``base``, with its standard error over samples (NaN for one sample)."""
    if tokens.dim() != 2 or tokens.shape[0] == 0:
        raise PrimebenchError(f"marginal_surprisal takes samples (B, L), got shape {tuple(tokens.shape)}")
    per_sample = -log_marginal.to(torch.float64)[tokens.long().cpu()].mean(1) / _nats_per_unit(base)
    n = per_sample.numel()
    se = float(per_sample.std(unbiased=True)) / math.sqrt(n) if n > 1 else float("nan")
    return float(per_sample.mean()), se


def _nats_per_unit(base: str | int) -> float:
    return 1.0 if base == "e" else math.log(float(base))


@dataclass(frozen=True)
class PrecisionSettings:
    """Every setting of the precision audit, with ``audit precision``'s defaults.

    ``steps`` (the grid of T), ``num_samples`` per run in batches of ``batch_size``, every run seeded
    with ``seed``; the ``dtypes`` compared; the categorical ``method`` of every run ("mdlm-legacy" is
    MDLM's own draw, so float32 reproduces the reference behaviour); ``sampler`` (None: the family's;
    when it takes no steps there is one row per dtype and ``steps`` is not used); ``controls``: also
    run the family's token-by-token sampler; entropies in ``entropy_base`` units; ``draw``: the
    ancestral step's draw, MDLM's ``joint`` draw by default (the one whose float32 truncation the
    audit is about; ``two-stage`` is the control whose float32 run should match float64). For a
    checkpoint (:func:`audit_checkpoint`): the ``judge`` spec (None: no Gen PPL), ``device``, Prime's
    ``carry_over`` (None: as trained) and the ``ema`` weights.
    """

    steps: Sequence[int] = DEFAULT_STEPS
    num_samples: int = 8
    dtypes: Sequence[str] = DEFAULT_DTYPES
    method: str = "mdlm-legacy"
    sampler: str | None = None
    controls: bool = True
    batch_size: int = 8
    seed: int = 0
    entropy_base: str | int = "e"
    draw: str = "joint"
    judge: str | None = None
    device: str = "cpu"
    carry_over: bool | None = None
    ema: bool = True


@dataclass(frozen=True)
class _Scoring:
    """What every run of one audit shares besides the settings: the ARM's first token, the loaded
    judge with the tokenizer that decodes samples for it, and the log marginal for the surprisal."""

    bos_id: int | None
    judge: Any
    tokenizer: Any
    log_marginal: torch.Tensor | None


def _gen_ppl(scoring: _Scoring, tokens: torch.Tensor, seq_len: int, batch_size: int):

    if scoring.judge is None:
        return None, None
    judge = scoring.judge
    texts = [scoring.tokenizer.decode(r.tolist()) for r in tokens]
    res = score_texts(judge, texts, max_length=min(judge.context, seq_len), batch_size=batch_size)[0].compute()
    return res.gen_ppl, res.stderr


def _run(model, sampler: str, s: PrecisionSettings, scoring: _Scoring, *, steps, dtype, control):
    out = generate(
        model,
        sampler,
        num_samples=s.num_samples,
        batch_size=s.batch_size,
        steps=steps,
        dtype=dtype,
        method=s.method,
        generator=torch.Generator(device=model.device).manual_seed(s.seed),
        draw=s.draw,
        bos_id=scoring.bos_id if sampler == "autoregressive" else None,
    )
    metric = MeanEntropy(base=s.entropy_base)
    metric.update(out.tokens)
    ent = metric.compute()
    summary = out.summary()
    gen_ppl, gen_ppl_se = _gen_ppl(scoring, out.tokens, int(model.seq_len), s.batch_size)
    surprisal = surprisal_se = None
    if scoring.log_marginal is not None:
        surprisal, surprisal_se = marginal_surprisal(out.tokens, scoring.log_marginal, base=s.entropy_base)
    row = PrecisionRow(
        sampler=sampler,
        control=control,
        steps=steps,
        dtype=dtype,
        entropy=ent.mean,
        entropy_stderr=ent.stderr,
        units=ent.units,
        nfe=summary["nfe"],
        idle_steps=summary["idle_steps"],
        wall_s=summary["wall_s"],
        num_samples=out.num_samples,
        gen_ppl=gen_ppl,
        gen_ppl_stderr=gen_ppl_se,
        surprisal=surprisal,
        surprisal_stderr=surprisal_se,
    )
    return row, out.protocol


def _check(s: PrecisionSettings, judge, tokenizer) -> list[str]:
    """The dtype names of a checked audit."""
    if judge is not None and tokenizer is None:
        raise PrimebenchError(
            "Gen PPL in the precision audit needs the model's tokenizer to decode samples",
            fix="the checkpoint has no tokenizer folder",
        )
    if s.method not in METHODS:
        raise PrimebenchError(
            f"unknown categorical sampling method {s.method!r}", fix=f"use one of {', '.join(METHODS)}"
        )
    names = [str(parse_dtype(d)).removeprefix("torch.") for d in s.dtypes]
    if not names:
        raise PrimebenchError("dtypes is empty", fix="e.g. --dtypes float32,float64")
    units_of(s.entropy_base)
    return names


def _audit_protocol(s: PrecisionSettings, spec, grid, names, marginal, protocols, control: str | None) -> dict:
    main = spec.name
    shared = {k: v for k, v in protocols[main].items() if k not in ("steps", "dtype")}
    return {
        "audit": "precision",
        "sampler": main,
        "control_sampler": control,
        "steps": list(grid) if spec.uses_steps else None,
        "dtypes": names,
        "method": s.method,
        "num_samples": s.num_samples,
        "batch_size": s.batch_size,
        "seed": s.seed,
        "seeding": "every run starts from torch.Generator(device).manual_seed(seed)",
        "entropy": {
            "units": units_of(s.entropy_base),
            "ids": "model token ids",
            "per": "sample, then mean",
            "ignore_ids": [],
        },
        "surprisal": None
        if marginal is None
        else {
            "units": f"{units_of(s.entropy_base)} per token",
            "per": "sample (mean over its L tokens), then mean",
            "marginal": "the denoiser's output on the all-masked sequence at t = 1, averaged over positions",
            "marginal_entropy": float(-torch.special.xlogy(marginal, marginal).sum()) / _nats_per_unit(s.entropy_base),
        },
        "draw": s.draw if spec.name == "ancestral" else None,
        "judge": s.judge,
        "sampler_protocol": shared,
        "control_protocol": ({k: v for k, v in protocols[control].items() if k != "dtype"} if control else None),
    }


def precision_audit(
    model,
    settings: PrecisionSettings | None = None,
    *,
    bos_id: int | None = None,
    log: Callable[[str], None] | None = None,
    judge=None,
    tokenizer=None,
    **changes,
) -> PrecisionAudit:
    """Run the audit on a loaded model (see the module docstring).

    ``settings``: a :class:`PrecisionSettings` (default: ``audit precision``'s defaults), with
    ``changes`` by field name on top. ``bos_id``: the first token of autoregressive samples (the
    tokenizer's BOS; needed for the ARM). ``judge`` (a loaded :mod:`harness.judges` judge) and
    ``tokenizer``: also score every run's samples for Gen PPL with the same code as ``eval genppl``.
    ``log`` is called with a line per run.
    """

    s = changed(settings or PrecisionSettings(), changes, "precision-audit")
    if judge is not None:
        s = replace(s, judge=judge.spec)
    names = _check(s, judge, tokenizer)
    spec = get_sampler(s.sampler or sampler_for(model), model)
    grid = _check_steps(s.steps) if spec.uses_steps else (None,)
    log = log or (lambda message: None)
    if not spec.uses_steps:
        log(f"sampler {spec.name!r} takes one step per generated unit: the steps list is not used")
    # the surprisal's marginal is the all-masked denoiser output: the absorbing families only
    marginal = all_masked_marginal(model) if spec.uses_steps and model.forward_process == "absorbing" else None
    scoring = _Scoring(bos_id, judge, tokenizer, None if marginal is None else marginal.log())
    rows: list[PrecisionRow] = []
    protocols: dict[str, dict[str, Any]] = {}
    for T in grid:
        for dtype in names:
            log(f"{spec.name} steps={T if T is not None else 'per unit'} dtype={dtype}")
            row, protocols[spec.name] = _run(model, spec.name, s, scoring, steps=T, dtype=dtype, control=False)
            rows.append(row)
    control = token_by_token_sampler(model)
    control = control if s.controls and control and control != spec.name else None  # some families have none
    for dtype in names if control else ():
        log(f"control {control} dtype={dtype}")
        row, protocols[control] = _run(model, control, s, scoring, steps=None, dtype=dtype, control=True)
        rows.append(row)
    protocol = _audit_protocol(s, spec, grid, names, marginal, protocols, control)
    return PrecisionAudit(rows=tuple(rows), protocol=protocol)


@dataclass(frozen=True)
class PrecisionRun:
    """The audit of one checkpoint and its ``precision`` record."""

    audit: PrecisionAudit
    record: dict[str, Any]


def audit_checkpoint(
    checkpoint: str | Path, settings: PrecisionSettings | None = None, *, log=None, **changes
) -> PrecisionRun:
    """Load ``checkpoint`` (and the settings' ``judge`` spec, if any), run :func:`precision_audit` on
    it with the tokenizer's BOS, and make the record (wall time from loading to the last row).
    ``settings`` and ``changes`` as for :func:`precision_audit`."""

    s = changed(settings or PrecisionSettings(), changes, "precision-audit")
    began = time.perf_counter()
    if s.judge:
        check_judge_spec(s.judge)  # before anything loads
    _, model, tokenizer, cfg = load_for_evaluation(checkpoint, s.device, carry_over=s.carry_over, ema=s.ema)
    the_judge = load_judge(s.judge, device=s.device) if s.judge else None
    bos_id = None if tokenizer is None else tokenizer.bos_id
    audit = precision_audit(model, s, bos_id=bos_id, log=log, judge=the_judge, tokenizer=tokenizer)
    audit.protocol.update(model.protocol(), weights="EMA" if s.ema else "raw")
    wall = time.perf_counter() - began
    return PrecisionRun(audit, record(audit, checkpoint=checkpoint, wall_s=wall, cfg=cfg))


__all__ = [
    "DEFAULT_DTYPES",
    "DEFAULT_STEPS",
    "PrecisionAudit",
    "PrecisionRow",
    "PrecisionRun",
    "all_masked_marginal",
    "audit_checkpoint",
    "audit_from_record",
    "marginal_surprisal",
    "plot",
    "plot_record",
    "precision_audit",
    "record",
]
