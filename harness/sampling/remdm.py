"""ReMDM (Wang et al. 2025): remasking samplers for any masked-diffusion family's checkpoint.

The model is trained as usual; only the sampler changes. At step k of the grid t_k = 1 - k (1 -
t_end) / T (as :mod:`harness.sampling.ancestral`), going from t to s, a token that is already
decoded is masked again with probability sigma, and a masked token is revealed with probability

    r = (alpha_s - (1 - sigma) alpha_t) / (1 - alpha_t),   otherwise it stays masked,

its value drawn from the denoiser's distribution (shaped by temperature and nucleus). With sigma =
0 this is MDLM's ancestral step. The marginal of the masked share still follows the schedule, so
sigma trades steps for corrections. The schedules of sigma (``RemaskSettings.schedule``) follow
kuleshov-group/remdm's ``_ddpm_caching_update``:

* ``cap``:     sigma = min(eta, (1 - alpha_s) / alpha_t)  (eta when alpha_t = 0);
* ``rescale``: sigma = eta * min(1, (1 - alpha_s) / alpha_t);
* ``conf``:    sigma_i = softmax_i(c) * min(1, (1 - alpha_s) / alpha_t) over the row's positions,
  where c_i = -p(x_i) of the token when it was decoded (-inf while masked or after a remask; the
  weights of masked positions are zero), so tokens decoded with low confidence are remasked first;
  masked positions use sigma = 0;
* ``loop``:    three phases in t. Above ``t_on``, MDLM steps on alpha = (1 - t) alpha_on / (1 - t_on),
  which reach alpha_on at t_on (the step that crosses t_on overshoots it a little, as in ReMDM's
  code). Between ``t_on`` and ``t_off``, alpha stays at ``alpha_on`` and the step remasks with
  sigma = eta: a loop of corrections at a fixed masked share. At or below ``t_off``, MDLM steps on
  1 - alpha = t (1 - alpha_on) / t_off.

Positions are whole tokens: a token's ell units are revealed and remasked together (for MDM-Prime,
as its MaskGIT sampler does). A prefix is never remasked. BD3-LM runs it inside each block
(:mod:`harness.sampling.blocks`). Two draws of the same law (``settings.draw``):

* ``two-stage`` (default): one float64 uniform per position decides remask / reveal / stay. Then,
  only at revealed positions, the token is drawn by inverse CDF in ``dtype``. The denoiser is called
  for a sample only at a step that reveals one of its tokens, at that step's state and t.
* ``joint``: ReMDM's code: one categorical over C + 1 outcomes at every position (a decoded token: x
  with mass 1 - sigma, mask with mass sigma; a masked one: token c with p(c) r, mask with 1 - r),
  drawn with ``method`` in ``dtype``. ``method="mdlm-legacy", dtype="float64"`` is that code's
  ``_sample_categorical``. The denoiser is called at every step, except that a time-independent
  network's output is reused while the sample does not change (its cache rule).

With ``cache=False`` the denoiser is called at every step (same samples, more NFE).

Differences from the reference code, each recorded:

* **The schedule.** Its code uses m_t = t whatever the noise schedule's eps; here alpha comes from
  the model's schedule (the same for ``linear``; for ``loglinear`` it differs by O(1e-3)).
* **Confidence precision.** It keeps the confidences in bfloat16; here they are float64.
* **The end of the grid.** It stops at t = 1e-5 and fills by argmax. Pass ``t_end=1e-5,
  noise_removal="argmax"`` for that.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from harness.errors import PrimebenchError
from harness.sampling.ancestral import time_grid
from harness.sampling.categorical import sample_categorical, sample_inverse_cdf
from harness.sampling.leftovers import fill_masked
from harness.sampling.settings import BatchResult, SamplerSettings
from harness.sampling.units import UnitModel, shaped_log_probs

SCHEDULES = ("cap", "rescale", "conf", "loop")
#: eta of each schedule in ReMDM's published scripts (scripts/remdm-*.sh); conf has none
DEFAULT_ETA = {"cap": 0.008, "rescale": 0.015, "loop": 0.02}


@dataclass(frozen=True)
class RemaskSettings:
    """ReMDM's settings: the sigma ``schedule`` (:data:`SCHEDULES`), ``eta`` (None: the schedule's
    :data:`DEFAULT_ETA`; not used by ``conf``) and the loop's ``t_on``, ``t_off`` and ``alpha_on``
    (ReMDM's script values)."""

    schedule: str = "cap"
    eta: float | None = None
    t_on: float = 0.55
    t_off: float = 0.05
    alpha_on: float = 0.9

    def checked(self) -> RemaskSettings:
        """These settings with ``eta`` filled in, or a :class:`PrimebenchError` naming the bad one."""
        fix = "see docs/protocols.md (ReMDM) for the settings and their ranges"
        if self.schedule not in SCHEDULES:
            raise PrimebenchError(f"unknown remasking schedule {self.schedule!r}", fix=f"use one of {SCHEDULES}")
        if self.schedule == "conf":
            if self.eta is not None:
                raise PrimebenchError("the conf schedule takes no eta (its sigma comes from the confidences)", fix=fix)
            return self
        eta = DEFAULT_ETA[self.schedule] if self.eta is None else self.eta
        if not (isinstance(eta, (int, float)) and 0.0 <= eta <= 1.0 and math.isfinite(eta)):
            raise PrimebenchError(f"remasking eta must lie in [0, 1], got {eta!r}", fix=fix)
        if self.schedule == "loop":
            if not 0.0 < self.t_off < self.t_on < 1.0:
                raise PrimebenchError(
                    f"the loop needs 0 < t_off < t_on < 1, got t_off={self.t_off}, t_on={self.t_on}", fix=fix
                )
            if not 0.0 < self.alpha_on < 1.0:
                raise PrimebenchError(f"alpha_on must lie in (0, 1), got {self.alpha_on}", fix=fix)
            most = (1 - self.alpha_on) / self.alpha_on
            if eta > most:
                raise PrimebenchError(
                    f"eta {eta} is above (1 - alpha_on) / alpha_on = {most:.4g}: the loop would unmask more than "
                    "every masked token",
                    fix=f"use eta <= {most:.4g}, or a smaller alpha_on",
                )
        return RemaskSettings(self.schedule, float(eta), self.t_on, self.t_off, self.alpha_on)

    def protocol(self) -> dict:
        out = asdict(self)
        if self.schedule != "loop":
            out.update(t_on=None, t_off=None, alpha_on=None)
        return out


def _step_law(remask: RemaskSettings, t: float, s: float, m_t: float, m_s: float) -> tuple[float, float, float]:
    """(alpha_t, alpha_s, sigma) of the step from t to s; sigma of ``conf`` is its cap sigma_max."""
    if remask.schedule == "loop":
        on, t_on, t_off = remask.alpha_on, remask.t_on, remask.t_off
        if t > t_on:
            return (1 - t) * on / (1 - t_on), (1 - s) * on / (1 - t_on), 0.0
        if t <= t_off:
            return 1 - t * (1 - on) / t_off, 1 - s * (1 - on) / t_off, 0.0
        return on, on, float(remask.eta)
    alpha_t, alpha_s = 1.0 - m_t, 1.0 - m_s
    cap = min(1.0, (1.0 - alpha_s) / alpha_t) if alpha_t > 0 else 1.0
    if remask.schedule == "cap":
        return alpha_t, alpha_s, min(remask.eta, (1.0 - alpha_s) / alpha_t) if alpha_t > 0 else remask.eta
    if remask.schedule == "rescale":
        return alpha_t, alpha_s, remask.eta * cap
    return alpha_t, alpha_s, cap


def _joint_law(units, y, probs, masked, decoded, free, r, sig_decoded) -> torch.Tensor:
    """(B, L, C + 1) float64 outcomes of ReMDM's one categorical per position (the mask last): a
    decoded token keeps its value with mass 1 - sigma and is masked with sigma; a masked one takes
    token c with p(c) r and stays masked with 1 - r; prefix positions are drawn as masked and ignored."""
    C = units.vocab_size
    q = torch.zeros(*masked.shape, C + 1, dtype=torch.float64, device=y.device)
    if probs is not None:
        q[..., :C] = torch.where(masked[..., None], probs.double() * r[..., None], 0.0)
    current = units.decode(torch.where(decoded[..., None], y, torch.zeros_like(y))).clamp_max(C - 1)
    q[..., :C].scatter_add_(-1, current[..., None], torch.where(decoded, 1.0 - sig_decoded, 0.0)[..., None])
    q[..., C] = torch.where(masked, 1.0 - r, torch.where(decoded, sig_decoded, 0.0))
    q[..., C] = torch.where(free, q[..., C], 1.0)
    return q


def run_remdm(
    units: UnitModel,
    rows: int,
    settings: SamplerSettings,
    generator: torch.Generator | None,
    prefix: torch.Tensor | None,
) -> BatchResult:
    """Draw ``rows`` samples with T = ``settings.steps`` ReMDM steps (see the module docstring)."""
    remask = settings.remask or RemaskSettings().checked()
    steps = int(settings.steps)
    grid = time_grid(steps, settings.t_end)
    mask_prob = units.model.schedule.mask_prob(grid)
    two_stage = settings.draw == "two-stage"

    y = units.initial_state(rows, prefix)
    device = y.device
    free = units.process.unrevealed(y).all(-1)  # (B, L): not prefix: may be revealed and remasked
    C = units.vocab_size
    conf = torch.full(free.shape, -math.inf, dtype=torch.float64, device=device)
    nfe = torch.zeros(rows, dtype=torch.long, device=device)
    idle = torch.zeros(rows, dtype=torch.long, device=device)
    remasked = torch.zeros(rows, dtype=torch.long, device=device)
    probs = None
    stale = torch.ones(rows, dtype=torch.bool, device=device)

    for k in range(1, steps + 1):
        t, s = float(grid[k - 1]), float(grid[k])
        alpha_t, alpha_s, sigma = _step_law(remask, t, s, float(mask_prob[k - 1]), float(mask_prob[k]))
        masked = units.process.unrevealed(y).all(-1) & free
        decoded = free & ~masked
        if remask.schedule == "conf":
            weights = torch.softmax(conf, dim=-1).nan_to_num(0.0)  # a row with no decoded token: all zero
            sig_decoded = torch.where(decoded, weights * sigma, torch.zeros_like(weights))
            sig_masked = torch.zeros_like(weights)
        else:
            sig_decoded = torch.full(masked.shape, sigma, dtype=torch.float64, device=device)
            sig_masked = sig_decoded
        r = ((alpha_s - (1.0 - sig_masked) * alpha_t) / (1.0 - alpha_t)).clamp(0.0, 1.0)
        if two_stage:
            u = torch.rand(masked.shape, dtype=torch.float64, device=device, generator=generator)
            back = decoded & (u < sig_decoded)
            reveal = masked & (u < r)
            call = reveal.any(-1)
        else:
            call = (masked.any(-1) | decoded.any(-1)) & (stale | bool(units.time_conditioning))
        if not settings.cache:  # every row with a free position, at every step
            call = free.any(-1)
        if bool(call.any()):
            out = shaped_log_probs(units.log_probs(y[call], t, call), settings).exp_()
            if probs is None:
                probs = torch.ones(rows, units.seq_len, C, dtype=out.dtype, device=device)
            probs[call] = out
            nfe[call] += 1
        if two_stage:
            token = (
                sample_inverse_cdf(probs[reveal], dtype=settings.dtype, generator=generator) if reveal.any() else None
            )
        else:
            q = _joint_law(units, y, probs, masked, decoded, free, r, sig_decoded)
            draw = sample_categorical(probs=q, method=settings.method, dtype=settings.dtype, generator=generator)
            back, reveal = decoded & (draw == C), masked & (draw < C)
            token = draw[reveal]
        y_next = y.clone()
        if bool(reveal.any()):
            y_next[reveal] = units.encode(token)
            conf[reveal] = -probs[reveal].double().gather(-1, token[:, None]).squeeze(-1)  # -p(token) when decoded
        if bool(back.any()):
            y_next[back] = units.process.initial_state(y_next[back].shape, device=device)
            conf[back] = -math.inf
            remasked += back.sum(-1)
        changed = (y_next != y).flatten(1).any(-1)
        idle += ~changed
        stale = changed
        y = y_next

    y, filled = fill_masked(units, y, settings.t_end, settings, generator, nfe)
    return BatchResult(
        tokens=units.decode(y),
        nfe=nfe,
        idle_steps=idle,
        steps=torch.full((rows,), steps, dtype=torch.long, device=device),
        counts={"noise_removal_filled": filled, "remasked": int(remasked.sum())},
    )


__all__ = ["DEFAULT_ETA", "SCHEDULES", "RemaskSettings", "run_remdm"]
