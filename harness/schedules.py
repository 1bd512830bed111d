"""Masking schedules alpha_t: the probability that a unit (token or sub-token) is still clean at time t.

Convention everywhere in primebench: t in [0, 1], t = 0 is data and t = 1 is noise, so alpha_0 = 1
and alpha_t decreases. The forward process masks each unit independently with probability
``mask_prob(t) = 1 - alpha_t`` (MDM-Prime eq. kernel_t0; MDLM Sec. 3). The continuous-time NELBO
weights the per-unit cross-entropy at time t by ``weight(t) = -alpha'_t / (1 - alpha_t)`` (per unit of
t, dimensionless; MDLM eq. 10, Prime eq. prime_elbo, Zheng et al. Sec. 3.1).

Every method accepts a Python float (returns a float) or a tensor (returns a tensor of the same
floating dtype; integer tensors are promoted to float64). Values outside [0, 1] are an error.

``get_schedule("polynomial:3")`` builds a schedule from a spec string; ``SCHEDULES`` is the registry.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from harness.errors import PrimebenchError
from harness.registry import Registry

TimeLike = float | torch.Tensor


def _as_time(t: TimeLike, what: str) -> tuple[torch.Tensor, bool]:
    """Return ``(t as a floating tensor, was_python_number)`` after checking 0 <= t <= 1."""
    scalar = not isinstance(t, torch.Tensor)
    tt = torch.as_tensor(t, dtype=torch.float64) if scalar else t
    if not tt.is_floating_point():
        tt = tt.to(torch.float64)
    if bool(((tt < 0) | (tt > 1) | torch.isnan(tt)).any()):
        raise PrimebenchError(
            f"{what}: time must lie in [0, 1] (t = 0 is data, t = 1 is noise), got {t!r}",
            fix="pass times from the sampler's grid or the likelihood estimator's t in [0, 1]",
        )
    return tt, scalar


def _out(x: torch.Tensor, scalar: bool) -> TimeLike:
    return float(x) if scalar else x


@dataclass(frozen=True)
class Schedule:
    """Base class. Subclasses implement the tensor methods ``_alpha``, ``_alpha_prime``, ``_mask_prob``,
    ``_weight`` and ``_t_from_alpha`` (inputs already validated floating tensors)."""

    @property
    def name(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    def alpha(self, t: TimeLike) -> TimeLike:
        """alpha_t: probability that a unit is still clean at time t."""
        tt, scalar = _as_time(t, f"{self.name}.alpha")
        return _out(self._alpha(tt), scalar)

    def alpha_prime(self, t: TimeLike) -> TimeLike:
        """d alpha_t / dt (non-positive)."""
        tt, scalar = _as_time(t, f"{self.name}.alpha_prime")
        return _out(self._alpha_prime(tt), scalar)

    def mask_prob(self, t: TimeLike) -> TimeLike:
        """1 - alpha_t, computed without cancellation near t = 0."""
        tt, scalar = _as_time(t, f"{self.name}.mask_prob")
        return _out(self._mask_prob(tt), scalar)

    def weight(self, t: TimeLike) -> TimeLike:
        """NELBO weight -alpha'_t / (1 - alpha_t) >= 0; +inf at t = 0."""
        tt, scalar = _as_time(t, f"{self.name}.weight")
        return _out(self._weight(tt), scalar)

    def t_from_alpha(self, a: TimeLike) -> TimeLike:
        """Inverse alpha^{-1}(a) on [alpha_1, 1] (needed by the first-hitting sampler, Zheng Prop. 4.1)."""
        aa, scalar = _as_time(a, f"{self.name}.t_from_alpha")
        return _out(self._t_from_alpha(aa), scalar)

    # -- subclass hooks ---------------------------------------------------------------------------
    def _alpha(self, t: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def _alpha_prime(self, t: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def _mask_prob(self, t: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def _weight(self, t: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def _t_from_alpha(self, a: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError


@dataclass(frozen=True)
class Linear(Schedule):
    """alpha_t = 1 - t; weight 1/t. The schedule of the Prime text models and of the ISR analysis."""

    @property
    def name(self) -> str:
        return "linear"

    def _alpha(self, t):
        return 1.0 - t

    def _alpha_prime(self, t):
        return torch.full_like(t, -1.0)

    def _mask_prob(self, t):
        return t.clone()

    def _weight(self, t):
        return 1.0 / t

    def _t_from_alpha(self, a):
        return 1.0 - a


@dataclass(frozen=True)
class LogLinear(Schedule):
    """MDLM's log-linear noise: mask probability (1 - eps) t, i.e. alpha_t = 1 - (1 - eps) t, alpha_1 = eps.

    MDLM writes the schedule through sigma(t) = -log(1 - (1 - eps) t) (so alpha_t = exp(-sigma(t)))
    and the NELBO weight as sigma'(t) / expm1(sigma(t)). With sigma'(t) = (1 - eps) / (1 - (1 - eps) t)
    and expm1(sigma(t)) = 1 / (1 - (1 - eps) t) - 1 = (1 - eps) t / (1 - (1 - eps) t):

        sigma'(t) / expm1(sigma(t)) = (1 - eps) / ((1 - eps) t) = 1 / t        exactly,

    which is also -alpha'_t / (1 - alpha_t) = (1 - eps) / ((1 - eps) t). We return 1/t directly (no
    cancellation, exact for every t), as MDLM's loss effectively multiplies by 1/t.
    """

    eps: float = 1e-3

    def __post_init__(self) -> None:
        if not 0.0 <= self.eps < 1.0:
            raise PrimebenchError(
                f"loglinear: eps must lie in [0, 1), got {self.eps!r}", fix="use e.g. 'loglinear:1e-3'"
            )

    @property
    def name(self) -> str:
        return "loglinear" if self.eps == 1e-3 else f"loglinear:{self.eps!r}"

    def _alpha(self, t):
        return 1.0 - (1.0 - self.eps) * t

    def _alpha_prime(self, t):
        return torch.full_like(t, -(1.0 - self.eps))

    def _mask_prob(self, t):
        return (1.0 - self.eps) * t

    def _weight(self, t):
        return 1.0 / t

    def _t_from_alpha(self, a):
        if bool((a < self.eps).any()):
            raise PrimebenchError(
                f"{self.name}.t_from_alpha: alpha must lie in [eps, 1] = [{self.eps}, 1]",
                fix="alpha below alpha_1 is never reached by this schedule",
            )
        return (1.0 - a) / (1.0 - self.eps)


@dataclass(frozen=True)
class Polynomial(Schedule):
    """alpha_t = (1 - t)^n: the image schedule of MDM-Prime (n = 3).

    The Prime image code (``image/utils/solver.py``, following Discrete Flow Matching) runs a time
    s in [0, 1] from noise (s = 0) to data (s = 1) and keeps a pixel clean with probability
    kappa_s = s^n. In our convention t = 1 - s, so alpha_t = kappa_{1-t} = (1 - t)^n and the mask
    probability is 1 - (1 - t)^n. weight(t) = n (1 - t)^{n-1} / (1 - (1 - t)^n), which behaves like
    1/t near t = 0 and is 0 at t = 1 for n > 1.
    """

    n: float = 3.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.n) and self.n > 0):
            raise PrimebenchError(
                f"polynomial: exponent n must be a positive number, got {self.n!r}",
                fix="use e.g. 'polynomial:3'",
            )

    @property
    def name(self) -> str:
        n = int(self.n) if float(self.n).is_integer() else self.n
        return f"polynomial:{n}"

    def _log_alpha(self, t):
        return self.n * torch.log1p(-t)

    def _alpha(self, t):
        return torch.exp(self._log_alpha(t))

    def _alpha_prime(self, t):
        return -self.n * torch.pow(1.0 - t, self.n - 1.0)

    def _mask_prob(self, t):
        return -torch.expm1(self._log_alpha(t))

    def _weight(self, t):
        return self.n * torch.pow(1.0 - t, self.n - 1.0) / self._mask_prob(t)

    def _t_from_alpha(self, a):
        return -torch.expm1(torch.log(a) / self.n)


@dataclass(frozen=True)
class Gidd(Schedule):
    """GIDD's clock (von Ruette et al. 2025, ``HybridDiffusion`` in dvruette/gidd): with
    c_t = B (t (1 - t))^(gamma / 2) and C_t = 1 + c_t,

        alpha_t = (1 - t) / C_t,      1 - alpha_t = (t + c_t) / C_t,

    the noise mass split t / C_t on the mask and c_t / C_t uniformly over the tokens
    (:class:`harness.processes.Hybrid`). B = 2^gamma p_u / (1 - p_u), so that c_{1/2} = p_u / (1 - p_u),
    with GIDD's floor: p_u at least e^-20 and log B at least -20 (p_u = 0 is then a masked model with
    the linear clock, up to a uniform mass of order 1e-9). ``p_uniform`` is GIDD's ``p_uniform``,
    ``gamma`` its ``gamma`` (1 in every GIDD run; alpha_t decreases for gamma in (0, 2]).
    ``t_from_alpha`` inverts in closed form for gamma = 1 (a quadratic), by bisection otherwise."""

    p_uniform: float = 0.0
    gamma: float = 1.0

    def __post_init__(self) -> None:
        if not (isinstance(self.p_uniform, (int, float)) and 0.0 <= self.p_uniform < 1.0):
            raise PrimebenchError(
                f"gidd: p_uniform must lie in [0, 1), got {self.p_uniform!r}", fix="use e.g. 'gidd:0.1'"
            )
        if not (isinstance(self.gamma, (int, float)) and 0.0 < self.gamma <= 2.0):
            raise PrimebenchError(
                f"gidd: gamma must lie in (0, 2] (alpha_t is then decreasing), got {self.gamma!r}",
                fix="GIDD uses gamma = 1",
            )

    @property
    def name(self) -> str:
        p = f"gidd:{self.p_uniform!r}"
        return p if self.gamma == 1.0 else f"{p},{self.gamma!r}"

    @property
    def log_b(self) -> float:
        """log B, clipped below at -20 as GIDD does."""
        p = max(math.exp(-20.0), float(self.p_uniform))
        return max(-20.0, self.gamma * math.log(2.0) + math.log(p) - math.log1p(-p))

    def mixing(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(c_t, c'_t) at tensor times t (0 < t < 1 for c'_t; c_t is 0 at both ends)."""
        c = math.exp(self.log_b) * torch.pow(t * (1.0 - t), self.gamma / 2.0)
        return c, (self.gamma / 2.0) * (1.0 - 2.0 * t) / (t * (1.0 - t)) * c

    def _alpha(self, t):
        c, _ = self.mixing(t)
        return (1.0 - t) / (1.0 + c)

    def _alpha_prime(self, t):
        c, _ = self.mixing(t)
        # c'_t at the ends is a limit: -inf at t = 0 (for gamma < 2), and (1 - t) c'_t -> 0 at t = 1
        _, c_prime = self.mixing(t.clamp(torch.finfo(t.dtype).tiny, 1 - torch.finfo(t.dtype).eps))
        return -1.0 / (1.0 + c) - (1.0 - t) * c_prime / (1.0 + c) ** 2

    def _mask_prob(self, t):
        c, _ = self.mixing(t)
        return (t + c) / (1.0 + c)

    def _weight(self, t):
        return -self._alpha_prime(t) / self._mask_prob(t)

    def _t_from_alpha(self, a):
        if self.gamma == 1.0:
            # alpha B sqrt(t (1 - t)) = 1 - t - alpha squared is a quadratic in t; its smaller root, in the
            # form without cancellation: t = 2 (1 - alpha)^2 / (b + alpha B sqrt(4 alpha (1 - alpha) + (alpha B)^2))
            x = a.to(torch.float64)
            big = math.exp(self.log_b)
            ab2 = (x * big) ** 2
            b = 2 * (1 - x) + ab2
            root = x * big * torch.sqrt((4 * x * (1 - x) + ab2).clamp_min(0))
            return (2 * (1 - x) ** 2 / (b + root)).to(a.dtype)
        lo, hi = torch.zeros_like(a, dtype=torch.float64), torch.ones_like(a, dtype=torch.float64)
        target = a.to(torch.float64)
        for _ in range(64):  # alpha_t decreases: keep alpha(lo) >= a >= alpha(hi)
            mid = (lo + hi) / 2
            above = self._alpha(mid) > target
            lo, hi = torch.where(above, mid, lo), torch.where(above, hi, mid)
        t = torch.where(target >= 1, 0.0, torch.where(target <= 0, 1.0, (lo + hi) / 2))  # the ends exactly
        return t.to(a.dtype)


ScheduleFactory = Callable[[str | None], Schedule]

SCHEDULES: Registry[ScheduleFactory] = Registry("schedule")


def _parse_param(name: str, param: str | None) -> float | None:
    if param is None:
        return None
    try:
        return float(param)
    except ValueError:
        raise PrimebenchError(
            f"schedule {name!r}: parameter {param!r} is not a number",
            fix=f"write e.g. '{name}:3' or just '{name}'",
        ) from None


def _linear(param: str | None) -> Schedule:
    if param is not None:
        raise PrimebenchError(f"schedule 'linear' takes no parameter, got {param!r}", fix="write 'linear'")
    return Linear()


def _loglinear(param: str | None) -> Schedule:
    eps = _parse_param("loglinear", param)
    return LogLinear() if eps is None else LogLinear(eps=eps)


def _polynomial(param: str | None) -> Schedule:
    n = _parse_param("polynomial", param)
    return Polynomial() if n is None else Polynomial(n=n)


def _gidd(param: str | None) -> Schedule:
    if param is None:
        return Gidd()
    p_uniform, _, gamma = param.partition(",")
    p = _parse_param("gidd", p_uniform.strip())
    return Gidd(p_uniform=p) if not gamma.strip() else Gidd(p_uniform=p, gamma=_parse_param("gidd", gamma.strip()))


SCHEDULES.register("linear", _linear)
SCHEDULES.register("loglinear", _loglinear)
SCHEDULES.register("polynomial", _polynomial)
SCHEDULES.register("gidd", _gidd)


def get_schedule(name_or_spec: str | Schedule) -> Schedule:
    """Build a schedule from ``"linear"``, ``"loglinear"``, ``"loglinear:1e-3"``, ``"polynomial:3"``,
    ``"gidd:0.1"`` (GIDD's clock with p_u = 0.1; ``"gidd:0.1,1"`` names gamma too)
    (or return a :class:`Schedule` unchanged). Unknown names get a did-you-mean error."""
    if isinstance(name_or_spec, Schedule):
        return name_or_spec
    if not isinstance(name_or_spec, str):
        raise PrimebenchError(
            f"schedule must be a name like 'polynomial:3' or a Schedule, got {name_or_spec!r}",
            fix=f"registered schedules: {', '.join(SCHEDULES.names())}",
        )
    name, _, param = name_or_spec.strip().partition(":")
    return SCHEDULES.get(name.strip())(param.strip() or None)


__all__ = ["Gidd", "Schedule", "Linear", "LogLinear", "Polynomial", "SCHEDULES", "get_schedule"]
