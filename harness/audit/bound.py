"""Bound audit: the exact NLL, the valid sub-token bound and the paper's token-joint objective, side by side.

MDM-Prime's L_vb scores each token with the *joint* of its ell sub-tokens, but the continuous-time
sampler reveals one sub-token at a time from the *marginal* of that joint, so the valid upper bound
on -log p_theta(x) uses marginals (``prime.bounds``; worked example in ``docs/bounds.md``).
This module computes, in nats per token:

* :func:`toy_audit`: by enumeration on toy time-independent denoisers, where the exact NLL of the
  sampler is computable: the worked example of ``docs/bounds.md`` (exact 1.0182, token-joint 0.8342),
  ideal models of random one-token data, and random table denoisers; every row is an expectation
  under its data distribution (for a random network, its own distribution p_theta, enumerated over
  all C^L sequences), so "exact" is then an entropy. The enumeration belongs to the Prime family
  (``prime.toy_audit``), which this module reaches through the model registry;
* :func:`unigram_audit`: the ideal one-token model of a real corpus's unigram law at ell = 1, 2, 4
  and binary (MDM-Prime-v2's ceil(log2 C)), with and without index shuffling, where exact NLL and
  sub-token bound are the entropy and the paper objective falls below it;
* :func:`checkpoint_audit`: Monte Carlo with standard errors for a trained model on given rows
  (Prime: both estimators; MDLM / masked: the bound; ARM: the exact NLL);
  :func:`audit_checkpoint` loads a checkpoint and scores rows of its validation split with it.

``gap = paper objective - exact``: a negative gap means the paper objective is below the exact
NLL, so it is not an upper bound there. The sub-token bound is never below the exact NLL.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from harness.checkpoint import CONFIG, read_checkpoint_config
from harness.data import get_corpus, get_packed, get_tokenizer
from harness.errors import InputError, PrimebenchError
from harness.evaluation import load_for_evaluation
from harness.evaluation.ppl import evaluate_nll
from harness.metrics.references import SMOOTHING, fit_counts
from harness.models import family_of_kind
from harness.records import Metric, make_record, model_block

UNITS = "nats/token"
KINDS = {"exact_nll": "exact", "subtoken_bound": "bound", "token_joint": "paper-objective"}
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
    #: the row's own sizes (``C``, ``ell``, ``L``) where they differ from the audit's protocol (the
    #: worked example's C = 4; one-token rows' L = 1); tables show them in the row
    shape: dict[str, int] | None = None

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
                    "protocol": {"case": r.name, "method": r.method, "family": r.family, **(r.shape or {})},
                    "data_entropy": detail["data_entropy"],
                    "gap_paper_minus_exact": detail["gap_paper_minus_exact"],
                    "subtoken_bound_holds": detail["subtoken_bound_holds"],
                    "verdict": detail["verdict"],
                }
            )
        if checkpoint is not None:
            model = model_block(checkpoint, cfg)
        else:  # the toy denoisers are sub-token models (Prime's) with the protocol's ell
            prime = family_of_kind("paper-objective")
            if self.protocol.get("source") == "unigram":  # one ideal model per encoding
                name, label = "ideal unigram models", f"{prime.family}, ell in {', '.join(self.protocol['ells'])}"
            else:
                name = "toy models"
                label = prime.label(prime.config_class(family=prime.family, ell=self.protocol.get("ell", 1)))
            model = {"name": name, "family": prime.family, "label": label, "order": prime.table_order}
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


def toy_audit(
    C: int = 6, ell: int | str = 2, L: int = 2, *, seeds: int = 3, seed: int = 0, shuffle_seed: int | None = None
) -> BoundAudit:
    """Enumerated exact NLL, sub-token bound and paper objective on toy models (nats/token).

    Toy models of C classes, ``ell`` sub-tokens per token and length L (C^L * 2^(L*ell) states at
    most, L*ell <= 16). Rows: the reference worked example; for each of ``seeds`` seeds from
    ``seed``, the ideal model of random one-token data p ~ Dirichlet(1) (exact = data entropy), and
    a random table denoiser of shape (C, ell, L) scored on its own distribution. ``ell="binary"``:
    ceil(log2 C) digits of base 2 (MDM-Prime-v2); ``shuffle_seed``: the ideal rows' classes are
    relabelled by that seed's permutation (index shuffling) before encoding. The enumeration is
    the Prime family's (its ``toy_bound_audit``), found in the model registry as the family with a
    paper-objective estimator.
    """

    prime = family_of_kind("paper-objective")
    return prime.toy_bound_audit(C, ell, L, seeds=seeds, seed=seed, shuffle_seed=shuffle_seed)


#: rows the unigram audit packs its train split in (the ``small`` and ``quickstart`` configs' length)
UNIGRAM_SEQ_LEN = 128


def unigram_audit(tokenizer: str, *, corpus: str = "wiki-embedded", shuffle_seed: int | None = 0) -> BoundAudit:
    """The ideal one-token model of a real corpus's unigram law, at ell = 1, 2, 4 and binary, without
    and with index shuffling (nats/token): exact NLL = sub-token bound = the law's entropy, and the
    paper objective below it by the amounts the rows show.

    The law is the add-one unigram of ``corpus``'s train split under ``tokenizer`` (a spec such as
    ``bpe:1000``, trained on that corpus as the training configs do), packed in rows of 128 tokens
    with EOS between documents as the ``small`` configs train: the unigram reference that ``eval
    ppl`` prints, so no class has probability 0. The sums over mask patterns are the Prime
    family's (its ``unigram_bound_audit``)."""

    source = get_corpus(corpus)
    tok = get_tokenizer(tokenizer, corpus=source)
    split = "train"
    if not source.splits.get(split):
        raise PrimebenchError(f"{corpus} has no {split!r} text to fit a unigram law on", fix="choose another corpus")
    packed = get_packed(source, split, tok, seq_len=UNIGRAM_SEQ_LEN)
    counts = fit_counts(packed.input_ids, packed.attention_mask, vocab_size=tok.vocab_size).n
    p = (counts + 1.0) / (counts.sum() + tok.vocab_size)
    protocol = {
        "corpus": f"{corpus}:{split}",
        "tokenizer": tokenizer,
        "packing": {"seq_len": UNIGRAM_SEQ_LEN, "wrap": True, "eos_between_docs": True},
        "tokens_counted": int(counts.sum()),
        "smoothing": SMOOTHING["unigram"],
    }
    name = f"{corpus}:{split} under {tokenizer}"
    prime = family_of_kind("paper-objective")
    return prime.unigram_bound_audit(p, name=name, shuffle_seed=shuffle_seed, protocol=protocol)


# --------------------------------------------------------------------------------------------
# Monte Carlo on a trained checkpoint.
# --------------------------------------------------------------------------------------------


def _kinds_row(label: str, family: str, by_kind: dict) -> BoundRow:
    """The row of one checkpoint from its results by kind (exact NLL, valid bound, paper objective)."""
    exact, bound, paper = by_kind.get("exact"), by_kind.get("bound"), by_kind.get("paper-objective")
    first = exact or bound or paper
    return BoundRow(
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
    masked: the bound (NELBO). ARM: the exact NLL. The family picks the time sampler with
    ``model.time_sampler(unbiased=True)``: the unbiased mask count ("n") for a time-independent
    network, MDLM's time draw ("t") for a time-conditioned one. ``attention_mask`` (N, L) marks the
    real tokens; a :class:`BoundAudit` of one row comes back.
    """

    if num_samples < 2:
        raise PrimebenchError(
            f"--mc-samples must be >= 2 so that a standard error exists, got {num_samples}",
            fix="pass --mc-samples 2 or more",
        )
    if input_ids.shape[0] == 0:
        raise PrimebenchError("no validation rows to score", fix="raise --batches or check the corpus's split")
    family = model.family
    sampler = model.time_sampler(unbiased=True)

    def run(estimator: str):
        (result,) = evaluate_nll(
            model,
            input_ids,
            attention_mask,
            estimators=[estimator],
            time_sampler=sampler,
            batch_size=batch_size,
            num_samples=num_samples,
            seed=seed,
        )
        return result

    label = f"{name} ({input_ids.shape[0]} rows x {input_ids.shape[1]} tokens, K={num_samples})"
    # one row per checkpoint: the family's numbers by kind (exact NLL, valid bound, paper objective)
    row = _kinds_row(label, family, {est.kind: run(est.name) for est in model.estimators})
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


def _validation(checkpoint, device: str, *, carry_over, ema):
    """``(model, cfg, packed validation rows)`` of a checkpoint, its validation split packed as in
    training."""

    ours = Path(str(checkpoint)).is_dir() and (Path(str(checkpoint)) / CONFIG).is_file()
    # our own folders may need their corpus to rebuild a bpe:V tokenizer; releases carry their tokenizer
    corpus = get_corpus(read_checkpoint_config(Path(checkpoint))[0].data.corpus) if ours else None
    _, model, tokenizer, cfg = load_for_evaluation(checkpoint, device, corpus=corpus, carry_over=carry_over, ema=ema)
    corpus = corpus or get_corpus(cfg.data.corpus)
    d = cfg.data
    packing = dict(wrap=d.wrap, eos_between_docs=d.eos_between_docs, remainder=d.remainder)
    return model, cfg, get_packed(corpus, d.valid_split, tokenizer, seq_len=d.seq_len, **packing)


def audit_checkpoint(
    checkpoint,
    *,
    mc_samples: int,
    batch_size: int,
    max_rows: int | None = None,
    batches: int | None = None,
    seed: int = 0,
    device: str = "cpu",
    carry_over: bool | None = None,
    ema: bool = True,
    log=None,
) -> BoundAudit:
    """:func:`checkpoint_audit` of the checkpoint's model on the first ``max_rows`` rows of its
    validation split (or ``batches * batch_size`` rows, the older spelling: give one of the two),
    packed as in training, scored ``batch_size`` rows at a time with ``mc_samples`` corruptions each;
    the protocol names the checkpoint, the data and the weights.

    ``checkpoint``: any source :func:`harness.load` takes (a folder of ours, ``hf:``, ``mdlm-hf:``,
    ``mdlm-ckpt:``, ``prime-ckpt:``, ``ar-ckpt:``); a release is scored on the split its config
    names (``wiki-embedded:validation``, as ``eval ppl`` does without ``--data``). ``carry_over``:
    Prime's carry-over at evaluation (None: as trained); ``ema``: the EMA weights (default) or the
    raw ones; both are recorded. ``log(message)`` reports progress."""

    if (max_rows is None) == (batches is None):
        raise InputError("give the rows to score as max_rows or as batches, one of the two", fix="pass max_rows=N")
    rows = max_rows if max_rows is not None else batches * batch_size

    model, cfg, valid = _validation(checkpoint, device, carry_over=carry_over, ema=ema)
    d = cfg.data
    n = min(valid.rows, rows)
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
            **model.protocol(),
            "weights": "EMA" if ema else "raw",
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
    "unigram_audit",
    "BELOW",
    "ABOVE",
    "UNITS",
    "KINDS",
]
