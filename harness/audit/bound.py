"""Bound audit: the exact NLL, the valid sub-token bound and the paper's token-joint objective, side by side.

MDM-Prime's L_vb scores each token with the *joint* of its ell sub-tokens, but the continuous-time
sampler reveals one sub-token at a time from the *marginal* of that joint, so the valid upper bound
on -log p_theta(x) uses marginals (``prime.bounds``; worked example in ``docs/bounds.md``).
This module computes, in nats per token:

* :func:`toy_audit`: by enumeration on toy time-independent denoisers, where the exact NLL of the
  sampler is computable: the worked example of ``docs/bounds.md`` (exact 1.0182, token-joint 0.8342),
  ideal models of random one-token data, and random :class:`~prime.toy.TableDenoiser` networks;
  every row is an expectation under its data distribution (for a random network, its own
  distribution p_theta, enumerated over all C^L sequences), so "exact" is then an entropy;
* :func:`checkpoint_audit`: Monte Carlo with standard errors for a trained model on given rows
  (Prime: both estimators; MDLM / masked: the bound; ARM: the exact NLL);
  :func:`audit_checkpoint` loads a checkpoint and scores rows of its validation split with it.

``gap = paper objective - exact``: a negative gap means the paper objective is below the exact
NLL, so it is not an upper bound there. The sub-token bound is never below the exact NLL.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.errors import PrimebenchError

UNITS = "nats/token"
KINDS = {"exact_nll": "exact", "subtoken_bound": "bound", "token_joint": "paper-objective"}
MAX_TOY_STATES = 2**20  # C^L sequences times 2^(L*ell) mask patterns, all enumerated
_STATES_PER_CHUNK = 2**16
BELOW = "paper objective is BELOW the exact NLL: not a bound"
ABOVE = "above exact (bound holds here)"


@dataclass(frozen=True)
class BoundRow:
    """One case, all numbers in nats per token. ``None`` where a number does not apply.

    ``*_stderr`` are Monte-Carlo standard errors (``None`` for enumeration and for exact numbers).
    ``family`` is the model family of a checkpoint row ("toy" for enumerated rows).
    """

    name: str
    method: str  # "enumeration" or "monte-carlo"
    family: str
    exact_nll: float | None
    subtoken_bound: float | None
    token_joint: float | None
    data_entropy: float | None = None
    exact_nll_stderr: float | None = None
    subtoken_bound_stderr: float | None = None
    token_joint_stderr: float | None = None
    tokens: float | None = None

    @property
    def gap(self) -> float | None:
        """paper objective - exact (nats/token); negative: the objective is not a bound here."""
        if self.token_joint is None or self.exact_nll is None:
            return None
        return self.token_joint - self.exact_nll

    @property
    def subtoken_holds(self) -> bool | None:
        """Whether sub-token bound >= exact NLL (up to float64 round-off); None if not both known."""
        if self.subtoken_bound is None or self.exact_nll is None:
            return None
        return self.subtoken_bound >= self.exact_nll - 1e-9 * max(1.0, abs(self.exact_nll))

    @property
    def verdict(self) -> str:
        """The row's finding in plain words."""
        gap = self.gap
        if gap is not None:
            return BELOW if gap < -1e-12 else ABOVE
        if self.token_joint is not None and self.subtoken_bound is not None:
            diff = self.token_joint - self.subtoken_bound
            se = math.hypot(self.token_joint_stderr or 0.0, self.subtoken_bound_stderr or 0.0)
            if diff < -3 * se:
                return (
                    f"paper objective is {-diff:.4f} below the sub-token bound; exact NLL unknown, "
                    "so it cannot be called a bound"
                )
            return "exact NLL unknown; only the sub-token number is a bound"
        if self.exact_nll is not None:
            return "exact likelihood (autoregressive)"
        return "upper bound (continuous-time NELBO)"

    def to_record(self) -> dict[str, Any]:
        """A JSON-ready dict: every number with its kind, unit and (where Monte Carlo) stderr."""
        values = {"exact_nll": self.exact_nll, "subtoken_bound": self.subtoken_bound, "token_joint": self.token_joint}
        stderr = {
            "exact_nll": self.exact_nll_stderr,
            "subtoken_bound": self.subtoken_bound_stderr,
            "token_joint": self.token_joint_stderr,
        }
        return {
            "name": self.name,
            "method": self.method,
            "family": self.family,
            "units": UNITS,
            **values,
            "stderr": {k: v for k, v in stderr.items() if v is not None},
            "kinds": {k: KINDS[k] for k, v in values.items() if v is not None},
            "perplexity": {k: math.exp(v) for k, v in values.items() if v is not None and v < 700},
            "data_entropy": self.data_entropy,
            "tokens": self.tokens,
            "gap_paper_minus_exact": self.gap,
            "subtoken_bound_holds": self.subtoken_holds,
            "verdict": self.verdict,
        }


@dataclass(frozen=True)
class BoundAudit:
    """Rows plus the protocol that produced them (provenance for the JSON record), and the
    checkpoint and its config when the rows come from one."""

    rows: list[BoundRow]
    protocol: dict[str, Any] = field(default_factory=dict)
    checkpoint: str | None = None
    cfg: Any = field(default=None, repr=False, compare=False)

    @property
    def subtoken_always_holds(self) -> bool | None:
        """True if sub-token bound >= exact in every row where both are known (None: no such row)."""
        checks = [r.subtoken_holds for r in self.rows if r.subtoken_holds is not None]
        return all(checks) if checks else None

    def to_record(self, *, checkpoint=None, cfg=None) -> dict[str, Any]:
        """A ``primebench-record/1`` record (evaluation "bound"): one item per row in ``rows``, each
        with its metrics (exact / bound / paper-objective, with stderr where Monte Carlo).
        ``checkpoint`` and ``cfg`` default to the audit's own."""
        from harness.records import Metric, make_record, model_block

        checkpoint = self.checkpoint if checkpoint is None else checkpoint
        cfg = self.cfg if cfg is None else cfg
        items = []
        for r in self.rows:
            detail = r.to_record()
            enumerated = r.method != "monte-carlo"  # exact enumeration: no Monte-Carlo error
            metrics = {
                key: Metric(detail[key], detail["stderr"].get(key, 0.0 if enumerated else None), kind, UNITS)
                for key, kind in KINDS.items()
                if detail.get(key) is not None
            }
            items.append(
                {
                    "metrics": {k: m.to_dict() for k, m in metrics.items()},
                    "protocol": {"case": r.name, "method": r.method, "family": r.family},
                    "data_entropy": detail["data_entropy"],
                    "gap_paper_minus_exact": detail["gap_paper_minus_exact"],
                    "subtoken_bound_holds": detail["subtoken_bound_holds"],
                    "verdict": detail["verdict"],
                }
            )
        if checkpoint is not None:
            model = model_block(checkpoint, cfg)
        else:  # the toy denoisers are Prime's sub-token models with the protocol's ell
            from harness.models import family_class

            prime = family_class("prime")
            label = prime.label(prime.config_class(family="prime", ell=self.protocol.get("ell", 1)))
            model = {"name": "toy models", "family": "prime", "label": label, "order": prime.table_order}
        return make_record(
            "bound",
            model=model,
            metrics={},
            protocol=dict(self.protocol),
            seed=self.protocol.get("seed"),
            extra={"rows": items, "subtoken_bound_always_holds": self.subtoken_always_holds},
        )


# --------------------------------------------------------------------------------------------
# Enumeration on toy denoisers.
# --------------------------------------------------------------------------------------------


def _expectations(denoiser, x0: torch.Tensor, weights: torch.Tensor | None, *, C: int, ell: int):
    """Expected (exact, sub-token, token-joint) nats per token over sequences x0 (S, L).

    ``weights`` (S,) is the data distribution; ``None`` means the model's own p_theta(x0) =
    exp(-exact), which sums to one over all C^L sequences. Sequences are scored in chunks so that
    each call enumerates at most ``_STATES_PER_CHUNK`` (sequence, pattern) pairs.
    """
    from prime.bounds import exact_nll, subtoken_bound, token_joint_objective

    S, L = x0.shape
    chunk = max(1, _STATES_PER_CHUNK // 2 ** (L * ell))
    parts = []
    for start in range(0, S, chunk):
        xs = x0[start : start + chunk]
        parts.append(
            torch.stack([f(denoiser, xs, C=C, ell=ell) for f in (exact_nll, subtoken_bound, token_joint_objective)])
        )
    exact, sub, tok = torch.cat(parts, dim=1)  # each (S,)
    p = torch.exp(-exact) if weights is None else weights.to(exact.dtype)
    total = float(p.sum())
    if not math.isclose(total, 1.0, abs_tol=1e-6):
        raise PrimebenchError(
            f"the toy data distribution sums to {total}, not 1", fix="this is a bug in the toy audit: report it"
        )
    return tuple(float((p * v).sum()) / L for v in (exact, sub, tok))


def _check_toy_size(C: int, ell: int, L: int) -> None:
    from prime.bounds import MAX_ENUMERATED_UNITS

    if min(C, ell, L) < 1 or C < 2:
        raise PrimebenchError(
            f"toy model C={C}, ell={ell}, L={L}: need C >= 2, ell >= 1, L >= 1", fix="e.g. --toy 6,2,2"
        )
    N = L * ell
    if N > MAX_ENUMERATED_UNITS:
        raise PrimebenchError(
            f"the toy audit enumerates 2^(L*ell) mask patterns; L*ell = {L}*{ell} = {N} exceeds the limit "
            f"of {MAX_ENUMERATED_UNITS} units (prime.bounds.MAX_ENUMERATED_UNITS)",
            fix="use a shorter toy sequence L or fewer sub-tokens ell",
        )
    states = C**L * 2**N
    if states > MAX_TOY_STATES:
        raise PrimebenchError(
            f"the toy audit scores all C^L = {C}^{L} sequences under 2^(L*ell) = 2^{N} mask patterns: "
            f"{states} states exceed the limit of {MAX_TOY_STATES}",
            fix="use a smaller C, ell or L (e.g. --toy 6,2,2)",
        )


def toy_audit(C: int = 6, ell: int = 2, L: int = 2, *, seeds: int = 3, seed: int = 0) -> BoundAudit:
    """Enumerated exact NLL, sub-token bound and paper objective on toy models (nats/token).

    Rows: the reference worked example; for each of ``seeds`` seeds, the ideal model of random
    one-token data p ~ Dirichlet(1) over C classes split into ell sub-tokens (the network is the
    true conditional, so exact = data entropy), and a random :class:`~prime.toy.TableDenoiser`
    of shape (C, ell, L) scored on its own distribution.
    """
    from prime.toy import ConstantDenoiser, TableDenoiser, data_entropy, worked_example

    if seeds < 0:
        raise PrimebenchError(f"seeds must be >= 0, got {seeds}", fix="pass --seeds 0 or more")
    _check_toy_size(C, ell, L)
    rows: list[BoundRow] = []
    ex = worked_example()
    exact, sub, tok = _expectations(ex.denoiser, ex.x0, ex.p, C=ex.C, ell=ex.ell)
    rows.append(
        BoundRow(
            name=f"worked example (C={ex.C}, ell={ex.ell}, p=(.45,.05,.05,.45), ideal model)",
            method="enumeration",
            family="toy",
            exact_nll=exact,
            subtoken_bound=sub,
            token_joint=tok,
            data_entropy=data_entropy(ex.p),
            tokens=1.0,
        )
    )
    sequences = torch.tensor(list(itertools.product(range(C), repeat=L)), dtype=torch.long)
    for s in range(seed, seed + seeds):
        g = torch.Generator().manual_seed(s)
        gamma = -torch.log(torch.rand(C, generator=g, dtype=torch.float64))  # Exp(1) draws
        p = gamma / gamma.sum()  # Dirichlet(1, ..., 1)
        exact, sub, tok = _expectations(ConstantDenoiser(torch.log(p)), torch.arange(C)[:, None], p, C=C, ell=ell)
        rows.append(
            BoundRow(
                name=f"ideal model, random data p (C={C}, ell={ell}, seed {s})",
                method="enumeration",
                family="toy",
                exact_nll=exact,
                subtoken_bound=sub,
                token_joint=tok,
                data_entropy=data_entropy(p),
                tokens=1.0,
            )
        )
        den = TableDenoiser(C, ell, L, generator=torch.Generator().manual_seed(s))
        exact, sub, tok = _expectations(den, sequences, None, C=C, ell=ell)
        rows.append(
            BoundRow(
                name=f"random table denoiser (C={C}, ell={ell}, L={L}, seed {s})",
                method="enumeration",
                family="toy",
                exact_nll=exact,
                subtoken_bound=sub,
                token_joint=tok,
                data_entropy=exact,
                tokens=float(L),
            )
        )
    protocol = {
        "source": "toy",
        "C": C,
        "ell": ell,
        "L": L,
        "seeds": list(range(seed, seed + seeds)),
        "data": "worked example: its p; ideal rows: p ~ Dirichlet(1); table rows: the model's own p_theta",
        "method": "enumeration of all 2^(L*ell) mask patterns (prime.bounds)",
    }
    return BoundAudit(rows=rows, protocol=protocol)


# --------------------------------------------------------------------------------------------
# Monte Carlo on a trained checkpoint.
# --------------------------------------------------------------------------------------------


def checkpoint_audit(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    *,
    num_samples: int,
    batch_size: int = 8,
    seed: int = 0,
    name: str = "validation",
) -> BoundAudit:
    """Monte-Carlo NLL numbers of a trained model on ``input_ids`` (N, L), nats per token.

    Prime: the sub-token bound and the paper objective (token-joint), with the same corruption
    draws (same seed), so their difference is estimated more sharply than either number. MDLM /
    masked: the bound (NELBO). ARM: the exact NLL. Time-independent diffusion models use the
    unbiased mask-count sampler ("n"); time-conditioned ones MDLM's time sampler ("t").
    """
    from harness.evaluation.ppl import evaluate_nll

    if num_samples < 2:
        raise PrimebenchError(
            f"--mc-samples must be >= 2 so that a standard error exists, got {num_samples}",
            fix="pass --mc-samples 2 or more",
        )
    if input_ids.shape[0] == 0:
        raise PrimebenchError("no validation rows to score", fix="raise --batches or check the corpus's split")
    family = model.family
    sampler = ("t" if model.time_conditioning else "n") if model.uses_time_sampler else None

    def run(**kwargs):
        return evaluate_nll(
            model,
            input_ids,
            attention_mask,
            batch_size=batch_size,
            num_samples=num_samples,
            seed=seed,
            nll_kwargs=dict(kwargs, time_sampler=sampler),
        )

    label = f"{name} ({input_ids.shape[0]} rows x {input_ids.shape[1]} tokens, K={num_samples})"
    # one row per checkpoint: the family's numbers by kind (exact NLL, valid bound, paper objective)
    by_kind = {est.kind: run(estimator=est.name) for est in model.estimators}
    exact, bound, paper = by_kind.get("exact"), by_kind.get("bound"), by_kind.get("paper-objective")
    first = exact or bound or paper
    row = BoundRow(
        name=label,
        method="exact" if exact is not None else "monte-carlo",
        family=family,
        exact_nll=None if exact is None else exact.nll,
        subtoken_bound=None if bound is None else bound.nll,
        token_joint=None if paper is None else paper.nll,
        **({} if bound is None else {"subtoken_bound_stderr": bound.stderr}),
        **({} if paper is None else {"token_joint_stderr": paper.stderr}),
        tokens=first.tokens,
    )
    protocol = {
        "source": "checkpoint",
        "family": family,
        "rows": int(input_ids.shape[0]),
        "seq_len": int(input_ids.shape[1]),
        "num_samples": num_samples,
        "batch_size": batch_size,
        "seed": seed,
        "time_sampler": sampler,
        "ell": model.units_per_token,
    }
    return BoundAudit(rows=[row], protocol=protocol)


def audit_checkpoint(
    checkpoint, *, mc_samples: int, batches: int, batch_size: int, seed: int = 0, device: str = "cpu", log=None
) -> BoundAudit:
    """:func:`checkpoint_audit` of the checkpoint's model on the first ``batches * batch_size`` rows of
    its validation split, packed as in training; the protocol names the checkpoint and the data.

    ``checkpoint``: any source :func:`harness.load` takes (a folder of ours, ``hf:``, ``mdlm-hf:``,
    ``mdlm-ckpt:``, ``prime-ckpt:``, ``ar-ckpt:``); a release is scored on the split its config
    names (``wiki-embedded:validation``, as ``eval ppl`` does without ``--data``)."""
    import dataclasses
    from pathlib import Path

    from harness.checkpoint import CONFIG, read_checkpoint_config
    from harness.data import get_corpus, get_packed
    from harness.evaluation import load_for_evaluation

    ours = Path(str(checkpoint)).is_dir() and (Path(str(checkpoint)) / CONFIG).is_file()
    # our own folders may need their corpus to rebuild a bpe:V tokenizer; releases carry their tokenizer
    corpus = get_corpus(read_checkpoint_config(Path(checkpoint))[0].data.corpus) if ours else None
    _, model, tokenizer, cfg = load_for_evaluation(checkpoint, device, corpus=corpus)
    corpus = corpus or get_corpus(cfg.data.corpus)
    d = cfg.data
    valid = get_packed(
        corpus,
        d.valid_split,
        tokenizer,
        seq_len=d.seq_len,
        wrap=d.wrap,
        eos_between_docs=d.eos_between_docs,
        remainder=d.remainder,
    )
    n = min(valid.rows, batches * batch_size)
    if log is not None:
        log(f"scoring {n} of {valid.rows} {d.valid_split} rows of {d.corpus} with K={mc_samples}")
    audit = checkpoint_audit(
        model,
        valid.input_ids[:n],
        valid.attention_mask[:n],
        num_samples=mc_samples,
        batch_size=batch_size,
        seed=seed,
        name=f"{d.corpus}:{d.valid_split}",
    )
    return dataclasses.replace(
        audit,
        protocol={
            **audit.protocol,
            "checkpoint": str(checkpoint),
            "corpus": d.corpus,
            "split": d.valid_split,
            "tokenizer": d.tokenizer,
        },
        checkpoint=checkpoint,
        cfg=cfg,
    )


__all__ = [
    "BoundAudit",
    "BoundRow",
    "audit_checkpoint",
    "checkpoint_audit",
    "toy_audit",
    "BELOW",
    "ABOVE",
    "UNITS",
    "KINDS",
]
