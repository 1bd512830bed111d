"""The bound audit's enumeration: exact NLL, sub-token bound and token-joint objective on toy denoisers.

Every number is an expectation computed by enumerating all 2^(L*ell) mask patterns
(:mod:`prime.bounds`) on the toy time-independent denoisers of :mod:`prime.toy`, so the exact NLL of
the sampler is known and the paper objective can be compared with it. :func:`toy_audit` returns the
rows as a :class:`harness.audit.bound.BoundAudit`; ``primebench audit bound`` reaches it through
the Prime family (:meth:`prime.model.Prime.toy_bound_audit`).
"""

from __future__ import annotations

import itertools
import math

import torch

from harness.audit.bound import BoundAudit, BoundRow
from harness.errors import PrimebenchError
from prime.bounds import MAX_ENUMERATED_UNITS, exact_nll, pattern_weights, subtoken_bound, token_joint_objective
from prime.subtokens import binary_ell, subtoken_base, token_permutation
from prime.toy import ConstantDenoiser, TableDenoiser, data_entropy, worked_example

MAX_TOY_STATES = 2**20  # C^L sequences times 2^(L*ell) mask patterns, all enumerated
_STATES_PER_CHUNK = 2**16


def _expectations(denoiser, x0: torch.Tensor, weights: torch.Tensor | None, *, C: int, ell: int):
    """Expected (exact, sub-token, token-joint) nats per token over sequences x0 (S, L).

    ``weights`` (S,) is the data distribution; ``None`` means the model's own p_theta(x0) =
    exp(-exact), which sums to one over all C^L sequences. Sequences are scored in chunks so that
    each call enumerates at most ``_STATES_PER_CHUNK`` (sequence, pattern) pairs.
    """
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


def resolve_ell(C: int, ell: int | str) -> int:
    """``ell`` as digits per token: an integer, or ``"binary"`` for ceil(log2 C) (MDM-Prime-v2)."""
    if ell == "binary":
        return binary_ell(C)
    if isinstance(ell, bool) or not isinstance(ell, int):
        raise PrimebenchError(f"ell must be an integer >= 1 or 'binary', got {ell!r}", fix="e.g. --toy 16,binary,1")
    return ell


def _ell_text(C: int, ell: int | str) -> str:
    return f"ell={resolve_ell(C, ell)} binary" if ell == "binary" else f"ell={ell}"


def _row(
    name: str, values: tuple[float, float, float], entropy: float, tokens: float = 1.0, shape: dict | None = None
) -> BoundRow:
    """One enumerated row: (exact, sub-token bound, paper objective) nats/token and the entropy of
    its data (the model's own for a table denoiser)."""
    exact, sub, tok = values
    return BoundRow(
        name=name,
        method="enumeration",
        family="toy",
        exact_nll=exact,
        subtoken_bound=sub,
        token_joint=tok,
        data_entropy=entropy,
        tokens=tokens,
        shape=shape,
    )


def _shuffled_text(shuffle_seed: int | None) -> str:
    return "" if shuffle_seed is None else f", shuffled by seed {shuffle_seed}"


def toy_audit(
    C: int = 6, ell: int | str = 2, L: int = 2, *, seeds: int = 3, seed: int = 0, shuffle_seed: int | None = None
) -> BoundAudit:
    """Enumerated exact NLL, sub-token bound and paper objective on toy models (nats/token).

    Rows: the reference worked example; for each of ``seeds`` seeds, the ideal model of random
    one-token data p ~ Dirichlet(1) over C classes split into ell sub-tokens (the network is the
    true conditional, so exact = data entropy), and a random :class:`~prime.toy.TableDenoiser`
    of shape (C, ell, L) scored on its own distribution. ``ell="binary"``: ceil(log2 C) digits of
    base 2. ``shuffle_seed``: the ideal rows' data are relabelled by that seed's permutation of the C
    classes before encoding (index shuffling; for the table denoisers a relabelling changes nothing,
    as their weights are random anyway).
    """
    if seeds < 0:
        raise PrimebenchError(f"seeds must be >= 0, got {seeds}", fix="pass --seeds 0 or more")
    spelled = ell
    ell = resolve_ell(C, ell)
    _check_toy_size(C, ell, L)
    rows: list[BoundRow] = []
    ex = worked_example()
    values = _expectations(ex.denoiser, ex.x0, ex.p, C=ex.C, ell=ex.ell)
    name = f"worked example (C={ex.C}, ell={ex.ell}, p=(.45,.05,.05,.45), ideal model)"
    rows.append(_row(name, values, data_entropy(ex.p), shape={"C": ex.C, "ell": ex.ell, "L": int(ex.x0.shape[1])}))
    sequences = torch.tensor(list(itertools.product(range(C), repeat=L)), dtype=torch.long)
    for s in range(seed, seed + seeds):
        g = torch.Generator().manual_seed(s)
        gamma = -torch.log(torch.rand(C, generator=g, dtype=torch.float64))  # Exp(1) draws
        p = gamma / gamma.sum()  # Dirichlet(1, ..., 1)
        if shuffle_seed is not None:
            p = shuffled(p, shuffle_seed)
        values = _expectations(ConstantDenoiser(torch.log(p)), torch.arange(C)[:, None], p, C=C, ell=ell)
        name = f"ideal model, random data p (C={C}, {_ell_text(C, spelled)}, seed {s}{_shuffled_text(shuffle_seed)})"
        rows.append(_row(name, values, data_entropy(p), shape={"C": C, "ell": ell, "L": 1}))
        den = TableDenoiser(C, ell, L, generator=torch.Generator().manual_seed(s))
        values = _expectations(den, sequences, None, C=C, ell=ell)
        name = f"random table denoiser (C={C}, {_ell_text(C, spelled)}, L={L}, seed {s})"
        rows.append(_row(name, values, values[0], tokens=float(L), shape={"C": C, "ell": ell, "L": L}))
    protocol = {
        "source": "toy",
        "C": C,
        "ell": ell,
        "encoding": "binary" if spelled == "binary" else "digits",
        "shuffle_seed": shuffle_seed,
        "L": L,
        "seeds": list(range(seed, seed + seeds)),
        "data": "worked example: its p; ideal rows: p ~ Dirichlet(1); table rows: the model's own p_theta",
        "method": "enumeration of all 2^(L*ell) mask patterns (prime.bounds)",
    }
    return BoundAudit(rows=rows, protocol=protocol)


def shuffled(p: torch.Tensor, shuffle_seed: int) -> torch.Tensor:
    """(C,) a law over tokens -> the law of their codes under index shuffling:
    p_code[code_of[x]] = p[x] (:func:`prime.subtokens.token_permutation`)."""
    code_of = token_permutation(p.shape[0], shuffle_seed)
    return torch.empty_like(p).index_copy_(0, code_of, p)


def ideal_one_token(p: torch.Tensor, ell: int) -> tuple[float, float, float]:
    """(exact NLL, sub-token bound, paper objective), nats, of the ideal model of one-token data ``p``
    (C,) with ``ell`` digits per token, summed over all 2^ell mask patterns S in closed form.

    The ideal denoiser's joint given the revealed digits R = S^c is the true conditional, so
    exact = bound = H(p) (the chain rule holds in every reveal order), and the paper objective is

        sum over S != {} of w(S) * H(X | Y_R) = sum_S w(S) * (H(p) - H(Y_R)),   w(S) = 1 / (n binom(ell, n)),

    with H(Y_R) the entropy of the law of the digits in R (p padded with zeros to base^ell codes,
    summed over the masked digits' axes). The same numbers as enumerating the (token, pattern)
    states (tested), at 2^ell * base^ell work instead of C * 2^ell denoiser rows."""

    C = p.shape[0]
    base = subtoken_base(C, ell)
    H = data_entropy(p)
    grid = torch.nn.functional.pad(p.double(), (0, base**ell - C)).reshape([base] * ell)
    weights = pattern_weights(ell, torch.float64, p.device)  # pattern m masks digit j iff bit j of m is set
    tok = 0.0
    for m in range(1, 2**ell):
        masked_axes = [j for j in range(ell) if (m >> j) & 1]
        q = grid.sum(dim=masked_axes) if len(masked_axes) < ell else grid.sum().reshape(1)
        q = q[q > 0]
        tok += float(weights[m]) * (H + float((q * torch.log(q)).sum()))
    return H, H, tok


#: the encodings the unigram audit compares: digits per token, ``binary`` = ceil(log2 C)
UNIGRAM_ELLS: tuple[int | str, ...] = (1, 2, 4, "binary")


def unigram_audit(
    p: torch.Tensor, *, name: str, ells=UNIGRAM_ELLS, shuffle_seed: int | None = 0, protocol: dict | None = None
) -> BoundAudit:
    """The ideal model of one-token data ``p`` (C,) (a real corpus's unigram law, say) scored at each
    encoding of ``ells`` by enumeration, without and (for ell >= 2, if ``shuffle_seed`` is not None)
    with index shuffling: its exact NLL is the entropy H(p), the sub-token bound is exactly H(p) too
    (the ideal denoiser's marginals are the true ones), and the paper objective falls below H(p) by
    an amount that grows with ell, which no valid bound can do. Each row sums over all 2^ell mask
    patterns in closed form (:func:`ideal_one_token`), so GPT-2's binary ell = 16 is in reach."""
    p = p.double()
    C = p.shape[0]
    H = data_entropy(p)
    rows: list[BoundRow] = []
    for spelled in ells:
        ell = resolve_ell(C, spelled)
        if ell > MAX_ENUMERATED_UNITS:
            raise PrimebenchError(
                f"ell = {ell} exceeds the {MAX_ENUMERATED_UNITS} digits whose 2^ell patterns are summed",
                fix=f"use a vocabulary of at most 2^{MAX_ENUMERATED_UNITS} tokens",
            )
        for seed in (None,) if ell == 1 or shuffle_seed is None else (None, shuffle_seed):
            law = p if seed is None else shuffled(p, seed)
            case = f"ideal unigram model of {name} (C={C}, {_ell_text(C, spelled)}{_shuffled_text(seed)})"
            rows.append(_row(case, ideal_one_token(law, ell), H, shape={"C": C, "ell": ell, "L": 1}))
    meta = {
        "source": "unigram",
        "data": name,
        "C": C,
        "ells": [str(e) for e in ells],
        "shuffle_seed": shuffle_seed,
        "method": "all 2^ell mask patterns of the ideal one-token model, in closed form (ideal_one_token)",
    }
    return BoundAudit(rows=rows, protocol={**meta, **(protocol or {})})


__all__ = ["MAX_TOY_STATES", "UNIGRAM_ELLS", "ideal_one_token", "resolve_ell", "shuffled", "toy_audit", "unigram_audit"]
