"""The base of the masked-diffusion families (MDLM, the time-agnostic masked model, MDM-Prime).

A family here corrupts *units* (whole tokens, or Prime's ell sub-tokens per token) with its forward
process (``model.process``, :mod:`harness.processes`: the absorbing one over :attr:`unit_base`
values for every family so far) and is scored by the continuous-time NELBO

    -log p(x_0) <= E_t[ w(t) * sum over masked units of term(unit | z_t) ],   w = -alpha'_t / (1 - alpha_t),

estimated by Monte Carlo. This class owns the constructor, the forward process over units and
that estimator; a family says only what differs:

* ``units(x0)``: (B, L) tokens -> its clean units, (B, L) or (B, L, ell), and ``unit_base``;
* ``log_probs(z_t, t)``: (B, L, C) log p_theta(x_0^i = c | z_t);
* ``unit_terms(log_p, x0, units, masked, estimator, scored)``: (B, L) nats per token for one
  corruption (``scored``: the (B, L) tokens being scored);
* what the samplers ask (:mod:`harness.sampling`, which never asks which family it drives): the
  units of a token as a (..., ell) state (:meth:`sampler_units`), the codes they spell
  (:meth:`sampler_tokens`), the token distribution given a state (:meth:`sampler_log_probs`), the
  ancestral joint draw (:meth:`joint_draw`), the law of one unit's value (:meth:`unit_log_marginals`)
  and the codes that are no token (:meth:`invalid_codes`).

:meth:`nll` is the one Monte-Carlo estimator that ``eval ppl``, the lm-eval adapter and the audits
run (through :func:`harness.diffusion.monte_carlo_nelbo`, as ``prime.bounds``' Monte-Carlo mode);
``corruptible`` marks the tokens it may mask (the adapter's continuation), the rest is context that
is always visible.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, overload

import torch
from torch import nn

from harness import diffusion
from harness.audit.gumbel import mdlm_joint_draw_law
from harness.backbone import Backbone, BackboneConfig
from harness.diffusion import Generators
from harness.errors import InputError
from harness.models.base import Estimator, ModelConfig, ModelFamily
from harness.nll import NLL
from harness.positions import build_positions
from harness.processes import make_process
from harness.sampling.categorical import sample_categorical
from harness.schedules import get_schedule


@dataclass(frozen=True)
class MaskedDiffusionConfig(ModelConfig):
    """Keys of a time-independent masked-diffusion model: the noise schedule (``loglinear``, ...)."""

    schedule: str = "loglinear"


@dataclass(frozen=True)
class MDLMConfig(MaskedDiffusionConfig):
    """MDLM adds an optional time input (off, as MDLM's OWT checkpoints) of width ``cond_dim``."""

    time_conditioning: bool = False
    cond_dim: int = 64


BOUND = Estimator("bound", "bound", "", "Monte-Carlo NELBO: sum over masked tokens of -log p(x_0^i | z_t), weighted")


class MaskedDiffusion(ModelFamily):
    """Absorbing-mask diffusion over units; ``nll`` is the Monte-Carlo NELBO (an upper bound)."""

    config_class: ClassVar[type[ModelConfig]] = MaskedDiffusionConfig
    forward_process = "absorbing"
    default_sampler = "ancestral"
    token_by_token_sampler = "first-hitting"
    estimators = (BOUND,)
    token_convention = "all L positions of each row are scored, BOS/EOS included, as MDLM's NELBO"
    uses_time_sampler = True
    #: how the training loss draws its corruption: "t" (per-sequence time) or "n" (exact mask count)
    train_sampler: ClassVar[str] = "t"
    #: the estimator the training loss minimises
    train_estimator: ClassVar[str] = "bound"
    default_time_sampler: ClassVar[str | None] = "t"

    def __init__(
        self,
        *,
        vocab_size: int,
        seq_len: int,
        d_model: int = 128,
        n_layers: int = 2,
        n_heads: int = 4,
        mlp_ratio: int = 4,
        dropout: float = 0.0,
        positions: str = "rope",
        image_shape: str = "",
        mixer_width: int = 0,
        mixer_placement: str = "input",
        schedule: str = "loglinear",
        time_conditioning: bool = False,
        cond_dim: int = 64,
        extra_hparams: dict[str, Any] | None = None,
        process_options: dict[str, Any] | None = None,
    ):

        shape = dict(d_model=d_model, n_layers=n_layers, n_heads=n_heads, mlp_ratio=mlp_ratio, dropout=dropout)
        if mixer_width:  # recorded only when on, so the plain DiT's hyper-parameters are unchanged
            shape.update(mixer_width=int(mixer_width), mixer_placement=mixer_placement)
        super().__init__(
            vocab_size=vocab_size,
            seq_len=seq_len,
            hparams=dict(
                shape, schedule=schedule, positions=positions, image_shape=image_shape, **(extra_hparams or {})
            ),
        )
        self.time_conditioning = bool(time_conditioning)
        self.schedule = get_schedule(schedule)
        self.process = make_process(self.forward_process, self.unit_base, **(process_options or {}))
        self.mask_id = self.process.mask_id  # C for whole tokens, b for Prime's sub-tokens
        # parameters are created in this order (embedding, positions, backbone): seeds give the same weights
        embedding = self._embedding(d_model)
        self.backbone = Backbone(
            BackboneConfig(
                vocab_in=self.process.states,  # C + 1 with a mask state
                vocab_out=vocab_size,
                seq_len=seq_len,
                time_conditioning=self.time_conditioning,
                cond_dim=cond_dim,
                **shape,
            ),
            embedding=embedding,
            positions=build_positions(positions, image_shape, d_model=d_model, seq_len=seq_len),
        )

    # -- what a family overrides -------------------------------------------------------------
    def _embedding(self, d_model: int) -> nn.Module | None:
        return None  # the backbone's plain (C + 1) x D table

    def units(self, x0: torch.Tensor) -> torch.Tensor:
        """(B, L) token ids -> the clean units the forward process masks."""
        return x0

    def unit_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, L) bool per token -> the same per unit."""
        return tokens

    def unit_terms(
        self,
        log_p: torch.Tensor,
        x0: torch.Tensor,
        units: torch.Tensor,
        masked: torch.Tensor,
        estimator: str,
        scored: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(B, L) nats per token for one corruption: -log p(x_0^i | z_t) where token i is masked.
        ``scored`` (B, L): the tokens the NLL covers (a superset of the masked ones)."""
        true = log_p.gather(-1, x0[..., None]).squeeze(-1)
        return torch.where(masked, -true, torch.zeros_like(true))

    def log_probs(
        self, z_t: torch.Tensor, t: torch.Tensor | None = None, attention_mask=None, x0: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, L, C) log p_theta(x_0^i = c | z_t). ``x0``: the clean tokens z_t corrupts, given by the
        estimators, the training health and the greedy check; only a network that also reads clean
        tokens uses it (BD3-LM's earlier blocks), the others ignore it."""
        raise NotImplementedError

    # -- facts --------------------------------------------------------------------------------
    #: units are sub-tokens of a token's code: the network takes (B, L, ell) (MDM-Prime)
    subtokens: ClassVar[bool] = False
    #: how :meth:`context_free_token_law` is computed, for the records that use it
    context_free_law: ClassVar[str] = (
        "grid model of torch.rand (harness.audit.gumbel.grid_gumbel_probs) over C + 1 outcomes, integrated "
        "over the T steps (mdlm_joint_draw_law)"
    )
    samplers: ClassVar[tuple[str, ...]] = ("ancestral", "first-hitting", "maskgit", "remdm")

    @property
    def unit_base(self) -> int:
        """Values a unit takes besides the mask: C for whole tokens."""
        return self.vocab_size

    # -- what the samplers ask: states (..., ell) of ell units per token (ell = 1 here) -------------
    def sampler_units(self, x: torch.Tensor) -> torch.Tensor:
        """(...) token ids -> (..., ell) units, the samplers' state layout."""
        return self.units(x)[..., None]

    def sampler_tokens(self, y: torch.Tensor) -> torch.Tensor:
        """(..., ell) fully revealed units -> (...) the codes they spell."""
        return y[..., 0]

    def sampler_log_probs(self, y: torch.Tensor, t: torch.Tensor | None) -> torch.Tensor:
        """(B, L, ell) state, t (B,) -> (B, L, C) log p_theta(x^i = c | y), the network's own dtype."""
        return self.log_probs(y[..., 0], t)

    def sampler_log_scores(self, y: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """(B, L, 1) states, t (B,) -> (B, L, V) log concrete scores: those the denoiser implies
        (:meth:`harness.processes.ForwardProcess.log_ratios`, float64); a family whose network outputs
        scores (SEDD) gives its own. Whole-token units only."""
        probs = torch.exp(self.sampler_log_probs(y, t).double())
        return self.process.log_ratios(probs, y[..., 0], self.schedule.alpha(t.double())[:, None])

    def joint_draw(
        self,
        probs: torch.Tensor,
        y: torch.Tensor,
        masked: torch.Tensor,
        m_t: float,
        m_s: float,
        *,
        method: str,
        dtype: torch.dtype,
        generator: torch.Generator | None,
    ) -> torch.Tensor:
        """The ancestral step from t to s drawn in one go (MDLM's ``_ddpm_caching_update``) at N
        positions with a masked unit: ``probs`` (N, C) the shaped token distribution, ``y`` and
        ``masked`` (N, ell) their units -> (N, ell) the next units (the mask id where they stay masked).

        One categorical over C + 1 outcomes per position with ``method`` in ``dtype``
        (:func:`harness.sampling.sample_categorical`): token c with mass p(c) (m_t - m_s), stay
        masked (outcome C, the mask id) with mass m_s; m = 1 - alpha."""
        stay = probs.new_full((*probs.shape[:-1], 1), m_s)
        mass = torch.cat([probs * (m_t - m_s), stay], dim=-1)  # (N, C + 1)
        return sample_categorical(probs=mass, method=method, dtype=dtype, generator=generator)[..., None]

    def context_free_token_law(self, probs: torch.Tensor, *, steps: int, dtype: torch.dtype | str) -> torch.Tensor:
        """The law of the token a position ends with when a context-free denoiser (``probs`` (C,) at
        every masked position, whatever is revealed) is sampled by :meth:`joint_draw` with ``steps``
        steps of ``torch.rand`` noise in ``dtype``: float64 (C,). Here a token is drawn together with
        the stay-masked outcome at every step, so the law depends on ``steps``
        (:func:`harness.audit.gumbel.mdlm_joint_draw_law`)."""

        return mdlm_joint_draw_law(probs, steps=steps, dtype=dtype)

    def unit_log_marginals(self, log_p: torch.Tensor, unit: torch.Tensor) -> torch.Tensor:
        """(B, C) token log-probabilities at one position per row, ``unit`` (B,) which of its ell
        units -> (B, V) log-probabilities of that unit's V values (V = C: the unit is the token)."""
        return log_p

    def invalid_codes(self, y: torch.Tensor) -> torch.Tensor | None:
        """(B, L, ell) fully revealed units -> (B, L) bool: codes that are no token (>= C); None when
        no state spells one (whole tokens), so there is nothing to count."""
        return None

    # -- the forward process and the estimator --------------------------------------------------
    def corrupt(self, units: torch.Tensor, u: torch.Tensor, valid: torch.Tensor, sampler: str, generator: Generators):
        """One corruption per row from uniforms u (B,): ``(z_t, masked, weight (B,), t (B,) or None)``."""
        return diffusion.corrupt(
            units,
            u,
            valid,
            sampler=sampler,
            schedule=self.schedule,
            process=self.process,
            generator=generator,
            time_conditioning=self.time_conditioning,
        )

    def loss(self, x0: torch.Tensor, *, generator: torch.Generator | None = None, attention_mask=None) -> torch.Tensor:
        """The training objective per token (nats), one corruption per sequence, stratified over the batch.

        The terms are :meth:`nll_terms` of :attr:`train_estimator`, the one implementation that
        :meth:`nll` (``eval ppl``) scores with, under :attr:`train_sampler`'s draw; K = 1 stratified
        over the batch is also ``eval ppl``'s draw, so a model trained on its bound is trained on the
        very estimator it is graded by (divided by the token count)."""
        self.check_tokens(x0)
        tokens = self.scored_tokens(x0, attention_mask, None)
        units = self.units(x0)
        u = diffusion.batch_stratified_uniform(x0.shape[0], generator=generator, device=x0.device)
        z_t, masked, weight, t = self.corrupt(units, u, self.unit_mask(tokens), self.train_sampler, generator)
        (terms,) = self.nll_terms(
            z_t,
            None if t is None else t.float(),
            masked,
            attention_mask=attention_mask,
            x0=x0,
            units=units,
            estimators=[self.train_estimator],
            scored=tokens,
        )
        nats = terms.sum(-1)
        return (weight.to(torch.float32) * nats).sum() / tokens.sum().clamp_min(1)

    @torch.no_grad()
    def masked_cross_entropy(
        self, x0: torch.Tensor, *, rate: float, generator: torch.Generator | None = None, attention_mask=None
    ) -> float:
        """Mean -log p(x_0^i | z) (nats) over the masked tokens, each real token masked whole (all of
        its units) independently with probability ``rate`` (every token at rate 1); a time-conditioned
        network gets the t whose mask probability is ``rate``. Training health compares rate 0.15
        with rate 1: a network that uses its context predicts the few masked tokens far better than
        the unigram. Tokens are masked whole so that a sub-token model is not credited for the
        visible digits of a partly masked token."""
        self.check_tokens(x0)
        tokens = self.scored_tokens(x0, attention_mask, None)
        masked = (
            tokens
            if rate >= 1
            else tokens & (torch.rand(x0.shape, generator=generator, device="cpu").to(x0.device) < rate)
        )
        z = self.process.noise(self.units(x0), self.unit_mask(masked), generator=generator)
        t = None
        if self.time_conditioning:
            alpha = max(1.0 - min(rate, 1.0 - 1e-6), float(self.schedule.alpha(1.0)))  # loglinear: alpha_1 = eps
            t = self.schedule.t_from_alpha(torch.full((x0.shape[0],), alpha)).float().to(x0.device)
        log_p = self.log_probs(z, t, attention_mask, x0)
        true = log_p.gather(-1, x0[..., None]).squeeze(-1)
        return float(-true[masked].double().mean()) if bool(masked.any()) else float("nan")

    @overload
    def nll(
        self,
        x0: torch.Tensor,
        *,
        estimators: None = None,
        num_samples: int = 1,
        generator: Generators = None,
        attention_mask: torch.Tensor | None = None,
        corruptible: torch.Tensor | None = None,
        time_sampler: str | None = None,
    ) -> NLL: ...

    @overload
    def nll(
        self,
        x0: torch.Tensor,
        *,
        estimators: Sequence[str],
        num_samples: int = 1,
        generator: Generators = None,
        attention_mask: torch.Tensor | None = None,
        corruptible: torch.Tensor | None = None,
        time_sampler: str | None = None,
    ) -> list[NLL]: ...

    @torch.no_grad()
    def nll(
        self,
        x0: torch.Tensor,
        *,
        estimators: Sequence[str] | None = None,
        num_samples: int = 1,
        generator: Generators = None,
        attention_mask: torch.Tensor | None = None,
        corruptible: torch.Tensor | None = None,
        time_sampler: str | None = None,
    ) -> NLL | list[NLL]:
        """Monte-Carlo NELBO per sequence of ``x0`` (B, L): nats (B,) over the scored tokens, from K =
        ``num_samples`` corruptions of each row (:func:`harness.diffusion.monte_carlo_nelbo`).

        ``estimators``: names of the family's estimators, all scored from the same corruptions and
        one forward pass per corruption; a list with one :class:`~harness.nll.NLL` per name comes
        back (each equal to scoring that name alone with the same generator). None: the default
        estimator, one NLL. K = 1 stratifies the single draw over the batch (MDLM's protocol; the
        per-sequence standard error is then NaN); K > 1 stratifies over the K samples of each
        sequence. ``generator``: one generator, or one per row (a row's draws then do not depend on
        its batch). ``time_sampler``: "t" (MDLM time) or "n" (exact mask count), default
        :meth:`time_sampler`'s. Only ``corruptible`` (B, L) real tokens (``attention_mask`` (B, L))
        are ever masked; the rest of the row is visible context.
        """
        self.check_tokens(x0)
        names = [self.estimators[0].name] if estimators is None else list(estimators)
        if not names:
            raise InputError("estimators is empty", fix="name at least one, or pass None for the default")
        kinds = [self.estimator(name).kind for name in names]
        tokens = self.scored_tokens(x0, attention_mask, corruptible)
        units = self.units(x0)
        terms = partial(
            self.nll_terms, attention_mask=attention_mask, x0=x0, units=units, estimators=names, scored=tokens
        )
        nats, stderr = diffusion.monte_carlo_nelbo(
            units,
            self.unit_mask(tokens),
            terms,
            schedule=self.schedule,
            process=self.process,
            sampler=self.time_sampler(time_sampler),
            num_samples=num_samples,
            generator=generator,
            time_conditioning=self.time_conditioning,
            block_size=self.nelbo_block_size,
        )
        count = tokens.sum(-1).double()
        out = [
            NLL(nats=nats[..., i], tokens=count, kind=kind, stderr=stderr[..., i], num_samples=num_samples)
            for i, kind in enumerate(kinds)
        ]
        return out[0] if estimators is None else out

    def nll_terms(
        self,
        z_t: torch.Tensor,
        t: torch.Tensor | None,
        masked: torch.Tensor,
        *,
        attention_mask: torch.Tensor | None,
        x0: torch.Tensor,
        units: torch.Tensor,
        estimators: Sequence[str],
        scored: torch.Tensor,
    ) -> list[torch.Tensor]:
        """One corruption's (B, L) nats per token for each of ``estimators``, from one network call on
        ``z_t`` (the units of ``x0`` with ``masked`` set to the mask id); ``scored`` (B, L) are the
        tokens being scored. Families with a faster fused form (Prime) override this."""
        log_p = self.log_probs(z_t, t, attention_mask, x0)
        return [self.unit_terms(log_p, x0, units, masked, name, scored) for name in estimators]

    @torch.no_grad()
    def greedy_matches(self, x0: torch.Tensor, *, attention_mask=None, corruptible: torch.Tensor) -> torch.Tensor:
        """(B,) bool: with every corruptible unit masked, one pass's argmax equals the tokens there
        (the MDLM/DUO lm-eval practice: a check of the one-step denoiser, not of a sampler)."""
        scored = self.scored_tokens(x0, attention_mask, corruptible)
        units = self.units(x0)
        # every corruptible unit set to noise; a process that draws its noise (uniform) draws it from a
        # fixed seed, so the check is deterministic (the absorbing process draws nothing)
        z = self.process.noise(units, self.unit_mask(scored), generator=torch.Generator().manual_seed(0))
        t = torch.ones(x0.shape[0], device=x0.device) if self.time_conditioning else None
        guess = self.log_probs(z, t, attention_mask, x0).argmax(-1)
        return ((guess == x0) | ~scored).all(-1)


__all__ = ["BOUND", "MDLMConfig", "MaskedDiffusion", "MaskedDiffusionConfig"]
