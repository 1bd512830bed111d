"""DUO (Sahoo et al. 2025, "The Diffusion Duality"): UDLM's uniform-state diffusion, trained with a
curriculum through the Gaussian diffusion that underlies it.

The duality: let w_t = a_g e_{x_0} + s_g eps (eps ~ N(0, I_C), a_g^2 = sigmoid(-g), s_g^2 = sigmoid(g),
the variance-preserving Gaussian process at log-SNR -g). Its argmax is a uniform-state discrete
latent with

    alpha(g) = (C p(g) - 1) / (C - 1),   p(g) = P(argmax w = x_0) = int phi(x - r) Phi(x)^(C-1) dx,

r = exp(-g/2) (:func:`duality_alpha`, computed by quadrature in float64 together with dalpha/dg).

* **Evaluation is UDLM's.** Outside the curriculum the model is UDLM (``baselines.udlm``): the
  same network (C tokens in, C logits out, time input on), the same continuous-time ELBO under the
  model's schedule (log-linear by default), the same ``posterior`` sampler. The reported likelihood
  is that bound; DUO's own harness evaluates its checkpoints the same way (``algo=duo_base``).
* **The curriculum** (``curriculum_end`` > 0, training steps only, DUO's ``simple`` mode): for a
  training step before ``curriculum_end`` the loss draws t (stratified, in [1e-3, 1]), g = g_min +
  t (g_max - g_min), w_t as above, z_t = argmax w_t, and feeds the network the *soft* input
  softmax(w_t / tau) (its embedding is the probability-weighted average of the token embeddings,
  :class:`harness.backbone.TokenEmbedding`), with log10 tau held at ``tau_log10_start`` until
  ``curriculum_start`` and then moved linearly to ``tau_log10_end`` at ``curriculum_end``. The terms are
  the ELBO integrand of the uniform process at alpha(g) with d alpha/dt = alpha'(g) (g_max - g_min),
  at the discrete z_t. The time input is the schedule's time of that alpha, so that the network
  sees the same (alpha -> time) map at training and evaluation. From ``curriculum_end`` on, the loss
  is UDLM's.

What differs from DUO's code, on purpose: alpha(g) and its derivative are computed by quadrature
at each g (DUO looks them up in a 10^5-point cache over g in [-5, -1] and differentiates by a finite
step of 10^-3 in g); the relative difference is below 10^-6. Not here: DUO's few-step distillation
(DCD) and its efficient top-k curriculum variants (see docs). Its release layout is ``duo-hf:``
(:mod:`harness.models.duo_import`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from baselines.udlm import UDLM, UDLMConfig
from harness import diffusion
from harness.errors import ConfigError
from harness.models import MODELS

#: the quadrature grid: x - r in [-GRID_HALF_WIDTH, GRID_HALF_WIDTH] (phi is below 1e-31 outside)
GRID_HALF_WIDTH = 12.0
GRID_POINTS = 4001


def duality_alpha(gamma: torch.Tensor, categories: int) -> tuple[torch.Tensor, torch.Tensor]:
    """alpha(g) and d alpha / d g (float64, the shape of ``gamma``) of the uniform-state latent that the
    argmax of the Gaussian latent at log-SNR -g follows over ``categories`` tokens (module docstring).

    p(g) = int phi(x - r) Phi(x)^(C-1) dx and dp/dg = int -(r/2)(x - r) phi(x - r) Phi(x)^(C-1) dx,
    r = exp(-g/2), by the trapezoid rule on a fine grid around r (the integrand is smooth and decays
    like phi, so the error is far below float64's needs for C >= 2)."""
    if categories < 2:
        raise ConfigError(f"the duality needs at least 2 categories, got {categories}")
    g = gamma.to(torch.float64)
    r = torch.exp(-g / 2).reshape(-1, 1)
    offsets = torch.linspace(-GRID_HALF_WIDTH, GRID_HALF_WIDTH, GRID_POINTS, dtype=torch.float64, device=g.device)
    x = r + offsets
    log_f = -0.5 * offsets**2 - 0.5 * math.log(2 * math.pi) + (categories - 1) * torch.special.log_ndtr(x)
    f = torch.exp(log_f)
    p = torch.trapezoid(f, x, dim=-1)
    dp = torch.trapezoid(-0.5 * r * offsets * f, x, dim=-1)
    c = float(categories)
    alpha = ((c * p - 1.0) / (c - 1.0)).reshape(g.shape)
    dalpha = (c / (c - 1.0) * dp).reshape(g.shape)
    return alpha, dalpha


def gaussian_latent(x0: torch.Tensor, gamma: torch.Tensor, categories: int, generator) -> torch.Tensor:
    """w_t = a_g onehot(x_0) + s_g eps, (B, L, C) float32, with g (B,) per row (DUO's ``_q_xt_gaussian``)."""
    g = gamma.to(torch.float32)[:, None, None]
    eps = torch.randn((*x0.shape, categories), generator=generator, device=x0.device, dtype=torch.float32)
    onehot = torch.nn.functional.one_hot(x0, categories).to(torch.float32)
    return torch.sigmoid(-g).sqrt() * onehot + torch.sigmoid(g).sqrt() * eps


@dataclass(frozen=True)
class DUOConfig(UDLMConfig):
    """DUO's keys: UDLM's, plus the curriculum (off when ``curriculum_end`` is 0; DUO's own runs use
    start 100k and end 200k of 1M steps, g in [-3.5, -1.75], log10 tau from -1 to -2)."""

    curriculum_start: int = 0
    curriculum_end: int = 0
    gamma_min: float = -3.5
    gamma_max: float = -1.75
    tau_log10_start: float = -1.0
    tau_log10_end: float = -2.0


class DUO(UDLM):
    """UDLM trained through its Gaussian dual (curriculum); evaluated as UDLM: NLL is an upper bound."""

    family = "duo"
    config_class = DUOConfig
    table_order = 6
    release_formats = ("duo-hf:",)

    def __init__(
        self,
        *,
        curriculum_start: int = 0,
        curriculum_end: int = 0,
        gamma_min: float = -3.5,
        gamma_max: float = -1.75,
        tau_log10_start: float = -1.0,
        tau_log10_end: float = -2.0,
        **kwargs,
    ):
        if not 0 <= int(curriculum_start) <= int(curriculum_end):
            raise ConfigError(
                f"model.curriculum_start={curriculum_start} and model.curriculum_end={curriculum_end} must satisfy "
                "0 <= start <= end",
                fix="set curriculum_end to the step where the curriculum stops (0 turns it off)",
            )
        if not gamma_min < gamma_max:
            raise ConfigError(f"model.gamma_min={gamma_min} must be below model.gamma_max={gamma_max}")
        curriculum = dict(
            curriculum_start=int(curriculum_start),
            curriculum_end=int(curriculum_end),
            gamma_min=float(gamma_min),
            gamma_max=float(gamma_max),
            tau_log10_start=float(tau_log10_start),
            tau_log10_end=float(tau_log10_end),
        )
        super().__init__(**kwargs)
        for key, value in curriculum.items():
            setattr(self, key, value)
        self._train_step: int | None = None

    def begin_train_step(self, step: int, total_steps: int) -> None:
        self._train_step = int(step)

    def in_curriculum(self) -> bool:
        """True while training before ``curriculum_end`` (the Gaussian-relaxed loss)."""
        return self.training and self._train_step is not None and self._train_step < self.curriculum_end

    def inverse_temperature(self, step: int) -> float:
        """1 / tau at a training step: log10 tau is ``tau_log10_start`` until ``curriculum_start``, then
        linear to ``tau_log10_end`` at ``curriculum_end`` (DUO's ``_compute_gumbel_tau_inverse``)."""
        if step < self.curriculum_start or self.curriculum_end == self.curriculum_start:
            log_tau = self.tau_log10_start
        else:
            frac = min(1.0, (step - self.curriculum_start) / (self.curriculum_end - self.curriculum_start))
            log_tau = self.tau_log10_start + frac * (self.tau_log10_end - self.tau_log10_start)
        return 10.0 ** (-log_tau)

    def loss(self, x0: torch.Tensor, *, generator: torch.Generator | None = None, attention_mask=None) -> torch.Tensor:
        """UDLM's loss, or during the curriculum the Gaussian-relaxed one (module docstring)."""
        if not self.in_curriculum():
            return super().loss(x0, generator=generator, attention_mask=attention_mask)
        self.check_tokens(x0)
        tokens = self.scored_tokens(x0, attention_mask, None)
        u = diffusion.batch_stratified_uniform(x0.shape[0], generator=generator, device=x0.device)
        t = diffusion.times_from_uniform(u)
        gamma = self.gamma_min + t * (self.gamma_max - self.gamma_min)
        alpha, dalpha_dgamma = duality_alpha(gamma, self.vocab_size)
        alpha_prime = dalpha_dgamma * (self.gamma_max - self.gamma_min)
        w = gaussian_latent(x0, gamma, self.vocab_size, generator)
        z_t = w.argmax(-1)
        soft = torch.softmax(w * self.inverse_temperature(self._train_step), dim=-1)
        a_end = float(self.schedule.alpha(1.0))
        t_net = self.schedule.t_from_alpha(alpha.clamp(min=a_end, max=1.0)).float()
        logits = self.backbone(soft, t_net, attention_mask)
        log_p = torch.log_softmax(logits.float(), dim=-1)
        rate = self.process.elbo_integrand(log_p, x0, z_t, alpha[:, None], alpha_prime[:, None])
        rate = torch.where(tokens, rate, torch.zeros_like(rate)).to(log_p.dtype)
        return rate.sum() / tokens.sum().clamp_min(1)


MODELS.register("duo", DUO)

__all__ = ["DUO", "DUOConfig", "duality_alpha", "gaussian_latent"]
