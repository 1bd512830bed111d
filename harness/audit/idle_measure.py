"""Idle steps measured through the real ancestral sampler, next to the analytic ISR of :mod:`harness.audit.idle`.

Whether a masked unit unmasks in a step does not depend on the network (Zheng et al. Sec. 4.1;
MDM-Prime Fig. 2 simulates exactly this), so the idle-step ratio can be measured with any denoiser.
:func:`uniform_model` builds the registered sub-token family itself (Prime with carry-over, found in
the model registry as the family with a paper-objective estimator; at ell = 1 its sampler is MDLM's,
draw for draw) around :class:`UniformDenoiser`, a parameter-free
network whose logits are all zero, and :func:`measure_idle` runs :func:`harness.sampling.generate`
on it with ``sampler="ancestral"``: the same grid, caching and per-sample idle counting as any real
run, and every family fact (mask id, base, units, carry-over) the family's own.

The measured ISR is per sequence (batch = 1, the paper's setting): the sampler counts idle steps
per sample, and the samples of one generate call are independent, so ``runs`` samples in one call
are ``runs`` independent runs. The draws are made in float64 so that the fp32 Gumbel truncation
(Zheng et al. Sec. 5) cannot bias the unmasking decisions.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import torch
from torch import nn

from harness.audit.idle import expected_nfe, idle_step_ratio
from harness.errors import PrimebenchError
from harness.models import build_model, family_of_kind
from harness.records import Metric, make_record, model_block
from harness.sampling import generate
from harness.schedules import Schedule, get_schedule

#: MDM-Prime Table 1 ISR (percent) at L = T = 1024, linear schedule, one sequence, by ell.
PAPER_ISR_PERCENT: dict[int, float] = {1: 36.77, 2: 13.52, 3: 4.97, 4: 1.83, 6: 0.25, 8: 0.03}
PAPER_SETTING = {"length": 1024, "steps": 1024, "schedule": "linear"}

#: vocabulary of the stand-in: binary symbols (Prime base 2 for every ell > 1; ISR does not depend on C)
STANDIN_VOCAB = 2


class UniformDenoiser(nn.Module):
    """A backbone whose logits are all zero: (B, L) or (B, L, ell) inputs -> (B, L, C) float32 zeros.

    The family around it turns them into uniform predictions: MDLM's SUBS gives log(1/C) at masked
    positions; Prime's carry-over gives the uniform law over V(y^i), the valid codes consistent with
    the revealed sub-tokens, so no invalid code is ever drawn. Time-independent, so the sampler's
    caching is exact. It has no weights; an empty parameter fixes the family's device."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.vocab_size = int(vocab_size)
        self.anchor = nn.Parameter(torch.zeros(0), requires_grad=False)

    def forward(self, z: torch.Tensor, t=None, attention_mask=None) -> torch.Tensor:
        return torch.zeros(*z.shape[:2], self.vocab_size, dtype=torch.float32, device=z.device)


def uniform_model(*, vocab_size: int, seq_len: int, ell: int = 1, schedule: str | Schedule = "linear"):
    """The registered sub-token family (:func:`harness.models.family_of_kind`) with ell sub-tokens per
    token and carry-over, C = ``vocab_size``, L = ``seq_len`` and ``schedule``, its network replaced by
    :class:`UniformDenoiser`. At ell = 1 the sampler draws exactly MDLM's samples and NFE."""

    family, extra = family_of_kind("paper-objective").family, {"ell": ell, "carry_over": True}
    model = build_model(
        family,
        vocab_size=vocab_size,
        seq_len=seq_len,
        d_model=2 * ell,  # the smallest network that builds; it is replaced
        n_layers=1,
        n_heads=1,
        mlp_ratio=1,
        schedule=schedule,
        **extra,
    )
    model.backbone = UniformDenoiser(vocab_size)
    return model.eval()


@dataclass(frozen=True)
class IdleMeasurement:
    """ISR and NFE of ``runs`` single-sequence runs of the real ancestral sampler.

    ``isr`` is a fraction (idle steps / T), ``nfe`` in denoiser calls per sequence (with caching);
    ``*_stderr`` are standard errors of the mean over runs (None for one run). ``wall_s`` seconds.
    """

    runs: int
    isr: float
    isr_stderr: float | None
    nfe: float
    nfe_stderr: float | None
    wall_s: float


def _mean_stderr(x: torch.Tensor) -> tuple[float, float | None]:
    x = x.double()
    se = float(x.std() / math.sqrt(x.numel())) if x.numel() > 1 else None
    return float(x.mean()), se


def measure_idle(
    length: int,
    steps: int,
    ell: int,
    *,
    schedule: str | Schedule = "linear",
    runs: int,
    seed: int = 0,
    vocab_size: int = STANDIN_VOCAB,
    max_batch: int = 64,
) -> IdleMeasurement:
    """Run :func:`harness.sampling.generate` (ancestral, float64 Gumbel draws, caching on) ``runs``
    times on one sequence of ``length`` tokens with :func:`uniform_model` of ``ell`` sub-tokens per
    token, ``max_batch`` runs per call: the mean ISR (a fraction) and NFE per sequence, each with its
    standard error over the runs."""

    for name, value in (("length", length), ("steps", steps), ("ell", ell), ("runs", runs), ("vocab_size", vocab_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PrimebenchError(f"{name} must be a positive integer, got {value!r}")
    model = uniform_model(vocab_size=vocab_size, seq_len=length, ell=ell, schedule=schedule)
    began = time.perf_counter()
    out = generate(
        model,
        "ancestral",
        num_samples=runs,
        batch_size=min(runs, max_batch),
        steps=steps,
        dtype="float64",
        method="gumbel",
        cache=True,
        generator=seed,
    )
    wall = time.perf_counter() - began
    isr, isr_se = _mean_stderr(out.idle_fraction)
    nfe, nfe_se = _mean_stderr(out.nfe)
    return IdleMeasurement(runs=runs, isr=isr, isr_stderr=isr_se, nfe=nfe, nfe_stderr=nfe_se, wall_s=wall)


@dataclass(frozen=True)
class IdleRow:
    """One ell. Ratios are fractions of the T steps; NFE in denoiser calls.

    ``isr``: one sequence, (1/T) sum_k (1 - Delta_k)^(L ell); ``isr_batch``: the whole batch of B
    sequences idle, exponent B L ell; ``expected_nfe``: :func:`harness.audit.idle.expected_nfe`,
    caching per sequence (the MDLM/Prime loop's convention); ``expected_nfe_sampler``: T (1 - ISR),
    the expectation for this harness's sampler, which also skips the call when nothing is masked
    (it differs by P(step T idle) < 1 call); ``expected_nfe_batch``: caching per batch (the
    MDLM/Prime code's ``allclose`` check over the batch);
    ``paper_percent``: MDM-Prime Table 1 in percent where the setting is the paper's, else None;
    ``measured``: the real sampler on one sequence, None with ``runs = 0``.
    """

    ell: int
    units: int
    isr: float
    isr_batch: float
    expected_nfe: float
    expected_nfe_sampler: float
    expected_nfe_batch: float
    paper_percent: float | None
    measured: IdleMeasurement | None


@dataclass(frozen=True)
class IdleAudit:
    """The idle-step audit for one (L, T, schedule, B) and several ell."""

    length: int
    steps: int
    schedule: str
    batch: int
    runs: int
    seed: int
    rows: tuple[IdleRow, ...]
    wall_s: float

    @property
    def is_paper_setting(self) -> bool:
        return (self.length, self.steps, self.schedule) == tuple(PAPER_SETTING.values())

    def to_record(self) -> dict:
        """A ``primebench-record/1`` document (``evaluation = "idle"``)."""

        metrics: dict[str, Metric] = {}
        for r in self.rows:
            metrics[f"isr[ell={r.ell}]"] = Metric(r.isr, 0.0, "exact", "fraction of steps")
            metrics[f"isr_batch[ell={r.ell},B={self.batch}]"] = Metric(r.isr_batch, 0.0, "exact", "fraction of steps")
            metrics[f"expected_nfe[ell={r.ell}]"] = Metric(r.expected_nfe, 0.0, "exact", "calls per sequence")
            if r.measured is not None:
                m = r.measured
                metrics[f"isr_measured[ell={r.ell}]"] = Metric(m.isr, m.isr_stderr, "estimate", "fraction of steps")
                metrics[f"nfe_measured[ell={r.ell}]"] = Metric(m.nfe, m.nfe_stderr, "estimate", "calls per sequence")
        protocol = {
            "length": self.length,
            "steps": self.steps,
            "schedule": self.schedule,
            "batch": self.batch,
            "ells": [r.ell for r in self.rows],
            "runs": self.runs,
            "grid": "t_k = 1 - k/T, k = 0..T (t_end = 0: the last step reveals every unit)",
            "isr_definition": "idle steps / T; a step is idle when no unit (token, or sub-token for ell > 1) changes",
            "isr_batch_definition": "a step is idle for the batch when none of its B sequences changes",
            "nfe_convention": "step 1 calls the network; step k > 1 calls it iff step k-1 changed the state "
            "(expected_nfe = T - sum_{k<T} P(step k idle)); no final noise-removal call",
            "measurement": None
            if self.runs == 0
            else {
                "sampler": "ancestral",
                "runs": self.runs,
                "per": "sequence (batch = 1)",
                "cache": True,
                "dtype": "float64",
                "method": "gumbel",
                "seed": self.seed,
                "denoiser": f"UniformDenoiser (uniform p(x0 | z_t), C = {STANDIN_VOCAB}) in the sub-token family "
                "with carry-over (at ell = 1 MDLM's sampler, draw for draw)",
            },
            "paper": "MDM-Prime Table 1 (L = T = 1024, linear, one sequence)" if self.is_paper_setting else None,
        }
        return make_record(
            "idle",
            model=model_block(None, name="uniform-stand-in", family=family_of_kind("paper-objective").family),
            metrics=metrics,
            protocol=protocol,
            seed=self.seed if self.runs else None,
            wall_s=self.wall_s,
            extra={"rows": [asdict(r) for r in self.rows]},
        )


def idle_audit(
    *,
    length: int,
    steps: int,
    ells: list[int],
    schedule: str = "linear",
    batch: int = 1,
    runs: int = 0,
    seed: int = 0,
    log=None,
) -> IdleAudit:
    """Analytic ISR (one sequence and whole batch), expected NFE, and (``runs`` > 0) the measured ISR
    through the real ancestral sampler, for each ell. ``log(message)`` reports progress."""
    if not ells:
        raise PrimebenchError("no ell given", fix="pass e.g. ells=[1, 2, 3, 4, 6, 8]")
    for name, value in (("length", length), ("steps", steps), ("batch", batch), *(("ell", e) for e in ells)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PrimebenchError(f"{name} must be a positive integer, got {value!r}")
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 0:
        raise PrimebenchError(f"runs must be an integer >= 0, got {runs!r}", fix="0 skips the measurement")
    name = get_schedule(schedule).name
    paper = (length, steps, name) == tuple(PAPER_SETTING.values())
    began = time.perf_counter()
    rows = []
    for ell in ells:
        measured = None
        if runs:
            measured = measure_idle(length, steps, ell, schedule=schedule, runs=runs, seed=seed)
            if log is not None:
                log(f"ell={ell}: {runs} sampler runs at L={length}, T={steps} in {measured.wall_s:.1f} s")
        rows.append(
            IdleRow(
                ell=ell,
                units=length * ell,
                isr=idle_step_ratio(length, steps, ell, schedule),
                isr_batch=idle_step_ratio(length, steps, ell, schedule, batch),
                expected_nfe=expected_nfe(length, steps, ell, schedule),
                expected_nfe_sampler=steps * (1.0 - idle_step_ratio(length, steps, ell, schedule)),
                expected_nfe_batch=expected_nfe(length, steps, ell, schedule, batch),
                paper_percent=PAPER_ISR_PERCENT.get(ell) if paper else None,
                measured=measured,
            )
        )
    return IdleAudit(
        length=length,
        steps=steps,
        schedule=name,
        batch=batch,
        runs=runs,
        seed=seed,
        rows=tuple(rows),
        wall_s=time.perf_counter() - began,
    )


__all__ = [
    "PAPER_ISR_PERCENT",
    "STANDIN_VOCAB",
    "UniformDenoiser",
    "uniform_model",
    "IdleMeasurement",
    "measure_idle",
    "IdleRow",
    "IdleAudit",
    "idle_audit",
]
