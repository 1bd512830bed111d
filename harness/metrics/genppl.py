"""Generative perplexity, as MDLM's ``compute_generative_perplexity`` defines it.

For each sample: decode the model's ids to text, retokenise with the judge's tokenizer, truncate to
``max_length`` judge tokens (MDLM: the model length, 1024), pad with the judge's EOS, run the judge
on windows of its context, and take the next-token NLL of every target that is not EOS plus the
first EOS (MDLM's mask ``first_eos + (ids != eos)``; later EOS excluded). Padding added to
batch samples of different lengths is never counted, so a sample's contribution does not depend
on the other samples in its batch. Gen PPL is
token-weighted over all samples, exp(sum nats / sum counted targets), never a mean of
per-sample perplexities, and no sample is dropped.

Its standard error is the delta-method error of the ratio estimator over samples (a sampling
error of the estimate with this many samples), reported with kind "estimate".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from harness.errors import InputError, NumericalError
from harness.metrics.base import Accumulator


@dataclass(frozen=True)
class GenPPLResult:
    gen_ppl: float
    stderr: float
    nll: float
    targets: int
    samples: int
    truncated: int


def counted_targets(ids: torch.Tensor, eos_id: int) -> torch.Tensor:
    """(B, T) judge ids -> (B, T-1) bool: targets counted by MDLM's rule (non-EOS, plus the first EOS)."""
    is_eos = ids == eos_id
    first_eos = is_eos & (is_eos.long().cumsum(-1) == 1)
    return (first_eos | ~is_eos)[:, 1:]


class GenPPL(Accumulator):
    """update/compute with float64 per-sample sums; batch composition does not change the result.

    States (joined over ranks): ``nats`` and ``counts``, the per-sample sums of counted nats and
    counted targets, and ``truncated_flags``, whether each retokenised sample was truncated.
    """

    def __init__(self) -> None:
        super().__init__()
        self.add_state("nats", [], dist_reduce_fx="cat")
        self.add_state("counts", [], dist_reduce_fx="cat")
        self.add_state("truncated_flags", [], dist_reduce_fx="cat")

    @property
    def truncated(self) -> int:
        """How many samples were truncated to ``max_length`` judge tokens."""
        return sum(self.truncated_flags)

    def update(self, nats: torch.Tensor, counted: torch.Tensor) -> None:
        """``nats`` (B, T-1) per-target NLL and ``counted`` (B, T-1) bool from :func:`counted_targets`."""
        w = counted.double()
        self.add((nats.double() * w).sum(-1), w.sum(-1))

    def add(self, sample_nats: torch.Tensor, sample_counts: torch.Tensor) -> None:
        """Per-sample sums (B,) of counted nats and counted targets."""
        self.nats.extend(sample_nats.double().tolist())
        self.counts.extend(sample_counts.double().tolist())

    def compute(self) -> GenPPLResult:
        a = torch.tensor(self.nats, dtype=torch.float64)
        n = torch.tensor(self.counts, dtype=torch.float64)
        if n.numel() == 0 or n.sum() <= 0:
            raise InputError("Gen PPL needs at least one scored judge token")
        ratio = float(a.sum() / n.sum())
        N = a.numel()
        if N > 1:
            resid = a - ratio * n
            se = math.sqrt(float((resid**2).sum()) / (N - 1) / N) / float(n.mean())
        else:
            se = float("nan")
        return GenPPLResult(
            gen_ppl=math.exp(ratio),
            stderr=math.exp(ratio) * se,
            nll=ratio,
            targets=int(n.sum()),
            samples=N,
            truncated=self.truncated,
        )


def separator_ids(tokenizer) -> list[int]:
    """The model's separator ids (its BOS and EOS; GPT-2 uses one id for both)."""
    return sorted(
        {i for i in (getattr(tokenizer, "bos_id", None), getattr(tokenizer, "eos_id", None)) if i is not None}
    )


def to_judge_ids(tokens: list[int], tokenizer, judge) -> list[int]:
    """A sample's model ids -> the judge's ids: text between separators is decoded and re-encoded
    with the judge's tokenizer, and each model separator becomes the judge's own EOS.

    Decoding the separator as text instead (``<|endoftext|>``) makes the judge score it as about ten
    ordinary tokens and hides it from the "non-EOS plus first EOS" rule; MDLM's GPT-2 round trip maps
    it back to the one EOS id, which is what this does for every judge."""
    seps = set(separator_ids(tokenizer))
    out: list[int] = []
    segment: list[int] = []
    for token in tokens:
        if token in seps:
            if segment:
                out.extend(judge.encode(tokenizer.decode(segment)))
                segment = []
            out.append(int(judge.eos_id))
        else:
            segment.append(int(token))
    if segment:
        out.extend(judge.encode(tokenizer.decode(segment)))
    return out


def score_texts(judge, texts: list[str], *, max_length: int, batch_size: int = 8):
    """Score decoded samples with a judge (plain text, no separators). Returns ``(GenPPL metric,
    judge ids per sample)``; samples with separators go through :func:`to_judge_ids` and
    :func:`score_ids`."""
    return score_ids(judge, [judge.encode(t) for t in texts], max_length=max_length, batch_size=batch_size)


def score_ids(judge, samples: list[list[int]], *, max_length: int, batch_size: int = 8, features: bool = False):
    """Score samples given as judge ids. Returns ``(GenPPL metric, judge ids per sample)``. With
    ``features``, ``metric.features`` is also filled: (N, D) MAUVE features, the last-layer hidden
    state at each sample's last token of the first window (what :meth:`harness.judges.Judge.features`
    computes), taken from the scoring pass itself when the judge returns hidden states."""
    metric = GenPPL()
    feats: list[torch.Tensor] = []
    all_ids: list[list[int]] = []
    window = min(max_length, judge.context)
    for start in range(0, len(samples), batch_size):
        encoded = [list(ids) for ids in samples[start : start + batch_size]]
        for ids in encoded:
            metric.truncated_flags.append(len(ids) > max_length)
        encoded = [ids[:max_length] for ids in encoded]
        encoded = [ids if ids else [judge.eos_id] for ids in encoded]
        all_ids.extend(encoded)
        T = max(len(ids) for ids in encoded)
        batch = torch.full((len(encoded), T), judge.eos_id, dtype=torch.long)
        for i, ids in enumerate(encoded):
            batch[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        # windows of the judge's context, as MDLM splits long retokenised samples; the counting
        # rule is applied to the whole retokenised sample, then summed per sample over windows
        counted = counted_targets(batch, judge.eos_id)  # (B, T-1)
        # only a sample's own tokens count: padding EOS is never a target, so the number does not
        # depend on which other samples share the batch (MDLM's code also counts the first padding
        # EOS of a sample shorter than the longest in its batch)
        lengths = torch.tensor([len(ids) for ids in encoded])
        counted &= torch.arange(1, T)[None, :] < lengths[:, None]
        sums = torch.zeros(len(encoded), dtype=torch.float64)
        for w0 in range(0, T, window):
            piece = batch[:, w0 : w0 + window]
            if piece.shape[1] < 2:
                continue
            hidden = [] if features and w0 == 0 else None
            mask = torch.ones_like(piece)
            nats = (judge.target_nll(piece, mask) if hidden is None else judge.target_nll(piece, mask, hidden)).double()
            if hidden is not None:
                last = torch.tensor([min(len(ids), window) - 1 for ids in encoded])
                feats.append(
                    hidden[0][torch.arange(len(encoded)), last]
                    if hidden
                    else judge.features(encoded, max_length=max_length, batch_size=len(encoded))
                )
            if not bool(torch.isfinite(nats).all()):  # the samples are ids: a NaN here is the judge's
                raise NumericalError(
                    f"the judge {judge.spec!r} gave non-finite log-likelihoods to the samples "
                    "(its outputs are NaN or inf); no Gen PPL can be computed",
                    fix="pass a judge whose weights and outputs are finite (--judge smollm2, or re-download the judge)",
                )
            sums += (nats * counted[:, w0 : w0 + piece.shape[1] - 1].double()).sum(-1)
        if features and len(feats) < start // batch_size + 1:  # a batch too short to score still needs them
            feats.append(judge.features(encoded, max_length=max_length, batch_size=len(encoded)))
        counts = torch.zeros(len(encoded), dtype=torch.float64)
        for w0 in range(0, T, window):
            width = min(window, T - w0)
            if width >= 2:
                counts += counted[:, w0 : w0 + width - 1].double().sum(-1)
        metric.add(sums, counts)
    if features:
        metric.features = torch.cat(feats)
    return metric, all_ids
