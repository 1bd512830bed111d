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
line. The result is a :class:`PrecisionAudit` of rows, a JSON record and a plot;
:func:`audit_checkpoint` runs it on a checkpoint.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from harness.errors import PrimebenchError
from harness.metrics.entropy import MeanEntropy, units_of
from harness.sampling.categorical import METHODS, parse_dtype
from harness.sampling.samplers import generate, get_sampler, sampler_for, token_by_token_sampler

DEFAULT_STEPS = (64, 256, 1024, 4096)
DEFAULT_DTYPES = ("float32", "float64")


@dataclass(frozen=True)
class PrecisionRow:
    """One (sampler, steps, dtype) cell: entropy mean and standard error per sample (``units``), and
    means per sample of NFE, idle steps and wall seconds. ``steps`` is None for token-by-token
    samplers (one step per unit); ``control`` marks the reference rows."""

    sampler: str
    control: bool
    steps: int | None
    dtype: str
    entropy: float
    entropy_stderr: float
    units: str
    nfe: float
    idle_steps: float
    wall_s: float
    num_samples: int
    gen_ppl: float | None = None
    gen_ppl_stderr: float | None = None
    surprisal: float | None = None
    surprisal_stderr: float | None = None


@dataclass(frozen=True)
class PrecisionAudit:
    """All rows of one audit plus the protocol they share (sampler settings, seed, entropy units)."""

    rows: tuple[PrecisionRow, ...]
    protocol: dict[str, Any]

    def main_rows(self) -> list[PrecisionRow]:
        return [r for r in self.rows if not r.control]

    def control_rows(self) -> list[PrecisionRow]:
        return [r for r in self.rows if r.control]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: rows as dicts (a NaN standard error, from a single sample, becomes None)."""
        rows = [{k: (None if isinstance(v, float) and v != v else v) for k, v in asdict(r).items()} for r in self.rows]
        return {"rows": rows, "protocol": dict(self.protocol)}


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
    from harness.sampling.units import UnitModel

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


def _run(
    model,
    sampler: str,
    *,
    steps: int | None,
    dtype: str,
    method: str,
    num_samples: int,
    batch_size: int,
    seed: int,
    entropy_base,
    control: bool,
    bos_id: int | None,
    judge=None,
    tokenizer=None,
    draw: str = "joint",
    log_marginal: torch.Tensor | None = None,
) -> tuple[PrecisionRow, dict[str, Any]]:
    out = generate(
        model,
        sampler,
        num_samples=num_samples,
        batch_size=batch_size,
        steps=steps,
        dtype=dtype,
        method=method,
        generator=torch.Generator(device=model.device).manual_seed(seed),
        draw=draw,
        bos_id=bos_id if sampler == "autoregressive" else None,
    )
    metric = MeanEntropy(base=entropy_base)
    metric.update(out.tokens)
    ent = metric.compute()
    summary = out.summary()
    gen_ppl = gen_ppl_se = None
    if judge is not None:
        from harness.metrics.genppl import score_texts

        texts = [tokenizer.decode(r.tolist()) for r in out.tokens]
        res = score_texts(judge, texts, max_length=min(judge.context, model.seq_len), batch_size=batch_size)[
            0
        ].compute()
        gen_ppl, gen_ppl_se = res.gen_ppl, res.stderr
    surprisal = surprisal_se = None
    if log_marginal is not None:
        surprisal, surprisal_se = marginal_surprisal(out.tokens, log_marginal, base=entropy_base)
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


def precision_audit(
    model,
    *,
    steps: Sequence[int] = DEFAULT_STEPS,
    num_samples: int = 8,
    dtypes: Sequence[str] = DEFAULT_DTYPES,
    method: str = "mdlm-legacy",
    sampler: str | None = None,
    controls: bool = True,
    batch_size: int = 8,
    seed: int = 0,
    entropy_base: str | int = "e",
    bos_id: int | None = None,
    log: Callable[[str], None] | None = None,
    judge=None,
    tokenizer=None,
    draw: str = "joint",
) -> PrecisionAudit:
    """Run the audit on a loaded model (see the module docstring).

    ``sampler``: default the family's (:func:`harness.sampling.sampler_for`); when it takes no steps
    (the ARM's autoregressive sampler) there is one row per dtype and ``steps`` is not used.
    ``method``: the categorical method in every run ("mdlm-legacy" is MDLM's own draw, so float32
    reproduces the reference behaviour). Every run is seeded with ``seed``. ``bos_id``: the first
    token of autoregressive samples (the tokenizer's BOS; needed for the ARM). ``judge`` (a loaded
    :mod:`harness.judges` judge) and ``tokenizer``: also score every run's samples for Gen PPL with
    the same code as ``eval genppl``. ``draw``: the ancestral step's draw, MDLM's ``joint`` draw by
    default (the one whose float32 truncation the audit is about); ``two-stage`` is the control
    whose float32 run should match float64.
    """
    if judge is not None and tokenizer is None:
        raise PrimebenchError(
            "Gen PPL in the precision audit needs the model's tokenizer to decode samples",
            fix="the checkpoint has no tokenizer folder",
        )
    if method not in METHODS:
        raise PrimebenchError(f"unknown categorical sampling method {method!r}", fix=f"use one of {', '.join(METHODS)}")
    names = [str(parse_dtype(d)).removeprefix("torch.") for d in dtypes]
    if not names:
        raise PrimebenchError("dtypes is empty", fix="e.g. --dtypes float32,float64")
    main = sampler or sampler_for(model)
    spec = get_sampler(main, model)
    grid = _check_steps(steps) if spec.uses_steps else (None,)
    units_of(entropy_base)
    log = log or (lambda message: None)
    if not spec.uses_steps:
        log(f"sampler {main!r} takes one step per generated unit: the steps list is not used")

    rows: list[PrecisionRow] = []
    protocols: dict[str, dict[str, Any]] = {}
    marginal = all_masked_marginal(model) if spec.uses_steps else None  # the masked families
    common = dict(
        method=method,
        num_samples=num_samples,
        batch_size=batch_size,
        seed=seed,
        entropy_base=entropy_base,
        bos_id=bos_id,
        judge=judge,
        tokenizer=tokenizer,
        draw=draw,
        log_marginal=None if marginal is None else marginal.log(),
    )
    for T in grid:
        for dtype in names:
            log(f"{main} steps={T if T is not None else 'per unit'} dtype={dtype}")
            row, protocol = _run(model, main, steps=T, dtype=dtype, control=False, **common)
            rows.append(row)
            protocols[main] = protocol
    control = token_by_token_sampler(model)
    if controls and control != main:
        for dtype in names:
            log(f"control {control} dtype={dtype}")
            row, protocol = _run(model, control, steps=None, dtype=dtype, control=True, **common)
            rows.append(row)
            protocols[control] = protocol

    shared = {k: v for k, v in protocols[main].items() if k not in ("steps", "dtype")}
    protocol = {
        "audit": "precision",
        "sampler": main,
        "control_sampler": control if controls and control != main else None,
        "steps": list(grid) if spec.uses_steps else None,
        "dtypes": names,
        "method": method,
        "num_samples": num_samples,
        "batch_size": batch_size,
        "seed": seed,
        "seeding": "every run starts from torch.Generator(device).manual_seed(seed)",
        "entropy": {
            "units": units_of(entropy_base),
            "ids": "model token ids",
            "per": "sample, then mean",
            "ignore_ids": [],
        },
        "surprisal": None
        if marginal is None
        else {
            "units": f"{units_of(entropy_base)} per token",
            "per": "sample (mean over its L tokens), then mean",
            "marginal": "the denoiser's output on the all-masked sequence at t = 1, averaged over positions",
            "marginal_entropy": float(-torch.special.xlogy(marginal, marginal).sum()) / _nats_per_unit(entropy_base),
        },
        "draw": draw if spec.name == "ancestral" else None,
        "judge": None if judge is None else judge.spec,
        "sampler_protocol": shared,
        "control_protocol": (
            {k: v for k, v in protocols[control].items() if k != "dtype"} if controls and control != main else None
        ),
    }
    return PrecisionAudit(rows=tuple(rows), protocol=protocol)


def record(
    audit: PrecisionAudit, *, checkpoint: str | Path | None, wall_s: float | None = None, cfg=None
) -> dict[str, Any]:
    """A ``primebench-record/1`` record (evaluation "precision") with one item per run in ``rows``.

    Each item carries its own metrics (entropy, Gen PPL when judged, NFE, idle steps: estimates)
    and protocol (sampler, steps, dtype, control). The record also states the float32 matmul flags,
    which would change a float32 audit if someone set them globally.
    """
    from harness.records import Metric, make_record, model_block

    items = []
    for r in audit.rows:
        metrics = {
            "entropy": Metric(
                r.entropy,
                None if r.entropy_stderr != r.entropy_stderr else r.entropy_stderr,
                "estimate",
                f"{r.units} per sample, model ids",
            ),
            "nfe": Metric(r.nfe, None, "estimate", "denoiser calls per sample"),
            "idle_steps": Metric(r.idle_steps, None, "estimate", "idle steps per sample"),
        }
        if r.surprisal is not None:
            metrics["surprisal"] = Metric(
                r.surprisal,
                None if r.surprisal_stderr != r.surprisal_stderr else r.surprisal_stderr,
                "estimate",
                f"{r.units} per token, -log p(x) under the model's all-masked marginal",
            )
        if r.gen_ppl is not None:
            metrics["gen_ppl"] = Metric(
                r.gen_ppl, r.gen_ppl_stderr, "estimate", f"perplexity under {audit.protocol.get('judge')}"
            )
        items.append(
            {
                "metrics": {k: v.to_dict() for k, v in metrics.items()},
                "protocol": {
                    "sampler": r.sampler + (" (control)" if r.control else ""),
                    "steps": r.steps,
                    "dtype": r.dtype,
                    "control": r.control,
                    "num_samples": r.num_samples,
                },
                "wall_s_per_sample": r.wall_s,
            }
        )
    protocol = dict(audit.protocol)
    protocol["float32_flags"] = {
        "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }
    model = model_block(None if checkpoint is None else Path(checkpoint), cfg)
    return make_record(
        "precision",
        model=model,
        metrics={},
        protocol=protocol,
        seed=audit.protocol.get("seed"),
        wall_s=wall_s,
        extra={"rows": items},
    )


def plot(audit: PrecisionAudit, path: str | Path) -> Path:
    """Entropy (and Gen PPL when judged) against steps (log x), one line per dtype with stderr bars;
    controls as horizontal dashed lines."""
    from matplotlib.figure import Figure  # no pyplot: the Agg canvas, no global backend switch
    from matplotlib.ticker import NullFormatter

    judged = any(r.gen_ppl is not None for r in audit.rows)
    panels = [("entropy", "entropy_stderr")]
    panels += [("surprisal", "surprisal_stderr")] if any(r.surprisal is not None for r in audit.rows) else []
    panels += [("gen_ppl", "gen_ppl_stderr")] if judged else []
    fig = Figure(figsize=(6.0 * len(panels), 4.0))
    main = audit.main_rows()
    units = main[0].units if main else "nats"
    for i, (field, err_field) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        colors = {}

        def value(r):
            return getattr(r, field)

        def err(r):
            e = getattr(r, err_field)
            return 0.0 if e is None or e != e else e

        if main and main[0].steps is not None:
            for dtype in dict.fromkeys(r.dtype for r in main):
                rows = sorted((r for r in main if r.dtype == dtype), key=lambda r: r.steps)
                line = ax.errorbar(
                    [r.steps for r in rows],
                    [value(r) for r in rows],
                    yerr=[err(r) for r in rows],
                    marker="o",
                    capsize=3,
                    label=f"{rows[0].sampler} {dtype}",
                )
                colors[dtype] = line.lines[0].get_color()
            ax.set_xscale("log")
            ticks = sorted({r.steps for r in main})
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.xaxis.set_minor_formatter(NullFormatter())
        else:  # a sampler without steps (ARM): draw its dtypes as lines too
            for r in main:
                line = ax.axhline(value(r), label=f"{r.sampler} {r.dtype}")
                colors[r.dtype] = line.get_color()
        for r in audit.control_rows():
            ax.axhline(value(r), linestyle="--", color=colors.get(r.dtype), label=f"{r.sampler} {r.dtype} (control)")
        ax.set_xlabel("sampling steps T")
        if field == "entropy":
            ax.set_ylabel(f"unigram entropy per sample ({units})")
        elif field == "surprisal":
            ax.set_ylabel(f"-log p(x) under the all-masked marginal ({units}/token)")
        else:
            ax.set_ylabel(f"Gen PPL ({audit.protocol.get('judge')})")
            ax.set_yscale("log")
        ax.set_title(f"precision audit ({audit.protocol['method']}, {audit.protocol['num_samples']} samples)")
        ax.legend(fontsize="small")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


def audit_from_record(rec: dict[str, Any]) -> PrecisionAudit:
    """The :class:`PrecisionAudit` a ``precision`` record was made from (rows and protocol), so
    plots can be drawn again from records alone."""
    if rec.get("evaluation") != "precision" or not isinstance(rec.get("rows"), list):
        raise PrimebenchError(
            f"not a precision record (evaluation {rec.get('evaluation')!r})",
            fix="pass a record written by `primebench audit precision`",
        )
    protocol = rec.get("protocol", {})
    units = units_of(2 if protocol.get("entropy", {}).get("units") == "bits" else "e")
    rows = []
    for item in rec["rows"]:
        m, p = item["metrics"], item["protocol"]

        def value(name, key="value"):
            entry = m.get(name)
            v = None if entry is None else entry.get(key)
            return float("nan") if v is None and key == "stderr" else v

        rows.append(
            PrecisionRow(
                sampler=str(p["sampler"]).removesuffix(" (control)"),
                control=bool(p["control"]),
                steps=p["steps"],
                dtype=p["dtype"],
                entropy=value("entropy"),
                entropy_stderr=value("entropy", "stderr"),
                units=units,
                nfe=value("nfe"),
                idle_steps=value("idle_steps"),
                wall_s=item.get("wall_s_per_sample"),
                num_samples=p["num_samples"],
                gen_ppl=value("gen_ppl"),
                gen_ppl_stderr=None if m.get("gen_ppl") is None else m["gen_ppl"].get("stderr"),
                surprisal=value("surprisal"),
                surprisal_stderr=None if m.get("surprisal") is None else m["surprisal"].get("stderr"),
            )
        )
    return PrecisionAudit(rows=tuple(rows), protocol=protocol)


def plot_record(rec: dict[str, Any], path: str | Path) -> Path:
    """:func:`plot` of a ``precision`` record."""
    return plot(audit_from_record(rec), path)


@dataclass(frozen=True)
class PrecisionRun:
    """The audit of one checkpoint and its ``precision`` record."""

    audit: PrecisionAudit
    record: dict[str, Any]


def audit_checkpoint(
    checkpoint: str | Path,
    *,
    steps: Sequence[int],
    num_samples: int,
    dtypes: Sequence[str],
    method: str,
    sampler: str | None,
    controls: bool,
    batch_size: int,
    seed: int,
    entropy_base: str | int,
    judge: str | None = None,
    device: str = "cpu",
    log: Callable[[str], None] | None = None,
    carry_over: bool | None = None,
    ema: bool = True,
    draw: str = "joint",
) -> PrecisionRun:
    """Load ``checkpoint`` (and the ``judge`` spec, if any), run :func:`precision_audit` on it with the
    tokenizer's BOS, and make the record (wall time from loading to the last row)."""
    from harness.evaluation import load_for_evaluation

    began = time.perf_counter()
    if judge:
        from harness.judges import check_judge_spec

        check_judge_spec(judge)  # before anything loads
    _, model, tokenizer, cfg = load_for_evaluation(checkpoint, device, carry_over=carry_over, ema=ema)
    the_judge = None
    if judge:
        from harness.judges import load_judge

        the_judge = load_judge(judge, device=device)
    audit = precision_audit(
        model,
        steps=steps,
        num_samples=num_samples,
        dtypes=dtypes,
        method=method,
        sampler=sampler,
        controls=controls,
        batch_size=batch_size,
        seed=seed,
        entropy_base=entropy_base,
        bos_id=None if tokenizer is None else tokenizer.bos_id,
        log=log,
        judge=the_judge,
        tokenizer=tokenizer,
        draw=draw,
    )
    audit.protocol.update(model.protocol(), weights="EMA" if ema else "raw")
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
