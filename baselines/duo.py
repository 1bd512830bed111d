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

* **Distillation** (``distill: true``, DUO's discrete consistency distillation, DCD, for few-step
  sampling; start it from a trained DUO with ``train.init_from``): a teacher, a frozen copy of the
  network refreshed from the student every ``update_teacher_every`` steps, sees the Gaussian latent
  one step dt = 2^n / ``distill_T`` earlier (n = step // ``update_teacher_every``) on the *same*
  noise: t ~ U[1e-3, 1], t <- min(t + dt, 1), s = t - dt, g in [``distill_gamma_min``,
  ``distill_gamma_max``]; the student at (argmax w_t, alpha(g_t)) is pulled to the teacher at
  (argmax w_s, alpha(g_s)) by KL(student || teacher) (``distill_loss: kl-bwd``, DUO's default) or
  KL(teacher || student) (``kl-fwd``), summed over the vocabulary and averaged over scored tokens.
  The teacher is not part of the checkpoint: a resumed run rebuilds it from the student at the
  resume step, so a resumed distillation is not bit-identical to an uninterrupted one.

What differs from DUO's code, on purpose: alpha(g) and its derivative are computed by quadrature
at each g (DUO looks them up in a 10^5-point cache over g in [-5, -1] and differentiates by a finite
step of 10^-3 in g); the relative difference is below 10^-6. Not here: DUO's efficient top-k
curriculum variants. Its release layout is ``duo-hf:`` (:mod:`harness.models.duo_import`).
"""

from __future__ import annotations

import copy
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


def gaussian_latent(
    x0: torch.Tensor, gamma: torch.Tensor, categories: int, generator, eps: torch.Tensor | None = None
) -> torch.Tensor:
    """w_t = a_g onehot(x_0) + s_g eps, (B, L, C) float32, with g (B,) per row (DUO's ``_q_xt_gaussian``);
    ``eps`` (B, L, C) reuses a draw (DCD's teacher and student share it), else it is drawn."""
    g = gamma.to(torch.float32)[:, None, None]
    if eps is None:
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
    distill: bool = False
    distill_T: int = 512
    update_teacher_every: int = 10_000
    distill_gamma_min: float = -4.0
    distill_gamma_max: float = -1.0
    distill_loss: str = "kl-bwd"


#: DCD's divergences: KL(student || teacher) and KL(teacher || student)
DISTILL_LOSSES = ("kl-bwd", "kl-fwd")


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
        distill: bool = False,
        distill_T: int = 512,
        update_teacher_every: int = 10_000,
        distill_gamma_min: float = -4.0,
        distill_gamma_max: float = -1.0,
        distill_loss: str = "kl-bwd",
        **kwargs,
    ):
        # curriculum_end 0 turns the curriculum off, whatever start a preset carries (a distillation
        # overrides only the end of small/duo's curriculum)
        if int(curriculum_start) < 0 or (int(curriculum_end) and int(curriculum_start) > int(curriculum_end)):
            raise ConfigError(
                f"model.curriculum_start={curriculum_start} and model.curriculum_end={curriculum_end} must satisfy "
                "0 <= start <= end",
                fix="set curriculum_end to the step where the curriculum stops (0 turns it off)",
            )
        if not gamma_min < gamma_max:
            raise ConfigError(f"model.gamma_min={gamma_min} must be below model.gamma_max={gamma_max}")
        if not distill_gamma_min < distill_gamma_max:
            raise ConfigError(
                f"model.distill_gamma_min={distill_gamma_min} must be below model.distill_gamma_max={distill_gamma_max}"
            )
        if distill_loss not in DISTILL_LOSSES:
            raise ConfigError(f"model.distill_loss={distill_loss!r} is unknown", fix=f"use one of {DISTILL_LOSSES}")
        if int(distill_T) < 1 or int(update_teacher_every) < 1:
            raise ConfigError(
                f"model.distill_T={distill_T} and model.update_teacher_every={update_teacher_every} must be >= 1"
            )
        if distill and curriculum_end:
            raise ConfigError(
                "model.distill and the curriculum (model.curriculum_end > 0) exclude each other",
                fix="distil a trained DUO (train.init_from) with curriculum_end: 0",
            )
        curriculum = dict(
            curriculum_start=int(curriculum_start),
            curriculum_end=int(curriculum_end),
            gamma_min=float(gamma_min),
            gamma_max=float(gamma_max),
            tau_log10_start=float(tau_log10_start),
            tau_log10_end=float(tau_log10_end),
            distill=bool(distill),
            distill_T=int(distill_T),
            update_teacher_every=int(update_teacher_every),
            distill_gamma_min=float(distill_gamma_min),
            distill_gamma_max=float(distill_gamma_max),
            distill_loss=str(distill_loss),
        )
        super().__init__(**kwargs)
        for key, value in curriculum.items():
            setattr(self, key, value)
        self._train_step: int | None = None
        self.__dict__["_teacher"] = None  # not a submodule: never saved, never optimised

    def begin_train_step(self, step: int, total_steps: int) -> None:
        self._train_step = int(step)
        if self.distill and (self._teacher is None or step % self.update_teacher_every == 0):
            self.refresh_teacher()

    @property
    def teacher(self) -> torch.nn.Module | None:
        """The distillation teacher (a frozen copy of the network), None before the first step."""
        return self._teacher

    def refresh_teacher(self) -> None:
        """Copy the student's network into the teacher (DUO's ``_maybe_update_teacher_weights``)."""
        teacher = copy.deepcopy(self.backbone).eval()
        for p in teacher.parameters():
            p.requires_grad_(False)
        self.__dict__["_teacher"] = teacher

    def distill_dt(self, step: int) -> float:
        """The teacher's step at a training step: 2^n / ``distill_T``, n = step // ``update_teacher_every``."""
        return 2.0 ** (step // self.update_teacher_every) / self.distill_T

    def _network_time(self, alpha: torch.Tensor) -> torch.Tensor:
        """The schedule's time of each alpha (the network's time input), float32."""
        a_end = float(self.schedule.alpha(1.0))
        return self.schedule.t_from_alpha(alpha.clamp(min=a_end, max=1.0)).float()

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
        """UDLM's loss, during the curriculum the Gaussian-relaxed one, and in a distillation run (training
        steps only) DCD's divergence from the teacher (module docstring)."""
        if self.distill and self.training and self._train_step is not None:
            return self.distill_loss_value(x0, generator=generator, attention_mask=attention_mask)
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
        logits = self.backbone(soft, self._network_time(alpha), attention_mask)
        log_p = torch.log_softmax(logits.float(), dim=-1)
        rate = self.process.elbo_integrand(log_p, x0, z_t, alpha[:, None], alpha_prime[:, None])
        rate = torch.where(tokens, rate, torch.zeros_like(rate)).to(log_p.dtype)
        return rate.sum() / tokens.sum().clamp_min(1)

    def distill_loss_value(
        self, x0: torch.Tensor, *, generator: torch.Generator | None = None, attention_mask=None
    ) -> torch.Tensor:
        """DCD's loss at the current training step: the divergence between the student at t and the
        teacher at s = t - dt on the same Gaussian noise, per scored token (module docstring)."""
        if self._teacher is None:
            self.refresh_teacher()
        self.check_tokens(x0)
        tokens = self.scored_tokens(x0, attention_mask, None)
        dt = self.distill_dt(self._train_step or 0)
        u = diffusion.batch_stratified_uniform(x0.shape[0], generator=generator, device=x0.device)
        t = (diffusion.times_from_uniform(u) + dt).clamp(max=1.0)
        span = self.distill_gamma_max - self.distill_gamma_min
        g_t, g_s = self.distill_gamma_min + t * span, self.distill_gamma_min + (t - dt) * span
        alpha_t, alpha_s = duality_alpha(g_t, self.vocab_size)[0], duality_alpha(g_s, self.vocab_size)[0]
        eps = torch.randn((*x0.shape, self.vocab_size), generator=generator, device=x0.device, dtype=torch.float32)
        z_t = gaussian_latent(x0, g_t, self.vocab_size, None, eps).argmax(-1)
        z_s = gaussian_latent(x0, g_s, self.vocab_size, None, eps).argmax(-1)
        student = torch.log_softmax(self.backbone(z_t, self._network_time(alpha_t), attention_mask).float(), -1)
        with torch.no_grad():
            teacher = torch.log_softmax(self._teacher(z_s, self._network_time(alpha_s), attention_mask).float(), -1)
        if self.distill_loss == "kl-bwd":
            kl = (student.exp() * (student - teacher)).sum(-1)
        else:
            kl = (teacher.exp() * (teacher - student)).sum(-1)
        kl = torch.where(tokens, kl, torch.zeros_like(kl))
        return kl.sum() / tokens.sum().clamp_min(1)


MODELS.register("duo", DUO)

__all__ = ["DUO", "DUOConfig", "duality_alpha", "gaussian_latent"]
