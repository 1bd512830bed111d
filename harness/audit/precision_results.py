"""What a precision audit yields (:mod:`harness.audit.precision` runs it): its rows
(:class:`PrecisionRow`, :class:`PrecisionAudit`), the ``precision`` record made from them, the plot,
and the rows read back from a record so that plots can be drawn again from records alone."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from harness.errors import PrimebenchError
from harness.metrics.entropy import units_of
from harness.records import Metric, make_record, model_block


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


def record(
    audit: PrecisionAudit, *, checkpoint: str | Path | None, wall_s: float | None = None, cfg=None
) -> dict[str, Any]:
    """A ``primebench-record/1`` record (evaluation "precision") with one item per run in ``rows``.

    Each item carries its own metrics (entropy, Gen PPL when judged, NFE, idle steps: estimates)
    and protocol (sampler, steps, dtype, control). The record also states the float32 matmul flags,
    which would change a float32 audit if someone set them globally.
    """

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
    from matplotlib.figure import Figure  # deferred, as below; no pyplot: the Agg canvas, no global backend switch
    from matplotlib.ticker import NullFormatter  # deferred: matplotlib loads only when a plot is drawn

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
