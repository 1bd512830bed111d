"""Sub-tokenization of MDM-Prime: a token id becomes ``ell`` base-``base`` digits.

A token x in {0, ..., C-1} is written in base ``base`` with ``ell`` digits, most significant first
(MDM-Prime, encoder f and decoder f^{-1}):

    y^j = floor(x / base**(ell - j)) mod base,   j = 1..ell
    x   = sum_j y^j * base**(ell - j)

The base is the smallest integer with base**ell >= C (the paper's ceil(C**(1/ell)), computed here
with integers only). Since base**ell is usually larger than C, some digit strings (codes >= C) are
invalid; the carry-over parameterization gives them no probability (see :func:`consistent`).

The masked sub-token has id ``base`` (:func:`mask_id`), so a partially masked sub-token takes values
in {0, ..., base}, an alphabet of base + 1 symbols.

Reference bases (tested in ``tests/prime/test_subtokens.py``):

    GPT-2 text, C = 50257:   ell 2 -> 225, 3 -> 37, 4 -> 15, 6 -> 7, 8 -> 4
    8-bit image pixels, C = 256:   ell 2 -> 16, 3 -> 7, 4 -> 4, 8 -> 2

With ell = 1 the base is C and the mask id is C: MDLM's vocabulary with one extra mask token.
"""

from __future__ import annotations

from functools import lru_cache

import torch

from harness.errors import PrimebenchError

_INT64_MAX = 2**63 - 1


def subtoken_base(C: int, ell: int) -> int:
    """Smallest base b with b**ell >= C: b >= 2, except b = 1 for C = 1 (and b = C for ell = 1).

    Integer arithmetic only (a binary search), so no float root can round the wrong way.
    """
    if isinstance(C, bool) or not isinstance(C, int) or C < 1:
        raise PrimebenchError(
            f"vocabulary size C must be an integer >= 1, got {C!r}",
            fix="pass the number of token classes, e.g. C=50257 for GPT-2",
        )
    if isinstance(ell, bool) or not isinstance(ell, int) or ell < 1:
        raise PrimebenchError(
            f"sub-tokens per token ell must be an integer >= 1, got {ell!r}",
            fix="pass ell >= 1 (ell = 1 is plain MDLM)",
        )
    if C == 1:
        return 1
    lo, hi = 2, C  # hi**ell >= C always holds
    while lo < hi:
        mid = (lo + hi) // 2
        if mid**ell >= C:
            hi = mid
        else:
            lo = mid + 1
    return lo


def mask_id(base: int) -> int:
    """Id of the masked sub-token: ``base`` (one past the largest digit ``base - 1``)."""
    return base


def _check_code(C: int, base: int, ell: int) -> None:
    """Raise unless ``base``-ary strings of length ``ell`` can hold C classes in int64."""
    if C < 1 or ell < 1 or base < 1:
        raise PrimebenchError(
            f"invalid sub-token code C={C}, base={base}, ell={ell}",
            fix="need C >= 1, base >= 1, ell >= 1; use subtoken_base(C, ell)",
        )
    if base**ell < C:
        raise PrimebenchError(
            f"base {base} with ell = {ell} digits holds {base**ell} < C = {C} codes",
            fix=f"use base = subtoken_base({C}, {ell}) = {subtoken_base(C, ell)}",
        )
    if base**ell > _INT64_MAX:
        raise PrimebenchError(f"base**ell = {base}**{ell} does not fit in int64", fix="use a smaller ell or base")


def _powers(base: int, ell: int, device: torch.device) -> torch.Tensor:
    """(ell,) tensor [base**(ell-1), ..., base, 1]: place values, most significant first."""
    return torch.tensor([base ** (ell - j) for j in range(1, ell + 1)], dtype=torch.long, device=device)


def encode(x: torch.Tensor, base: int, ell: int) -> torch.Tensor:
    """Token ids (...) -> digits (..., ell), most significant first: y^j = (x // base**(ell-j)) % base."""
    _check_code(1, base, ell)
    if x.dtype != torch.long:
        raise PrimebenchError(f"encode needs int64 token ids, got dtype {x.dtype}", fix="pass x.long()")
    if x.numel() and (int(x.min()) < 0 or int(x.max()) >= base**ell):
        raise PrimebenchError(
            f"token ids must lie in [0, {base**ell}) for base {base}, ell {ell}; "
            f"got range [{int(x.min())}, {int(x.max())}]",
            fix="check the tokenizer's vocabulary size against C",
        )
    return torch.div(x[..., None], _powers(base, ell, x.device), rounding_mode="floor") % base


def decode(y: torch.Tensor, base: int) -> torch.Tensor:
    """Digits (..., ell), most significant first, all unmasked -> token ids (...)."""
    ell = y.shape[-1]
    _check_code(1, base, ell)
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= base):
        raise PrimebenchError(
            f"decode needs unmasked digits in [0, {base}); got range [{int(y.min())}, {int(y.max())}]"
            f" (the mask id is {mask_id(base)})",
            fix="decode only fully revealed sub-token sequences",
        )
    return (y.long() * _powers(base, ell, y.device)).sum(-1)


@lru_cache(maxsize=32)
def _digit_table_cached(C: int, base: int, ell: int, device: str) -> torch.Tensor:
    return encode(torch.arange(C, device=device), base, ell)


def digit_table(C: int, base: int, ell: int, *, device: torch.device | str = "cpu") -> torch.Tensor:
    """(C, ell) int64 digits of every valid class c < C, most significant first.

    Cached per (C, base, ell, device) so the hot path (:func:`consistent`) does not rebuild it;
    the returned tensor is shared: treat it as read-only.
    """
    _check_code(C, base, ell)
    return _digit_table_cached(C, base, ell, str(torch.device(device)))


def consistent(y_t: torch.Tensor, C: int, base: int, ell: int) -> torch.Tensor:
    """(..., ell) partially masked sub-tokens -> (..., C) bool mask of V(y_t^i).

    V(y_t^i) = {valid codes c < C : for every j, digit_j(c) == y_t^{i,j} or y_t^{i,j} == base (mask)}
    (MDM-Prime, carry-over parameterization). Codes >= C are never in V: only C classes exist.

    Memory: the result has prod(...) * C bools (B * L * C bytes; 16 * 1024 * 50257 is ~0.8 GB
    for GPT-2), and the loop over the ell digits keeps only one more temporary of that size;
    the naive (..., C, ell) comparison would cost ell times more.
    """
    if y_t.shape[-1] != ell:
        raise PrimebenchError(
            f"y_t must have last dimension ell = {ell}, got shape {tuple(y_t.shape)}",
            fix="pass sub-tokens of shape (B, L, ell)",
        )
    table = digit_table(C, base, ell, device=y_t.device)  # (C, ell)
    ok = torch.ones(*y_t.shape[:-1], C, dtype=torch.bool, device=y_t.device)
    for j in range(ell):
        y_j = y_t[..., j, None]  # (..., 1)
        ok &= (table[:, j] == y_j) | (y_j == mask_id(base))
    return ok


def binary_ell(C: int) -> int:
    """MDM-Prime-v2's binary encoding: ell = ceil(log2 C) digits of base 2 (1 for C <= 2), computed
    with integers: (C - 1).bit_length()."""
    if isinstance(C, bool) or not isinstance(C, int) or C < 1:
        raise PrimebenchError(f"vocabulary size C must be an integer >= 1, got {C!r}", fix="pass e.g. C=50257")
    return max(1, (C - 1).bit_length())


def token_permutation(C: int, seed: int) -> torch.Tensor:
    """Index shuffling (MDM-Prime-v2): a seeded permutation ``code_of`` (C,) int64 of the token ids,
    token x is encoded as the digits of ``code_of[x]``. It permutes [0, C) only, so codes >= C stay
    invalid (carry-over still gives them nothing); drawn on the CPU with ``torch.randperm`` from a
    generator seeded with ``seed``, so the same seed gives the same permutation on every machine."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise PrimebenchError(f"the shuffle seed must be an integer >= 0, got {seed!r}", fix="set model.shuffle_seed")
    return torch.randperm(C, generator=torch.Generator().manual_seed(seed))


def check_permutation(code_of: torch.Tensor, C: int) -> None:
    """Raise unless ``code_of`` (C,) is a permutation of 0..C-1 (a stored shuffle read back)."""
    if code_of.shape != (C,) or code_of.dtype != torch.long:
        raise PrimebenchError(
            f"the stored token shuffle has shape {tuple(code_of.shape)} and dtype {code_of.dtype}, not ({C},) int64",
            fix="the checkpoint does not belong to this vocabulary: load it with its own tokenizer",
        )
    if not torch.equal(torch.sort(code_of.cpu()).values, torch.arange(C)):
        raise PrimebenchError(
            "the stored token shuffle is not a permutation of the token ids", fix="the checkpoint is corrupt: retrain"
        )
