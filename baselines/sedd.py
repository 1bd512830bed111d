"""SEDD (Lou et al., ICML 2024, "Discrete Diffusion Modeling by Estimating the Ratios of the Data
Distribution"): score-entropy discrete diffusion, with the absorbing graph (``sedd``) and the
uniform one (``sedd-uniform``).

* **The network outputs concrete scores**, not a denoiser: log s_theta(z)_y ~ log p_t(y) / p_t(z)
  for every state y a position could take instead of its current z (V = C + 1 with the mask state,
  C without). As SEDD's model does, the score of z itself is written as 1 (log 0), and on the
  absorbing graph the outputs are shifted by log(e^sigma - 1) + log C (``scale_by_sigma``, sigma the
  total noise -log alpha_t), so that a network output of 0 is a uniform denoiser. Our own networks
  read the time t (:class:`harness.backbone.Backbone`); the release's reads sigma
  (:mod:`harness.models.sedd_import`).
* **The bound is the DWDSE**, the denoising score entropy integrated over t
  (:meth:`harness.processes.ForwardProcess.score_entropy`, SEDD's closed forms for both graphs,
  equal to ``graph_lib``'s on the same tensors): an upper bound on -log p(x_0) of the reverse chain
  with rates Q_t(y, z) s_theta(z)_y for any positive scores, drawn as every other family's bound
  (one stratified t per sequence, :func:`harness.diffusion.monte_carlo_nelbo`). The training loss
  is the same estimator per token. Like MDLM's NELBO and SEDD's code, it leaves out the [0, 1e-3)
  part of the time integral and the prior term at t = 1 (the log-linear schedule's alpha_1 = 1e-3).
* **Samplers** (:mod:`harness.sampling.scores`): ``tweedie`` (SEDD's ``analytic``, the default of
  its ``run_sample.py``) and ``euler``, T steps on t from 1 to ``t_end`` (SEDD's 10^-5) and then
  SEDD's denoising step to t = 0.
* **What the harness asks of every family** comes from the scores: ``log_probs`` is the x_theta
  they imply (:meth:`~harness.processes.ForwardProcess.denoiser`; exact for scores of a denoiser),
  with carry-over at a revealed position of the absorbing graph.

Not here: the geometric noise schedule SEDD pairs with the uniform graph (alpha_0 != 1 there, so its
reconstruction term would need a bound of its own); ``sedd-uniform`` uses the log-linear schedule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from baselines.mdlm import subs_log_probs
from harness.errors import ConfigError
from harness.graph import tracked
from harness.models import MODELS
from harness.models.base import Estimator
from harness.models.masked_diffusion import MaskedDiffusion, MDLMConfig
from harness.models.sedd_import import build_sedd

DWDSE = Estimator(
    "dwdse",
    "bound",
    "",
    "Monte-Carlo DWDSE (SEDD's denoising score entropy integrated over t): sum over positions, weighted",
)


@dataclass(frozen=True)
class SEDDConfig(MDLMConfig):
    """SEDD's keys: MDLM's, the time input always on, and ``scale_by_sigma`` (absorbing graph only)."""

    time_conditioning: bool = True
    scale_by_sigma: bool = True


class SEDD(MaskedDiffusion):
    """Score-entropy discrete diffusion on the absorbing graph; NLL is the DWDSE, an upper bound."""

    family = "sedd"
    config_class = SEDDConfig
    table_order = 7
    samplers = ("tweedie", "euler")
    default_sampler = "tweedie"
    token_by_token_sampler = ""  # the reverse chain may move any number of positions at a step
    estimators = (DWDSE,)
    train_estimator = "dwdse"
    token_convention = "all L positions of each row are scored, BOS/EOS included (SEDD's DWDSE)"
    release_formats = ("sedd-hf:",)
    context_free_law = "not defined: the score samplers draw from the reverse rates, not a token law"

    def __init__(self, *, time_conditioning: bool = True, scale_by_sigma: bool = True, **kwargs):
        if not time_conditioning:
            raise ConfigError(
                f"model.time_conditioning=false: {self.family} reads the noise level (its scores scale with it)",
                fix="set model.time_conditioning: true",
            )
        scale = bool(scale_by_sigma) and self.forward_process == "absorbing"
        extra = dict(kwargs.pop("extra_hparams", None) or {}, scale_by_sigma=scale)
        super().__init__(time_conditioning=True, extra_hparams=extra, **kwargs)
        self.scale_by_sigma = scale

    def protocol(self) -> dict[str, Any]:
        return {"scale_by_sigma": self.scale_by_sigma, "graph": self.forward_process}

    def transfer_keys(self) -> dict[str, Any]:
        return {self.family: {"forward_process": self.forward_process, "scale_by_sigma": self.scale_by_sigma}}

    @classmethod
    def load_transfer(cls, state: dict, *, shape: dict, section: Any, doc: dict, where: str, common: dict[str, Any]):
        kept = {k: v for k, v in common.items() if k != "time_conditioning"}
        scale = bool(section.get("scale_by_sigma", True)) if isinstance(section, dict) else True
        return build_sedd(cls.family, state, shape=shape, scale_by_sigma=scale, extra_keys=[], **kept)

    # -- the network's scores --------------------------------------------------------------------
    def log_scores(self, z_t: torch.Tensor, t: torch.Tensor, attention_mask=None) -> torch.Tensor:
        """(B, L) states, t (B,) -> (B, L, V) log s_theta(z_t)_y (float32), 0 at y = z_t."""
        raw = self.backbone(z_t, t, attention_mask).float()
        pad = raw.shape[-1] == self.vocab_size and self.process.has_mask  # our network scores the C tokens only
        shift = None
        if self.scale_by_sigma:
            alpha = self.schedule.alpha(t.double())
            shift = (torch.log((1 - alpha) / alpha) + math.log(self.process.states - 1)).to(raw.dtype)[:, None, None]
        if tracked(raw):
            raw = F.pad(raw, (0, 1)) if pad else raw
            raw = raw[..., : self.process.states]
            raw = raw if shift is None else raw - shift
            return raw.scatter(-1, z_t[..., None], 0.0)
        # evaluation and sampling: the same numbers written into one new tensor (0 - shift on the pad)
        raw = raw[..., : self.process.states]
        width = raw.shape[-1]
        out = torch.empty(*raw.shape[:-1], width + int(pad), dtype=raw.dtype, device=raw.device)
        if shift is None:
            out[..., :width] = raw
        else:
            torch.sub(raw, shift, out=out[..., :width])
        if pad:
            out[..., width:] = 0.0 if shift is None else torch.zeros((), dtype=raw.dtype) - shift
        return out.scatter_(-1, z_t[..., None], 0.0)

    def sampler_log_scores(self, y: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """(B, L, 1) states, t (B,) -> (B, L, V) log-scores (the score samplers' call)."""
        return self.log_scores(y[..., 0], t)

    def log_probs(
        self, z_t: torch.Tensor, t: torch.Tensor | None = None, attention_mask=None, x0: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, L, C) log x_theta: the denoiser the scores imply, carried over where the state is a token
        of the absorbing graph (float32)."""
        if t is None:
            t = torch.ones(z_t.shape[0], device=z_t.device)
        log_s = self.log_scores(z_t, t, attention_mask)
        alpha = self.schedule.alpha(t.double())[:, None]
        probs = self.process.denoiser(log_s, z_t, alpha)
        log_p = torch.log(probs).float()
        return subs_log_probs(log_p, z_t, self.mask_id) if self.process.has_mask else log_p

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
        """(B, L) nats per token: the score entropy at t at every scored position, divided by the
        corruption weight the estimator multiplies by (the absorbing process's -alpha'/(1 - alpha);
        1 for the uniform one), since the score entropy carries its own time factor."""
        log_s = self.log_scores(z_t, t, attention_mask)
        tt = t.double()[:, None]
        rate = self.process.score_entropy(log_s, x0, z_t, self.schedule.alpha(tt), self.schedule.alpha_prime(tt))
        rate = rate / self.process.corruption_weight(self.schedule, tt)
        rate = torch.where(scored, rate, torch.zeros_like(rate))
        return [rate.to(log_s.dtype if log_s.requires_grad else torch.float64) for _ in estimators]


@dataclass(frozen=True)
class SEDDUniformConfig(SEDDConfig):
    """The uniform graph's keys: SEDD's, without the shift by sigma (SEDD's code refuses it there)."""

    scale_by_sigma: bool = False


class SEDDUniform(SEDD):
    """SEDD on the uniform graph (no mask state: C ids in, C scores out); NLL is the DWDSE."""

    family = "sedd-uniform"
    forward_process = "uniform"
    config_class = SEDDUniformConfig
    table_order = 8

    def __init__(self, *, scale_by_sigma: bool = False, **kwargs):
        if scale_by_sigma:
            raise ConfigError(
                "model.scale_by_sigma applies to the absorbing graph (SEDD's code refuses it on the uniform one)",
                fix="set model.scale_by_sigma: false, or use family sedd",
            )
        super().__init__(scale_by_sigma=False, **kwargs)


MODELS.register("sedd", SEDD)
MODELS.register("sedd-uniform", SEDDUniform)

__all__ = ["DWDSE", "SEDD", "SEDDConfig", "SEDDUniform", "SEDDUniformConfig"]
