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
from prime.bounds import MAX_ENUMERATED_UNITS, exact_nll, subtoken_bound, token_joint_objective
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


def toy_audit(C: int = 6, ell: int = 2, L: int = 2, *, seeds: int = 3, seed: int = 0) -> BoundAudit:
    """Enumerated exact NLL, sub-token bound and paper objective on toy models (nats/token).

    Rows: the reference worked example; for each of ``seeds`` seeds, the ideal model of random
    one-token data p ~ Dirichlet(1) over C classes split into ell sub-tokens (the network is the
    true conditional, so exact = data entropy), and a random :class:`~prime.toy.TableDenoiser`
    of shape (C, ell, L) scored on its own distribution.
    """
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


__all__ = ["MAX_TOY_STATES", "toy_audit"]
