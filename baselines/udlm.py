"""UDLM (Schiff et al. 2025): diffusion with the uniform forward process, the first family on a process
other than the absorbing mask.

* the forward process is :class:`harness.processes.Uniform` over the C tokens: a token is hit with
  probability 1 - alpha_t and redrawn uniformly (it may land on itself); there is no mask token, so
  the network reads C ids and outputs C logits;
* the denoiser is the mean parameterisation: x_theta(z_t, t) = softmax(logits), no carry-over (a
  clean-looking token may be noise);
* the bound is the continuous-time ELBO, the integral over t of the process's
  :meth:`~harness.processes.ForwardProcess.elbo_integrand` summed over positions (UDLM's closed
  form), drawn with MDLM's stratified t in [1e-3, 1] and weight 1; the training loss is the same
  estimator divided by the token count;
* time conditioning on (UDLM requires it: with uniform noise the network cannot read t off the
  number of masks);
* sampling: the ``posterior`` sampler, every position redrawn from q(x_s | x_t, x_theta) at each of
  the T steps, with DUO's greedy last step (``noise_removal="argmax"``).

The likelihood it reports is a bound. Its release layout is ``udlm-hf:``
(:mod:`harness.models.udlm_import`); a folder written by ``primebench import`` holds a ``udlm``
section and loads back as this family.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from harness.models import MODELS
from harness.models.base import Estimator
from harness.models.masked_diffusion import MaskedDiffusion, MDLMConfig
from harness.models.udlm_import import build_uniform


@dataclass(frozen=True)
class UDLMConfig(MDLMConfig):
    """UDLM's keys: MDLM's, with the time input on by default."""

    time_conditioning: bool = True


class UDLM(MaskedDiffusion):
    """Uniform-state diffusion LM (mean parameterisation, continuous-time ELBO); NLL is an upper bound."""

    family = "udlm"
    forward_process = "uniform"
    config_class = UDLMConfig
    table_order = 5
    samplers = ("posterior",)
    default_sampler = "posterior"
    token_by_token_sampler = ""  # every position may change at every step: there is no one-unit-per-call sampler
    estimators = (
        Estimator(
            "bound",
            "bound",
            "",
            "Monte-Carlo continuous-time ELBO of the uniform process: the integrand summed over positions",
        ),
    )
    token_convention = "all L positions of each row are scored, BOS/EOS included (UDLM's ELBO)"
    release_formats = ("udlm-hf:",)
    context_free_law = "not defined: the posterior sampler redraws every position at every step"

    def __init__(self, *, time_conditioning: bool = True, **kwargs):
        super().__init__(time_conditioning=time_conditioning, **kwargs)

    def transfer_keys(self) -> dict[str, Any]:
        return {self.family: {"forward_process": self.forward_process}}

    @classmethod
    def load_transfer(cls, state: dict, *, shape: dict, section: Any, doc: dict, where: str, common: dict[str, Any]):

        kept = {k: v for k, v in common.items() if k != "time_conditioning"}
        return build_uniform(cls.family, state, shape=shape, extra_keys=[], **kept)

    def log_probs(
        self, z_t: torch.Tensor, t: torch.Tensor | None = None, attention_mask=None, x0: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, L) token ids, t (B,) -> (B, L, C) log x_theta(z_t, t) (float32), no carry-over."""
        logits = self.backbone(z_t, t if self.time_conditioning else None, attention_mask)
        return torch.log_softmax(logits.float(), dim=-1)

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
        """(B, L) nats per token: the ELBO integrand at t at every scored position (hit or not: a token
        that kept its value still costs, since the model cannot tell it was not noise)."""
        log_p = self.log_probs(z_t, t, attention_mask, x0)
        tt = t.double()[:, None]
        rate = self.process.elbo_integrand(log_p, x0, z_t, self.schedule.alpha(tt), self.schedule.alpha_prime(tt))
        rate = torch.where(scored, rate, torch.zeros_like(rate)).to(
            log_p.dtype if log_p.requires_grad else torch.float64
        )
        return [rate for _ in estimators]


MODELS.register("udlm", UDLM)

__all__ = ["UDLM", "UDLMConfig"]
