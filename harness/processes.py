"""Forward processes: the corruption a diffusion family learns to undo, as a part of its own.

Every process here moves a unit (a token, or one of MDM-Prime's sub-tokens) from its clean value
x_0, one of C categories, towards a prior pi over the V states a unit can take:

    q_t(x_t | x_0) = alpha_t [x_t = x_0] + (1 - alpha_t) pi(x_t),        alpha_0 = 1, alpha_1 = 0,

which is the marginal of the continuous-time Markov chain with rates Q_t = sigma_t (pi 1^T - I),
sigma_t = -alpha'_t / alpha_t: a unit is hit at rate sigma_t and replaced by a draw from pi.

* ``absorbing`` (MDLM, the masked model, MDM-Prime, BD3-LM): pi is the mask state (V = C + 1);
* ``uniform`` (UDLM, DUO): pi is uniform over the C categories (V = C), no extra state;
* ``interpolating``: pi puts ``mask_weight`` on the mask state and the rest uniformly on the C
  categories (V = C + 1), the mixture of the two. GIDD's process is of this kind with a mixing
  distribution that changes with t; here the mixture is fixed over time.

Each process gives, from alpha alone (schedules live in :mod:`harness.schedules`):

* :meth:`ForwardProcess.marginal` q_t(. | x_0) and :meth:`ForwardProcess.transition`
  q(x_t | x_s) for s < t (the same interpolation with alpha_t / alpha_s);
* :meth:`ForwardProcess.posterior` q(x_s | x_t, x_0), from Bayes' rule; with a distribution over
  x_0 in place of x_0 (the denoiser's x_theta) it is the reverse step the ancestral samplers take,
  x_theta plugged into the marginal (UDLM's and DUO's parameterisation; for the absorbing process
  MDLM's);
* :meth:`ForwardProcess.elbo_integrand`, the continuous-time ELBO's integrand at one position
  (Campbell et al. 2022; the score-entropy form of Lou et al. 2024 with the ratios of the two
  marginals):

      sigma_t pi(z) sum_{y != z} [ r_theta(y) - r_x(y) + r_x(y) log(r_x(y) / r_theta(y)) ],
      r_x(y) = q_t(y | x_0) / q_t(z | x_0),  r_theta(y) = q_t(y | x_theta) / q_t(z | x_theta),

  so that -log p(x_0) <= int_0^1 E_{z_t ~ q_t} [sum over positions of the integrand] dt (the
  prior term vanishes since alpha_1 = 0, the reconstruction term since alpha_0 = 1). Every term is
  a Bregman divergence, so it is >= 0 and 0 for a perfect denoiser. For the absorbing process it is
  MDLM's -alpha'_t / (1 - alpha_t) * (-log x_theta(x_0)) at masked positions and 0 elsewhere; for
  the uniform one it equals UDLM's closed form (as written in s-sahoo/duo's ``nll_per_token``,
  checked on the same random tensors to 4e-15). The tests prove the bound by enumeration: the
  exact likelihood of the T-step reverse chain sits below its discrete ELBO, which converges to
  this integral.

How a Monte-Carlo estimator uses a process (:func:`harness.diffusion.corrupt`): it decides which
units are hit (probability 1 - alpha_t), and :meth:`ForwardProcess.noise` redraws those from pi
(the absorbing process writes the mask id and draws nothing, so its corruptions are the same draw
for draw as before processes were a part). :meth:`ForwardProcess.corruption_weight` is the factor
the estimator puts in front of a corruption's summed terms: the absorbing process's
-alpha'/(1 - alpha) (its terms are cross-entropies), 1 for the others (their integrand carries its
own time factor). Samplers ask the process which units are still noise
(:meth:`ForwardProcess.unrevealed`) and for the initial all-noise state, never for a mask id.
"""

from __future__ import annotations

import abc
import math
from typing import ClassVar

import torch
import torch.nn.functional as F

from harness.errors import InputError
from harness.graph import tracked
from harness.registry import Registry
from harness.schedules import Gidd


class ForwardProcess(abc.ABC):
    """A unit's corruption towards the prior pi over V states (C categories, plus a mask state when
    pi puts mass on one). Pure functions of alpha; every tensor method works in the dtype it is given."""

    name: ClassVar[str] = ""
    #: whether pi puts mass on an extra mask state (then V = C + 1 and its id is C)
    has_mask: ClassVar[bool] = False
    #: whether the law a hit unit is redrawn from moves with time (GIDD's); SEDD's steps assume it does not
    moving_prior: ClassVar[bool] = False
    about: ClassVar[str] = ""

    def __init__(self, categories: int):
        if isinstance(categories, bool) or not isinstance(categories, int) or categories < 2:
            raise InputError(f"a forward process needs at least 2 categories, got {categories!r}")
        self.categories = categories

    def __repr__(self) -> str:
        return f"{type(self).__name__}(categories={self.categories})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(sorted(vars(self).items()))))

    # -- facts ----------------------------------------------------------------------------------
    @property
    def states(self) -> int:
        """V: the values a unit takes (C, plus the mask state when there is one)."""
        return self.categories + int(self.has_mask)

    @property
    def mask_id(self) -> int | None:
        """The mask state's id (C), or None when pi has no mask state."""
        return self.categories if self.has_mask else None

    @abc.abstractmethod
    def prior(self, *, dtype: torch.dtype = torch.float64, device=None, alpha=None) -> torch.Tensor:
        """(V,) pi, the law of a unit at t = 1, which is also the law of a hit unit's redraw at every
        time; a process whose redraw law moves with time (:class:`Hybrid`) gives it at ``alpha``."""

    def describe(self) -> dict:
        """The record's words for this process."""
        return {"name": self.name, "categories": self.categories, "states": self.states, "prior": self.about}

    # -- the law of the chain -------------------------------------------------------------------
    def _clean(self, x0: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """x0 as (..., V) probabilities: ids (...) one-hot, or (..., C) probabilities padded with 0."""
        if x0.is_floating_point():
            probs = x0.to(dtype)
        else:
            probs = F.one_hot(x0, self.categories).to(dtype)
        if probs.shape[-1] != self.categories:
            raise InputError(f"x0 has {probs.shape[-1]} categories, the process {self.categories}")
        return F.pad(probs, (0, self.states - self.categories))

    def marginal(self, x0: torch.Tensor, alpha: torch.Tensor, *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """(..., V) q_t(. | x_0) = alpha x_0 + (1 - alpha) pi. ``x0``: ids (...) or probabilities
        (..., C) (then q_t(. | x_theta), the mixture of the marginals); ``alpha`` broadcasts against
        ``x0``'s leading shape."""
        probs = self._clean(x0, dtype)
        a = torch.as_tensor(alpha, dtype=dtype, device=probs.device)[..., None]
        return a * probs + (1 - a) * self.prior(dtype=dtype, device=probs.device)

    def transition(
        self, z: torch.Tensor, alpha_t: torch.Tensor, alpha_s: torch.Tensor, *, dtype: torch.dtype = torch.float64
    ) -> torch.Tensor:
        """(..., V) q(x_t = z | x_s = v) for every v, s < t: the same interpolation with alpha_t / alpha_s."""
        pi = self.prior(dtype=dtype, device=z.device)
        r = (torch.as_tensor(alpha_t, dtype=dtype, device=z.device) / alpha_s)[..., None]
        return r * F.one_hot(z, self.states).to(dtype) + (1 - r) * pi[z][..., None]

    def posterior(
        self,
        z_t: torch.Tensor,
        x0: torch.Tensor,
        alpha_t: torch.Tensor,
        alpha_s: torch.Tensor,
        *,
        dtype: torch.dtype = torch.float64,
    ) -> torch.Tensor:
        """(..., V) q(x_s | x_t = z_t, x_0) for s < t, by Bayes: q(z_t | x_s) q_s(x_s | x_0), normalised.

        ``x0``: ids, or the denoiser's probabilities (..., C): then the reverse step
        p_theta(x_s | z_t) with x_theta in the marginal."""
        joint = self.transition(z_t, alpha_t, alpha_s, dtype=dtype) * self.marginal(x0, alpha_s, dtype=dtype)
        return joint / joint.sum(-1, keepdim=True)

    def posterior_parts(
        self, z_t: torch.Tensor, x0_at_z: torch.Tensor, alpha_t: float, alpha_s: float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The posterior as a three-part mixture, (...) float64 weights (unnormalised, they sum to
        q_t(z_t | x_0)): stay at z_t, draw from x_0 (x_theta), draw from pi.

        With r = alpha_t / alpha_s, q(z | v) = r [v = z] + (1 - r) pi(z), so Bayes' numerator
        q(z | v) (alpha_s x_0(v) + (1 - alpha_s) pi(v)) splits into

            r (alpha_s x_0(z) + (1 - alpha_s) pi(z)) [v = z]  +  (1 - r) pi(z) alpha_s x_0(v)
            +  (1 - r) pi(z) (1 - alpha_s) pi(v),

        so :meth:`posterior` is drawn exactly by picking a part by its weight and then a state from
        it, without forming the (..., V) posterior (the posterior sampler's two-stage draw).
        ``x0_at_z``: x_0's probability of the state z_t (0 for a noise-only state such as a mask)."""
        pi_z = self.prior(dtype=torch.float64, device=z_t.device)[z_t]
        r = alpha_t / alpha_s
        at_z = x0_at_z.to(torch.float64)
        stay = r * (alpha_s * at_z + (1 - alpha_s) * pi_z)
        return stay, (1 - r) * alpha_s * pi_z, (1 - r) * (1 - alpha_s) * pi_z

    def elbo_integrand(
        self,
        log_x_theta: torch.Tensor,
        x0: torch.Tensor,
        z_t: torch.Tensor,
        alpha: torch.Tensor,
        alpha_prime: torch.Tensor,
    ) -> torch.Tensor:
        """(...) nats per unit time at each position: the continuous-time ELBO's integrand (module
        docstring) for clean ``x0`` (...), state ``z_t`` (...), the denoiser's ``log_x_theta``
        (..., C) and alpha, alpha' at t (broadcast against ``x0``); 0 at a state that q_t(. | x_0)
        cannot reach. Computed in float64."""
        dtype = torch.float64
        a = torch.as_tensor(alpha, dtype=dtype, device=x0.device)
        q_x = self.marginal(x0, a, dtype=dtype)
        q_theta = self.marginal(log_x_theta.to(dtype).exp(), a, dtype=dtype)
        at_z = q_x.gather(-1, z_t[..., None])
        reachable = at_z[..., 0] > 0  # a state q_t(. | x_0) never visits adds nothing to the expectation
        r_x = q_x / at_z.clamp_min(torch.finfo(dtype).tiny)
        r_theta = q_theta / q_theta.gather(-1, z_t[..., None])
        bregman = r_theta - r_x + torch.xlogy(r_x, r_x) - torch.xlogy(r_x, r_theta)
        bregman = bregman.masked_fill(F.one_hot(z_t, self.states).bool(), 0.0).sum(-1)
        rate = self.rate_into(z_t, a, alpha_prime) * bregman
        return torch.where(reachable, rate, torch.zeros_like(rate))

    def rate_into(self, z: torch.Tensor, alpha, alpha_prime) -> torch.Tensor:
        """(...) float64 the forward rate into state ``z`` (from any other): sigma_t pi(z), sigma_t =
        -alpha' / alpha."""
        dtype = torch.float64
        a = torch.as_tensor(alpha, dtype=dtype, device=z.device)
        sigma = -torch.as_tensor(alpha_prime, dtype=dtype, device=z.device) / a
        return sigma * self.prior(dtype=dtype, device=z.device)[z]

    # -- concrete scores (SEDD): ratios s(y) = p_t(y) / p_t(z) in place of a denoiser -----------------
    def log_ratios(self, x_theta: torch.Tensor, z: torch.Tensor, alpha) -> torch.Tensor:
        """(..., V) log q_t(y | x_theta) / q_t(z | x_theta): the concrete score that a denoiser's
        ``x_theta`` (..., C probabilities) implies at state ``z`` (...), float64; -inf where
        q_t(y | x_theta) = 0."""
        q = self.marginal(x_theta, alpha, dtype=torch.float64)
        return torch.log(q) - torch.log(q.gather(-1, z[..., None]))

    def denoiser(self, log_score: torch.Tensor, z: torch.Tensor, alpha) -> torch.Tensor:
        """(..., C) the x_theta that scores ``log_score`` (..., V) imply at state ``z``, float64:
        q_t(z) = 1 / sum_y s(y) (s(z) = 1), so x_theta(y) = (s(y) q_t(z) - (1 - alpha) pi(y)) / alpha,
        clipped at 0 and renormalised (exact for scores of a denoiser; :meth:`log_ratios` inverted)."""
        s = log_score.to(torch.float64).exp()
        a = torch.as_tensor(alpha, dtype=torch.float64, device=s.device)[..., None]
        q = s / s.sum(-1, keepdim=True)
        pi = self.prior(dtype=torch.float64, device=s.device, alpha=a[..., 0])  # pi_t where pi moves
        x = ((q - (1 - a) * pi) / a)[..., : self.categories]
        x = x.clamp_min(0)
        total = x.sum(-1, keepdim=True)
        # scores with no mass left on a token (far from any denoiser's) fall back to their own shape
        fallback = q[..., : self.categories] / q[..., : self.categories].sum(-1, keepdim=True)
        return torch.where(total > 0, x / total.clamp_min(torch.finfo(torch.float64).tiny), fallback)

    def score_entropy(
        self,
        log_score: torch.Tensor,
        x0: torch.Tensor,
        z_t: torch.Tensor,
        alpha: torch.Tensor,
        alpha_prime: torch.Tensor,
    ) -> torch.Tensor:
        """(...) nats per unit time: the denoising score entropy of Lou et al. (2024) at each position,

            sigma_t pi(z) sum_{y != z} [ s(y) - r_x(y) + r_x(y) log(r_x(y) / s(y)) ],   s = exp(log_score),

        for the network's scores ``log_score`` (..., V) at state ``z_t``, with r_x the ratios of
        q_t(. | x_0) (:meth:`elbo_integrand` is this with s the ratios of q_t(. | x_theta)). Its
        integral over t in (0, 1] bounds -log p(x_0) of the reverse chain whose rates are
        Q_t(y, z) s(y), for any positive scores (SEDD's DWDSE). Float64; 0 at a state that
        q_t(. | x_0) cannot reach; the score at z itself is not read."""
        dtype = torch.float64
        a = torch.as_tensor(alpha, dtype=dtype, device=x0.device)
        q_x = self.marginal(x0, a, dtype=dtype)
        at_z = q_x.gather(-1, z_t[..., None])
        reachable = at_z[..., 0] > 0
        r_x = q_x / at_z.clamp_min(torch.finfo(dtype).tiny)
        log_s = log_score.to(dtype)
        terms = log_s.exp() - r_x + torch.xlogy(r_x, r_x) - torch.where(r_x > 0, r_x * log_s, torch.zeros_like(r_x))
        terms = terms.masked_fill(F.one_hot(z_t, self.states).bool(), 0.0).sum(-1)
        rate = self.rate_into(z_t, a, alpha_prime) * terms
        return torch.where(reachable, rate, torch.zeros_like(rate))

    def tweedie_probs(self, log_score: torch.Tensor, z: torch.Tensor, alpha_t, alpha_s) -> torch.Tensor:
        """(..., V) unnormalised p(x_s = y | x_t = z), s < t, from the scores at t (SEDD's Tweedie
        tau-leaping step, ``analytic``): q(z | y) times p_s(y) / p_t(z), where p_s = p_t / r +
        (1 - 1 / r) pi (r = alpha_t / alpha_s, exact for the marginals of this process) gives

            p_s(y) / p_t(z) = s(y) / r + (1 - 1 / r) pi(y) sum_v s(v)        (the staggered score),

        clipped at 0. For the scores of a denoiser it is :meth:`posterior` with that x_theta, exactly."""
        self._fixed_prior("Tweedie's step")
        dtype = torch.float64
        s = log_score.to(dtype).exp()
        r = torch.as_tensor(alpha_t, dtype=dtype, device=s.device) / torch.as_tensor(alpha_s, dtype=dtype)
        r = r[..., None] if r.dim() else r
        pi = self.prior(dtype=dtype, device=s.device)
        staggered = s / r + (1 - 1 / r) * pi * s.sum(-1, keepdim=True)
        return (staggered * self.transition(z, alpha_t, alpha_s, dtype=dtype)).clamp_min(0)

    def euler_probs(self, log_score: torch.Tensor, z: torch.Tensor, alpha, alpha_prime, dt: float) -> torch.Tensor:
        """(..., V) p(x_{t - dt} = y | x_t = z) of one Euler step of the reverse chain (SEDD's
        ``euler``): y != z with dt sigma_t pi(z) s(y) (the reverse rate Q_t(y, z) s(y)), z with the
        rest, clipped at 0 (then the draw normalises, as SEDD's Gumbel draw does). Float64."""
        self._fixed_prior("the Euler step")
        dtype = torch.float64
        s = log_score.to(dtype).exp()
        sigma = -torch.as_tensor(alpha_prime, dtype=dtype, device=s.device) / torch.as_tensor(alpha, dtype=dtype)
        sigma = sigma[..., None] if sigma.dim() else sigma
        at_z = F.one_hot(z, self.states).bool()
        move = (dt * sigma * self.prior(dtype=dtype, device=s.device)[z][..., None] * s).masked_fill(at_z, 0.0)
        stay = (1 - move.sum(-1, keepdim=True)).clamp_min(0)
        return torch.where(at_z, stay, move)

    def _fixed_prior(self, what: str) -> None:
        if self.moving_prior:
            raise InputError(
                f"{what} assumes a redraw law that does not move with time; the {self.name} process's does",
                fix="use the posterior sampler for this process",
            )

    # -- what the estimators and samplers ask ---------------------------------------------------------
    def corruption_weight(self, schedule, t: torch.Tensor) -> torch.Tensor:
        """The factor before a corruption's summed terms at time t: 1 here (the terms are the
        integrand, which carries its own time factor)."""
        return torch.ones_like(torch.as_tensor(t, dtype=torch.float64))

    @abc.abstractmethod
    def noise(self, clean: torch.Tensor, hit: torch.Tensor, *, generator=None, alpha=None) -> torch.Tensor:
        """``clean`` units with those where ``hit`` (bool, same shape) redrawn from pi. ``alpha``: the
        time the draw is made at (a float, or a tensor of each row's alpha that broadcasts from the
        left), read only by a process whose pi moves with time (:class:`Hybrid`); None is t = 1."""

    @abc.abstractmethod
    def unrevealed(self, y: torch.Tensor) -> torch.Tensor:
        """(...) bool: the units of a sampler's state that are still noise (to be decided by a later step)."""

    def initial_state(self, shape: tuple[int, ...], *, device=None, generator=None) -> torch.Tensor:
        """A sampler's all-noise start: a (shape) long tensor drawn from pi."""
        zeros = torch.zeros(shape, dtype=torch.long, device=device)
        return self.noise(zeros, torch.ones(shape, dtype=torch.bool, device=device), generator=generator)


class Absorbing(ForwardProcess):
    """Units jump to the mask state (id C) and stay there: MDLM, the masked model, MDM-Prime, BD3-LM."""

    name = "absorbing"
    has_mask = True
    about = "all mass on the mask state"

    def prior(self, *, dtype: torch.dtype = torch.float64, device=None, alpha=None) -> torch.Tensor:
        pi = torch.zeros(self.states, dtype=dtype, device=device)
        pi[self.categories] = 1.0
        return pi

    def elbo_integrand(self, log_x_theta, x0, z_t, alpha, alpha_prime):
        """MDLM's closed form: -alpha'/(1 - alpha) * (-log x_theta(x_0)) where z_t is masked, 0 elsewhere."""
        a = torch.as_tensor(alpha, dtype=torch.float64, device=x0.device)
        weight = -torch.as_tensor(alpha_prime, dtype=torch.float64, device=x0.device) / (1 - a)
        nats = -log_x_theta.to(torch.float64).gather(-1, x0[..., None]).squeeze(-1)
        return torch.where(z_t == self.categories, weight * nats, torch.zeros_like(nats))

    def score_entropy(self, log_score, x0, z_t, alpha, alpha_prime):
        """SEDD's closed form: sigma_t [sum_{y < C} s(y) - r log s(x_0) + r log r - r] where z_t is
        masked (r = alpha / (1 - alpha), the one ratio of q_t(. | x_0) that is not 0), 0 elsewhere."""
        dtype = torch.float64
        a = torch.as_tensor(alpha, dtype=dtype, device=x0.device)
        r = a / (1 - a)
        tokens = log_score[..., : self.categories]
        if tracked(log_score):
            positive = torch.logsumexp(tokens.to(dtype), dim=-1).exp()
        else:  # evaluation: one float64 copy of the token scores, consumed in place
            positive = _logsumexp_(torch.empty(tokens.shape, dtype=dtype, device=tokens.device).copy_(tokens)).exp()
        negative = r * log_score.gather(-1, x0[..., None]).squeeze(-1).to(dtype)
        sigma = -torch.as_tensor(alpha_prime, dtype=dtype, device=x0.device) / a
        rate = sigma * (positive - negative + torch.xlogy(r, r) - r)
        return torch.where(z_t == self.categories, rate, torch.zeros_like(rate))

    def corruption_weight(self, schedule, t):
        """-alpha'_t / (1 - alpha_t), the schedule's own closed form (1/t for the log-linear one)."""
        return schedule.weight(t)

    def noise(self, clean, hit, *, generator=None, alpha=None):
        return torch.where(hit, torch.full_like(clean, self.categories), clean)

    def unrevealed(self, y):
        return y == self.categories


class Uniform(ForwardProcess):
    """Units are redrawn uniformly from the C categories: UDLM, DUO. No state marks noise."""

    name = "uniform"
    about = "uniform over the C categories"

    def prior(self, *, dtype: torch.dtype = torch.float64, device=None, alpha=None) -> torch.Tensor:
        return torch.full((self.states,), 1.0 / self.categories, dtype=dtype, device=device)

    def noise(self, clean, hit, *, generator=None, alpha=None):
        u = _uniforms(clean, generator)
        draw = (u * self.categories).long().clamp_(0, self.categories - 1)
        return torch.where(hit, draw, clean)

    def elbo_integrand(self, log_x_theta, x0, z_t, alpha, alpha_prime):
        """UDLM's closed form of the generic integrand, with one pass over the C categories.

        With xbar = C alpha x + (1 - alpha) (the marginal times C) for x = x_0 and for x_theta,

            alpha' / (C alpha) * [ C / xbar_z - C / xbartheta_z
                - (1 / xbar_z) sum_v xbar_v (log xbartheta_z - log xbartheta_v + log xbar_v - log xbar_z) ],

        where for the one-hot x_0 the sums over v close: sum_v xbar_v = C, sum_v xbar_v log xbartheta_v
        = (1 - alpha) sum_v log xbartheta_v + C alpha log xbartheta_{x_0}, and sum_v xbar_v log xbar_v
        = (C - 1) xlogx(1 - alpha) + xlogx(1 - alpha + C alpha). Equal to the generic form (tested),
        given x_theta sums to 1 (as UDLM's and DUO's code assume): 1.05x the ARM's cost in `bench`
        against 5.3x for the generic form at C = 50257."""
        dtype = torch.float64
        C = float(self.categories)
        a = torch.as_tensor(alpha, dtype=dtype, device=x0.device)
        a = a.expand(x0.shape)
        scale, shift = C * a[..., None], (1 - a)[..., None]
        grad = tracked(log_x_theta)  # training: out of place, so that backward has what it saved
        if grad:
            xbar_theta = log_x_theta.to(dtype).exp() * scale + shift
        else:  # one new float64 tensor (the cast, when it makes one), reused in place from there on
            xbar_theta = log_x_theta.to(dtype)
            xbar_theta = xbar_theta.exp() if xbar_theta is log_x_theta else xbar_theta.exp_()
            xbar_theta.mul_(scale).add_(shift)
        theta_z = xbar_theta.gather(-1, z_t[..., None]).squeeze(-1)
        theta_x = xbar_theta.gather(-1, x0[..., None]).squeeze(-1)
        log_sum = (torch.log(xbar_theta) if grad else xbar_theta.log_()).sum(-1)
        hit = z_t == x0
        xbar_z = torch.where(hit, 1 - a + C * a, 1 - a)
        mass_log_theta = (1 - a) * log_sum + C * a * torch.log(theta_x)
        mass_log_self = (C - 1) * torch.xlogy(1 - a, 1 - a) + torch.xlogy(1 - a + C * a, 1 - a + C * a)
        bracket = C / xbar_z - C / theta_z
        bracket = bracket - (C * (torch.log(theta_z) - torch.log(xbar_z)) - mass_log_theta + mass_log_self) / xbar_z
        alpha_prime = torch.as_tensor(alpha_prime, dtype=dtype, device=x0.device)
        return alpha_prime / (C * a) * bracket

    def score_entropy(self, log_score, x0, z_t, alpha, alpha_prime):
        """SEDD's closed form for the uniform graph, from two sums over the C scores. With
        rho = (1 - alpha) / (C alpha + 1 - alpha) (every ratio of q_t(. | x_0) when z_t = x_0) and
        R = 1 + C alpha / (1 - alpha) (the ratio at x_0 when z_t != x_0, the others 1):

            z_t = x_0:   S - (C - 1) rho + (C - 1) rho log rho - rho Lsum,
            z_t != x_0:  S - (C - 2) - R + R log R - R log s(x_0) - (Lsum - log s(x_0)),

        S and Lsum the sums of s(y) and log s(y) over y != z_t, times sigma_t / C."""
        dtype = torch.float64
        C = float(self.categories)
        a = torch.as_tensor(alpha, dtype=dtype, device=x0.device).expand(x0.shape)
        graph = tracked(log_score)
        log_s = log_score.to(dtype)
        if not graph and log_s is log_score:
            log_s = log_s.clone()  # consumed in place below; the caller's tensor stays
        log_s_z = log_s.gather(-1, z_t[..., None]).squeeze(-1)
        log_s_x = log_s.gather(-1, x0[..., None]).squeeze(-1)
        logs = log_s.sum(-1) - log_s_z
        # evaluation: the float64 copy is consumed by the log-sum-exp, one (..., V) tensor fewer
        total = (torch.logsumexp(log_s, dim=-1) if graph else _logsumexp_(log_s)).exp() - log_s_z.exp()
        rho = (1 - a) / (C * a + 1 - a)
        big = 1 + C * a / (1 - a)
        same = total - (C - 1) * rho + (C - 1) * torch.xlogy(rho, rho) - rho * logs
        moved = total - (C - 2) - big + torch.xlogy(big, big) - big * log_s_x - (logs - log_s_x)
        sigma = -torch.as_tensor(alpha_prime, dtype=dtype, device=x0.device) / a
        return sigma / C * torch.where(z_t == x0, same, moved)

    def unrevealed(self, y):
        """Every unit: a uniform state never tells noise from data, so every position stays open."""
        return torch.ones_like(y, dtype=torch.bool)


class Interpolating(ForwardProcess):
    """pi = ``mask_weight`` on the mask state, the rest uniform over the C categories."""

    name = "interpolating"
    has_mask = True
    about = "mask_weight on the mask state, the rest uniform over the C categories"

    def __init__(self, categories: int, mask_weight: float = 0.5):
        super().__init__(categories)
        if isinstance(mask_weight, bool) or not isinstance(mask_weight, (int, float)) or not 0 < mask_weight < 1:
            raise InputError(
                f"mask_weight must lie in (0, 1), got {mask_weight!r}",
                fix="1 is the absorbing process, 0 the uniform one: use those",
            )
        self.mask_weight = float(mask_weight)

    def __repr__(self) -> str:
        return f"Interpolating(categories={self.categories}, mask_weight={self.mask_weight})"

    def describe(self) -> dict:
        return dict(super().describe(), mask_weight=self.mask_weight)

    def prior(self, *, dtype: torch.dtype = torch.float64, device=None, alpha=None) -> torch.Tensor:
        pi = torch.full((self.states,), (1 - self.mask_weight) / self.categories, dtype=dtype, device=device)
        pi[self.categories] = self.mask_weight
        return pi

    def noise(self, clean, hit, *, generator=None, alpha=None):
        u = _uniforms(clean, generator)
        to_mask = u < self.mask_weight
        token = (
            ((u - self.mask_weight) / (1 - self.mask_weight) * self.categories).long().clamp_(0, self.categories - 1)
        )
        draw = torch.where(to_mask, torch.full_like(token, self.categories), token)
        return torch.where(hit, draw, clean)

    def unrevealed(self, y):
        """Every unit: a token state may be noise, so no position is settled by its state alone."""
        return torch.ones_like(y, dtype=torch.bool)


class Hybrid(ForwardProcess):
    """GIDD's interpolating process (von Ruette et al. 2025; ``HybridDiffusion`` in dvruette/gidd):
    the mixture of mask and uniform noise moves with time. On GIDD's clock
    (:class:`harness.schedules.Gidd`, c_t = B (t (1 - t))^(gamma / 2), C_t = 1 + c_t),

        q_t(. | x_0) = alpha_t x_0 + beta_t pi_t,   alpha_t = (1 - t) / C_t,
        beta_t pi_t = (t [mask] + c_t u) / C_t,      u uniform over the C tokens,

    so noise is mostly uniform early (c_t ~ B sqrt(t) >> t) and all mask at t = 1. Every method takes
    alpha as the other processes do and reads t back from GIDD's clock (:meth:`times`). Since pi_t
    moves, the forward rate into a state z is not sigma_t pi(z) but

        b_t(z) = (beta pi)'_t(z) - (alpha'_t / alpha_t) (beta pi)_t(z):
        b_t(mask) = 1 / ((1 - t) C_t),   b_t(token) = (c_t + (1 - t) c'_t) / ((1 - t) C C_t),

    and the ELBO's integrand is b_t(z) times the same Bregman sum as for the fixed-pi processes,
    which GIDD writes as w_t(z) [KL(q_t(. | x_0) || q_t(. | x_theta)) + R - log R - 1] with
    w_t = b_t(z) / q_t(z | x_0) and R = q_t(z | x_0) / q_t(z | x_theta) (:meth:`elbo_integrand`,
    equal to the generic form and to GIDD's ``GiddLoss`` ELBO; tested). The reverse step's noise part
    q(x_t = z | x_s) - (alpha_t / alpha_s) [x_s = z] = (beta pi)_t(z) - (alpha_t / alpha_s)(beta pi)_s(z)
    is GIDD's ``beta_pi_ts``. :meth:`prior` is pi_1, the mask."""

    name = "hybrid"
    has_mask = True
    moving_prior = True
    about = "GIDD's moving mixture: uniform over the C categories early, the mask state at t = 1"

    def __init__(self, categories: int, p_uniform: float = 0.0, gamma: float = 1.0):
        super().__init__(categories)
        self.clock = Gidd(p_uniform=p_uniform, gamma=gamma)

    def __repr__(self) -> str:
        return f"Hybrid(categories={self.categories}, clock={self.clock.name!r})"

    def describe(self) -> dict:
        return dict(super().describe(), p_uniform=self.clock.p_uniform, gamma=self.clock.gamma, clock=self.clock.name)

    def times(self, alpha) -> torch.Tensor:
        """float64 t with alpha_t = ``alpha`` on GIDD's clock."""
        return self.clock.t_from_alpha(torch.as_tensor(alpha, dtype=torch.float64))

    def _masses(self, alpha, *, dtype: torch.dtype = torch.float64, device=None):
        """(per token, on the mask), each of alpha's shape: (beta pi)_t's two values, c_t / (C C_t) and t / C_t."""
        t = self.times(alpha).to(dtype=dtype, device=device)
        c, _ = self.clock.mixing(t)
        return c / (self.categories * (1 + c)), t / (1 + c)

    def _mass_at(self, z: torch.Tensor, alpha, dtype: torch.dtype) -> torch.Tensor:
        """(...) (beta pi)_t(z) at states ``z`` (``alpha`` broadcasts against them), without forming (..., V)."""
        token, mask = self._masses(alpha, dtype=dtype, device=z.device)
        return torch.where(z == self.categories, mask, token)

    def noise_mass(self, alpha, *, dtype: torch.dtype = torch.float64, device=None) -> torch.Tensor:
        """(..., V) (beta pi)_t: t / C_t on the mask, c_t / (C C_t) on each token; sums to 1 - alpha."""
        token, mask = self._masses(alpha, dtype=dtype, device=device)
        return torch.cat([token[..., None].expand(*token.shape, self.categories), mask[..., None]], dim=-1)

    def prior(self, *, dtype: torch.dtype = torch.float64, device=None, alpha=None) -> torch.Tensor:
        """(V,) pi_1 (the mask); with ``alpha``, pi_t at that time (..., V)."""
        if alpha is None:
            pi = torch.zeros(self.states, dtype=dtype, device=device)
            pi[self.categories] = 1.0
            return pi
        mass = self.noise_mass(alpha, dtype=dtype, device=device)
        return mass / mass.sum(-1, keepdim=True)

    def marginal(self, x0, alpha, *, dtype=torch.float64):
        probs = self._clean(x0, dtype)
        a = torch.as_tensor(alpha, dtype=dtype, device=probs.device)
        return a[..., None] * probs + self.noise_mass(a, dtype=dtype, device=probs.device)

    def _moved(self, z: torch.Tensor, alpha_t, alpha_s, dtype) -> torch.Tensor:
        """(...) the noise part of q(x_t = z | x_s): (beta pi)_t(z) - (alpha_t / alpha_s)(beta pi)_s(z)."""
        a_t = torch.as_tensor(alpha_t, dtype=dtype, device=z.device)
        a_s = torch.as_tensor(alpha_s, dtype=dtype, device=z.device)
        return (self._mass_at(z, a_t, dtype) - a_t / a_s * self._mass_at(z, a_s, dtype)).clamp_min(0)

    def transition(self, z, alpha_t, alpha_s, *, dtype=torch.float64):
        r = (torch.as_tensor(alpha_t, dtype=dtype, device=z.device) / alpha_s)[..., None]
        return r * F.one_hot(z, self.states).to(dtype) + self._moved(z, alpha_t, alpha_s, dtype)[..., None]

    def posterior_parts(self, z_t, x0_at_z, alpha_t, alpha_s):
        """The three parts, with the noise part drawn from pi_s (pass ``alpha=alpha_s`` to :meth:`noise`)."""
        dtype = torch.float64
        s_mass = self._mass_at(z_t, alpha_s, dtype)
        moved = self._moved(z_t, alpha_t, alpha_s, dtype)
        stay = alpha_t / alpha_s * (alpha_s * x0_at_z.to(dtype) + s_mass)
        return stay, moved * alpha_s, moved * (1 - alpha_s)

    def rate_into(self, z: torch.Tensor, alpha, alpha_prime=None) -> torch.Tensor:
        """(...) float64 b_t(z), the forward rate into state ``z`` at the time of ``alpha`` (0 < t < 1),
        per unit of GIDD's clock; with ``alpha_prime`` (d alpha / d tau of the caller's clock tau),
        per unit of the caller's time: b_t(z) dt / d tau = b_t(z) alpha_prime / alpha'_t."""
        a = torch.as_tensor(alpha, dtype=torch.float64, device=z.device)
        t = self.times(a)
        c, c_prime = self.clock.mixing(t)
        big = 1 + c
        mask = 1 / ((1 - t) * big)
        token = (c + (1 - t) * c_prime) / ((1 - t) * self.categories * big)
        rate = torch.where(z == self.categories, mask, token)
        if alpha_prime is None:
            return rate
        return rate * torch.as_tensor(alpha_prime, dtype=torch.float64, device=z.device) / self.clock.alpha_prime(t)

    def elbo_integrand(self, log_x_theta, x0, z_t, alpha, alpha_prime):
        """GIDD's form: w_t(z) [KL(q_t(. | x_0) || q_t(. | x_theta)) + R - log R - 1] (class
        docstring), float64, one pass over the V states, per unit of the time whose d alpha / dt is
        ``alpha_prime`` (GIDD's clock's own in the family, where the factor is 1). x_theta puts no
        mass on the mask (GIDD sets that logit to -inf).

        Without a graph (evaluation) the KL is summed from one float64 (..., V) tensor instead of about
        a dozen (:meth:`_kl_in_place`), the graph form's numbers bit for bit
        (tests/harness/test_processes.py)."""
        dtype = torch.float64
        if x0.is_floating_point():
            raise InputError("Hybrid.elbo_integrand takes clean token ids x0, not probabilities")
        a = torch.as_tensor(alpha, dtype=dtype, device=x0.device).expand(x0.shape)
        if tracked(log_x_theta):  # training: the graph needs every tensor
            q_x = self.marginal(x0, a, dtype=dtype)
            q_theta = self.marginal(log_x_theta.to(dtype).exp(), a, dtype=dtype)
            at_x, at_theta = (q.gather(-1, z_t[..., None])[..., 0] for q in (q_x, q_theta))
            kl = (torch.xlogy(q_x, q_x) - torch.xlogy(q_x, q_theta)).sum(-1)
        else:
            kl, at_x, at_theta = self._kl_in_place(log_x_theta, x0, z_t, a)
        log_r = torch.log(at_x) - torch.log(at_theta)
        weight = self.rate_into(z_t, a, torch.as_tensor(alpha_prime, dtype=dtype).expand(x0.shape)) / at_x
        out = weight * (kl + torch.expm1(log_r) - log_r)
        return torch.where(at_x > 0, out, torch.zeros_like(out))

    def _kl_in_place(self, log_x_theta, x0, z_t, a):
        """KL(q_t(. | x_0) || q_t(. | x_theta)) (...), q_t(z_t | x_0) and q_t(z_t | x_theta), with one
        float64 (..., V) tensor and no graph. q_t(. | x_0) takes three values, (beta pi)_t on a token,
        alpha + (beta pi)_t at x_0 and (beta pi)_t on the mask, so it is never formed: each of the V
        terms xlogy(q_x, q_x) - xlogy(q_x, q_theta) is computed from the same operands as in the whole
        tensors and summed over all V, mask column included, so the sum rounds as before."""
        dtype, C = torch.float64, self.categories
        token, mask = self._masses(a, dtype=dtype, device=x0.device)
        stay = a + token  # alpha 1 + (beta pi)_t: q_t(x_0 | x_0)
        terms = torch.empty(*x0.shape, C + 1, dtype=dtype, device=x0.device)
        body = terms[..., :C]
        body.copy_(log_x_theta).exp_().mul_(a[..., None]).add_(token[..., None])  # alpha x_theta + (beta pi)_t
        terms[..., C] = mask  # alpha 0 + (beta pi)_t(mask)
        at_theta = terms.gather(-1, z_t[..., None])[..., 0]
        theta_x0 = terms.gather(-1, x0[..., None])[..., 0]
        at_x = torch.where(z_t == C, mask, torch.where(z_t == x0, stay, token))
        torch.xlogy(token[..., None], body, out=body)
        torch.sub(torch.xlogy(token, token)[..., None], body, out=body)
        terms[..., C] = torch.xlogy(mask, mask) - torch.xlogy(mask, mask)
        terms.scatter_(-1, x0[..., None], (torch.xlogy(stay, stay) - torch.xlogy(stay, theta_x0))[..., None])
        return terms.sum(-1), at_x, at_theta

    def noise(self, clean, hit, *, generator=None, alpha=None):
        """Hit units become the mask with probability t / (t + c_t), else a uniform token."""
        u = _uniforms(clean, generator)
        if alpha is None:
            to_mask_p = torch.ones((), dtype=torch.float64, device=clean.device)
        else:
            a = torch.as_tensor(alpha, dtype=torch.float64, device=clean.device)
            token, mask = self._masses(a.reshape(*a.shape, *[1] * (clean.dim() - a.dim())), device=clean.device)
            to_mask_p = mask / (mask + self.categories * token)
        to_mask = u < to_mask_p
        token = ((u - to_mask_p) / (1 - to_mask_p) * self.categories).long().clamp_(0, self.categories - 1)
        draw = torch.where(to_mask, torch.full_like(token, self.categories), token)
        return torch.where(hit, draw, clean)

    def unrevealed(self, y):
        """Every unit: a token state may be uniform noise."""
        return torch.ones_like(y, dtype=torch.bool)


def _logsumexp_(x: torch.Tensor) -> torch.Tensor:
    """``torch.logsumexp(x, -1)`` by its own steps (the max, set to 0 where infinite, subtracted; exp;
    sum; log; the max added back), with ``x`` overwritten instead of copied: the same numbers bit for
    bit (tested), one (..., n) tensor fewer."""
    maxes = x.amax(-1, keepdim=True)
    maxes.masked_fill_(maxes.abs() == math.inf, 0)
    return x.sub_(maxes).exp_().sum(-1).log_().add_(maxes[..., 0])


def _uniforms(like: torch.Tensor, generator) -> torch.Tensor:
    """float64 U(0, 1) of ``like``'s shape; a list of generators draws row by row (one per row)."""
    if isinstance(generator, (list, tuple)):
        rows = [torch.rand(like.shape[1:], generator=g, dtype=torch.float64, device=g.device) for g in generator]
        return torch.stack(rows).to(like.device)
    device = generator.device if generator is not None else like.device
    return torch.rand(like.shape, generator=generator, dtype=torch.float64, device=device).to(like.device)


PROCESSES: Registry[type[ForwardProcess]] = Registry("forward process")
for _cls in (Absorbing, Uniform, Interpolating, Hybrid):
    PROCESSES.register(_cls.name, _cls)


def make_process(name: str, categories: int, **options) -> ForwardProcess:
    """The registered process ``name`` over ``categories`` values (did-you-mean on a typo)."""
    return PROCESSES.get(name)(categories, **options)


__all__ = ["Absorbing", "ForwardProcess", "Hybrid", "Interpolating", "PROCESSES", "Uniform", "make_process"]
