"""The categorical draws of primebench: :func:`sample_categorical` and :func:`sample_inverse_cdf`.

Why few functions: the precision of a draw changes published numbers (Zheng et al. 2409.02908
Sec. 5.2-5.3: MDLM's float32 Gumbel draw lowers the effective temperature, Gen PPL 31 vs 126). So the
precision is a single parameter, ``dtype``, and **the conversion of probabilities or logits to that
dtype happens in these two functions and nowhere else**: callers pass model outputs in whatever
dtype they have, and the precision audit is the same sampler, same seed, two dtypes.

Which draw is made where:

* :func:`sample_inverse_cdf` (one uniform per row): the token of each revealed unit in the default
  two-stage ancestral draw (``draw="two-stage"``), whose reveal decisions are float64 Bernoulli
  draws made by ``torch.rand`` in :mod:`harness.sampling.ancestral`;
* :func:`sample_categorical` (a ``method`` in ``dtype``): every other categorical draw, i.e. the
  joint ancestral draw (``draw="joint"``, through the family's ``joint_draw``), first-hitting's
  choice of unit and its value (its reveal times are float64 ``torch.rand`` inversions), MaskGIT's
  candidates, noise removal by sampling, the redraw of invalid Prime codes and the autoregressive
  sampler.

Temperature and nucleus filtering shape the token distribution before a draw; their settings are
validated once (:func:`check_temperature`, :func:`check_nucleus`) when a sampler's settings are
built, and :func:`apply_temperature` / :func:`nucleus_filter` check them for direct callers.

Methods (all take the argmax over the last dim, shapes ``(..., C) -> (...)``):

* ``gumbel``       argmax(log p + G), G = -log(-log U)                 (Gumbel-max)
* ``race``         argmax(p / E),     E = -log U                        (exponential race; equals
                   Gumbel-max since log p - log E = log p + G)
* ``mdlm-legacy``  argmax(p / (1e-10 - log(U + 1e-10)))                 (MDLM's ``_sample_categorical``,
                   offsets included, with U drawn in ``dtype``: float32 reproduces MDLM's default)

U is drawn by ``torch.rand`` in ``dtype``. Its values lie on a grid: k * 2^-24 for float32 and
k * 2^-53 for float64 (k = 0 .. 2^b - 1). The largest value 1 - 2^-b caps the Gumbel noise at
M = -log(-log(1 - 2^-b)) (16.64 in float32, 36.74 in float64): this is the truncation that Zheng et
al. analyse. The grid below the cap matters as well: float32 distorts about half as much as their
continuous truncated model predicts (:mod:`harness.audit.gumbel`;
``tests/harness/sampling/test_categorical.py`` checks the grid). The smallest value is 0
(probability 2^-b), where log(0) would give -inf/NaN arithmetic: ``gumbel`` and ``race`` use U in
[tiny, 1) via ``clamp_min(torch.finfo(dtype).tiny)``, so U = 0 becomes G = -log(87.3) (float32) or
-log(708.4) (float64) instead of -inf, a change of probability O(2^-b) that is far below the
truncation at the top. ``mdlm-legacy`` keeps MDLM's 1e-10 offsets.

Zero-probability classes (p = 0, or logit = -inf) get score -inf and are never drawn, whatever the
method and however small the other scores are. Probabilities need not be normalised (every method is
invariant to a positive scale per row); NaN, negative or infinite probabilities are an error.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable

import torch

from harness.errors import PrimebenchError
from harness.registry import Registry

DTypeLike = torch.dtype | str

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float64": torch.float64,
    "fp64": torch.float64,
}
DTYPE_NAMES: tuple[str, ...] = ("float32", "float64")  # the names options offer (fp32/fp64 also parse)


def parse_dtype(dtype: DTypeLike) -> torch.dtype:
    """``torch.float32`` / ``torch.float64`` or one of "float32", "fp32", "float64", "fp64"."""
    if isinstance(dtype, torch.dtype):
        if dtype in (torch.float32, torch.float64):
            return dtype
    elif isinstance(dtype, str) and dtype.strip().lower().removeprefix("torch.") in _DTYPES:
        return _DTYPES[dtype.strip().lower().removeprefix("torch.")]
    raise PrimebenchError(
        f"unsupported categorical sampling dtype {dtype!r}",
        fix="use float32 (MDLM's default, truncated Gumbel noise) or float64 (the fair-evaluation setting)",
    )


def _draw_uniform(
    shape: torch.Size, *, dtype: torch.dtype, device: torch.device, generator: torch.Generator | None
) -> torch.Tensor:
    """U ~ Uniform[0, 1) in ``dtype`` on ``torch.rand``'s grid (kept separate so tests can audit it)."""
    return torch.rand(shape, dtype=dtype, device=device, generator=generator)


def _gumbel(p: torch.Tensor, log_p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    u = u.clamp_min(torch.finfo(u.dtype).tiny)
    return log_p - torch.log(-torch.log(u))


def _race(p: torch.Tensor, log_p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    u = u.clamp_min(torch.finfo(u.dtype).tiny)
    return p / -torch.log(u)


def _mdlm_legacy(p: torch.Tensor, log_p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    # MDLM diffusion.py `_sample_categorical`, verbatim arithmetic (offsets included).
    return p / (1e-10 - torch.log(u + 1e-10))


_Scorer = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
_METHODS: Registry[_Scorer] = Registry("categorical sampling method")
_METHODS.register("gumbel", _gumbel)
_METHODS.register("race", _race)
_METHODS.register("mdlm-legacy", _mdlm_legacy)

METHODS: tuple[str, ...] = ("gumbel", "race", "mdlm-legacy")


def check_probs(probs: torch.Tensor, total: torch.Tensor | None = None, dtype=None) -> None:
    """Refuse probabilities that cannot be drawn from: not floating, no class, NaN, negative or inf
    entries, a row without mass; with ``total`` (the rows' sums in the draw's ``dtype``), also a row whose
    sum underflows to zero there. Every test is read from the device at once."""
    if not probs.is_floating_point():
        raise PrimebenchError(
            f"probs must be a floating tensor, got {probs.dtype}", fix="pass probabilities, or pass logits= instead"
        )
    if probs.shape[-1:] == (0,) or probs.dim() == 0:
        raise PrimebenchError(f"probs must have a non-empty class dim (last), got shape {tuple(probs.shape)}")
    # both tests in one host read (one device synchronisation on a GPU); NaN fails the first
    tests = [((probs >= 0) & (probs < float("inf"))).all(), (probs.sum(-1) <= 0).any()]
    if total is not None:
        tests.append((total <= 0).any())
    valid, empty, *underflow = torch.stack(tests).tolist()
    if not valid:
        if bool(torch.isnan(probs).any()):
            raise PrimebenchError("probs contain NaN", fix="check the model output (log_softmax, then exp)")
        if bool((probs < 0).any()):
            raise PrimebenchError("probs contain negative values", fix="pass probabilities >= 0 (or logits=)")
        raise PrimebenchError("probs contain inf", fix="pass finite probabilities (or logits=)")
    if empty:
        raise PrimebenchError(
            "a row of probs is all zero: there is no category to draw",
            fix="every row needs at least one positive probability",
        )
    if underflow and underflow[0]:
        raise PrimebenchError(
            f"a row of probs underflows to zero in {dtype}",
            fix="normalise the probabilities first, or sample in float64",
        )


def _check_logits(logits: torch.Tensor) -> None:
    if not logits.is_floating_point():
        raise PrimebenchError(f"logits must be a floating tensor, got {logits.dtype}")
    if logits.shape[-1:] == (0,) or logits.dim() == 0:
        raise PrimebenchError(f"logits must have a non-empty class dim (last), got shape {tuple(logits.shape)}")
    if bool(torch.isnan(logits).any()):
        raise PrimebenchError("logits contain NaN", fix="check the model output")
    if bool((logits == float("inf")).any()):
        raise PrimebenchError("logits contain +inf", fix="mask classes with -inf, never +inf")
    if bool((logits == float("-inf")).all(-1).any()):
        raise PrimebenchError(
            "a row of logits is all -inf: there is no category to draw", fix="every row needs at least one finite logit"
        )


def sample_categorical(
    probs: torch.Tensor | None = None,
    logits: torch.Tensor | None = None,
    *,
    method: str = "gumbel",
    dtype: DTypeLike = torch.float64,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Draw one category per row: ``(..., C) -> LongTensor (...)``.

    Exactly one of ``probs`` (>= 0, need not be normalised) or ``logits`` (unnormalised log-probs,
    -inf for impossible classes). ``method`` is one of :data:`METHODS`; ``dtype`` (float32/float64 or
    their names) is the precision of the uniforms **and** of the scores: the input is converted to
    it here (the only other place is :func:`sample_inverse_cdf`). ``generator`` must live on the
    input's device; the same generator state gives the same draws.
    """
    scorer = _METHODS.get(method)
    dtype = parse_dtype(dtype)
    if (probs is None) == (logits is None):
        raise PrimebenchError("sample_categorical needs exactly one of probs= or logits=")
    if probs is not None:
        check_probs(probs)
        p = probs.to(dtype)
        impossible = p == 0
        if bool(impossible.all(-1).any()):
            raise PrimebenchError(
                f"a row of probs underflows to zero in {dtype}",
                fix="normalise the probabilities first, or sample in float64",
            )
        log_p = torch.log(p) if method == "gumbel" else p  # log_p is unused by race/mdlm-legacy
    else:
        _check_logits(logits)
        log_p = logits.to(dtype)
        impossible = log_p == float("-inf")
        p = torch.softmax(log_p, dim=-1) if method != "gumbel" else log_p
    u = _draw_uniform(p.shape, dtype=dtype, device=p.device, generator=generator)
    scores = scorer(p, log_p, u).masked_fill(impossible, float("-inf"))
    return scores.argmax(dim=-1)


def sample_inverse_cdf(
    probs: torch.Tensor, *, dtype: DTypeLike = torch.float64, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Draw one category per row by inverting the CDF with one uniform: ``(..., C) -> LongTensor (...)``.

    The probabilities (>= 0, need not be normalised) are summed in ``dtype`` and U ~ ``torch.rand``
    in ``dtype`` picks the class k with cdf_{k-1} <= U * total < cdf_k; a class of zero probability
    has an empty interval and is never drawn. One random number per row instead of C, and no Gumbel
    cap: the grid of U (2^-24 in float32) moves each class's mass by at most one grid cell, with no
    systematic loss of the rare classes (``harness.audit.gumbel.grid_inverse_cdf_probs`` gives the
    exact law). The two-stage ancestral draw uses it for the token of each revealed unit.
    """
    dtype = parse_dtype(dtype)
    if not probs.is_floating_point() or probs.dim() == 0 or probs.shape[-1] == 0:
        check_probs(probs)  # refused before any arithmetic
    cdf = torch.cumsum(probs.to(dtype), dim=-1)
    total = cdf[..., -1:]
    check_probs(probs, total, dtype)
    u = _draw_uniform(total.shape, dtype=dtype, device=cdf.device, generator=generator) * total
    u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))  # U * total < total: a real class
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_max(probs.shape[-1] - 1)


#: ``cross``: the smallest set of top classes whose mass reaches p (the class that crosses p is kept;
#: Holtzman et al., HF transformers, DUO). ``below``: the top classes whose cumulative mass, their own
#: included, is <= p, and always the most likely one (BD3-LMs and MDM-Prime's code).
NUCLEUS_RULES = ("cross", "below")


def check_nucleus(p: float, rule: str = "cross") -> tuple[float, str]:
    """The nucleus mass ``p`` (a number in (0, 1]; 1 is off) and ``rule`` (one of
    :data:`NUCLEUS_RULES`), checked: ``(float(p), rule)``, or a :class:`PrimebenchError`."""
    if not (isinstance(p, numbers.Real) and 0.0 < p <= 1.0):
        raise PrimebenchError(f"nucleus p must lie in (0, 1], got {p!r}", fix="use e.g. 0.9, or 1.0 (off)")
    if rule not in NUCLEUS_RULES:
        raise PrimebenchError(f"unknown nucleus rule {rule!r}", fix=f"use one of {', '.join(NUCLEUS_RULES)}")
    return float(p), rule


#: the temperatures a sampler takes: below 1e-3 logits / T overflow to inf (then NaN probabilities)
#: for ordinary logits, and the draw is the argmax already; above 1e3 it is the uniform distribution
TEMPERATURE_RANGE = (1e-3, 1e3)


def check_temperature(temperature: float) -> float:
    """``temperature`` in :data:`TEMPERATURE_RANGE`, checked: ``float(temperature)``, or a :class:`PrimebenchError`."""
    low, high = TEMPERATURE_RANGE
    if not (isinstance(temperature, numbers.Real) and low <= temperature <= high):
        raise PrimebenchError(
            f"temperature must lie in [{low:g}, {high:g}], got {temperature!r}",
            fix="use 1.0 for no change; < 1 sharpens, > 1 flattens (below 1e-3 the draw is the argmax already)",
        )
    return float(temperature)


def nucleus_filter(probs: torch.Tensor, p: float, rule: str = "cross") -> torch.Tensor:
    """Top-p (nucleus) filtering of ``probs`` (..., C) over the last dim by ``rule`` (see
    :data:`NUCLEUS_RULES`; ties in the order of ``torch.sort``), zero the rest, renormalise: (..., C)
    in the input's dtype (the sampling dtype is applied by the draw). ``p = 1`` returns ``probs``
    unchanged. ``p`` and ``rule`` are checked (:func:`check_nucleus`)."""
    check_nucleus(p, rule)
    return filter_nucleus(probs, p, rule)


def filter_nucleus(probs: torch.Tensor, p: float, rule: str) -> torch.Tensor:
    """:func:`nucleus_filter` with ``p`` and ``rule`` already checked (the samplers' settings are)."""
    if p == 1.0:
        return probs
    check_probs(probs)
    q = probs / probs.sum(-1, keepdim=True)
    sorted_q, order = torch.sort(q, dim=-1, descending=True)
    if rule == "below":
        keep_sorted = torch.cumsum(sorted_q, dim=-1) <= p
        keep_sorted[..., 0] = True
    else:
        mass_before = torch.cumsum(sorted_q, dim=-1) - sorted_q  # mass of strictly more likely classes
        # A class is needed while the mass before it is still short of p; the slack makes a set whose
        # mass equals p up to rounding (e.g. .5 + .3 for p = .8) count as reaching it.
        keep_sorted = mass_before < p - 8 * torch.finfo(q.dtype).eps
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    kept = torch.where(keep, q, torch.zeros_like(q))
    return kept / kept.sum(-1, keepdim=True)


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Normalised log-probabilities ``log_softmax(logits / temperature)`` over the last dim, (..., C)
    -> (..., C); ``temperature`` is checked (:func:`check_temperature`)."""
    return temper(logits, check_temperature(temperature))


def temper(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """:func:`apply_temperature` with ``temperature`` already checked (the samplers' settings are)."""
    return torch.log_softmax(logits / temperature, dim=-1)


__all__ = [
    "DTYPE_NAMES",
    "METHODS",
    "NUCLEUS_RULES",
    "apply_temperature",
    "check_nucleus",
    "check_temperature",
    "filter_nucleus",
    "nucleus_filter",
    "parse_dtype",
    "sample_categorical",
    "sample_inverse_cdf",
    "temper",
]
