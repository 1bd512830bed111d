"""GIDD (von Ruette et al., ICML 2025, "Generalized Interpolating Discrete Diffusion"; dvruette/gidd):
diffusion whose noise interpolates between the mask and uniform tokens, with a mixture that moves
with time.

* the forward process is :class:`harness.processes.Hybrid` on GIDD's clock
  (:class:`harness.schedules.Gidd`): a token is kept with alpha_t = (1 - t) / C_t and otherwise is
  the mask (mass t / C_t) or a uniform token (mass c_t / C_t, c_t = B sqrt(t (1 - t))), so a noisy
  sequence holds masks *and* wrong tokens, and the model learns to fix a token as well as to fill a
  mask. ``p_uniform`` sets B (GIDD's ``p_uniform``; 0 is, to 1e-9, a masked model on the linear
  clock); the network reads C + 1 ids (the mask included) and outputs C logits (GIDD sets the mask's
  logit to -inf);
* the denoiser is the mean parameterisation x_theta = softmax(logits), no carry-over (a token may be
  uniform noise), time conditioning on (GIDD's DiT reads t);
* the bound is GIDD's ELBO, w_t(z) [KL(q_t(. | x_0) || q_t(. | x_theta)) + R - log R - 1] summed
  over positions (:meth:`harness.processes.Hybrid.elbo_integrand`; equal to the continuous-time ELBO
  of the CTMC, proven by enumeration in the process's tests), drawn with the harness's stratified t
  in [1e-3, 1] (GIDD's own evaluation draws t in [1e-4, 1 - 1e-4] with low-discrepancy sampling);
  the training loss is the same estimator divided by the token count, i.e. GIDD's ``elbo`` with
  ``loss_weighting: none`` (GIDD's published runs train on its ``dynamic`` weights instead, which
  bound nothing; not offered here);
* sampling: the ``posterior`` sampler, every position redrawn from q(x_s | x_t, x_theta) (GIDD's
  ``GiddSampler`` step, its ``beta_pi_ts`` being the process's moving noise part), then the masks
  left at t_end filled by ``noise_removal``.

The likelihood it reports is a bound. Its release layout is ``gidd-hf:``
(:mod:`harness.models.gidd_import`, ``dvruette/gidd-*``); a folder written by ``primebench import``
holds a ``gidd`` section and loads back as this family.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from baselines.udlm import UDLM, UDLMConfig
from harness.errors import CheckpointError, ConfigError, PrimebenchError
from harness.models import MODELS
from harness.models.base import Estimator
from harness.models.gidd_import import build_gidd
from harness.schedules import Gidd


@dataclass(frozen=True)
class GIDDConfig(UDLMConfig):
    """GIDD's keys: UDLM's, with GIDD's clock as the schedule and its two knobs (``p_uniform`` 0.0,
    0.1 and 0.2 in the paper's runs; ``gamma`` 1 in all of them)."""

    schedule: str = "gidd"
    p_uniform: float = 0.1
    gamma: float = 1.0


ELBO = Estimator(
    "bound",
    "bound",
    "",
    "Monte-Carlo ELBO of GIDD's mask-and-uniform process: w_t(z) (KL + R - log R - 1) summed over positions",
)


class GIDD(UDLM):
    """Interpolating mask-and-uniform diffusion (GIDD); NLL is an upper bound (its ELBO)."""

    family = "gidd"
    forward_process = "hybrid"
    config_class = GIDDConfig
    table_order = 9
    estimators = (ELBO,)
    samplers = ("posterior", "self-correction")
    token_convention = "all L positions of each row are scored, BOS/EOS included (GIDD's ELBO, token mean)"
    release_formats = ("gidd-hf:",)

    def __init__(self, *, p_uniform: float = 0.1, gamma: float = 1.0, schedule: str = "gidd", **kwargs):
        try:
            clock = Gidd(p_uniform=float(p_uniform), gamma=float(gamma))
        except PrimebenchError as err:
            raise ConfigError(
                f"model.p_uniform / model.gamma: {err}", fix="p_uniform in [0, 1), gamma in (0, 2]"
            ) from None
        if schedule not in ("gidd", clock.name):
            raise ConfigError(
                f"model.schedule={schedule!r}: GIDD's clock is set by model.p_uniform and model.gamma",
                fix="leave model.schedule at 'gidd'",
            )
        extra = dict(kwargs.pop("extra_hparams", None) or {}, p_uniform=clock.p_uniform, gamma=clock.gamma)
        super().__init__(
            schedule=clock.name,
            extra_hparams=extra,
            process_options={"p_uniform": clock.p_uniform, "gamma": clock.gamma},
            **kwargs,
        )

    @classmethod
    def label(cls, cfg) -> str:
        """``gidd, p_u=0.1`` (the uniform share at mid-time names the model)."""
        return f"{cls.family}, p_u={float(cfg.p_uniform):g}"

    def protocol(self) -> dict[str, Any]:
        return {"p_uniform": self.process.clock.p_uniform, "gamma": self.process.clock.gamma}

    def transfer_keys(self) -> dict[str, Any]:
        return {self.family: {"p_uniform": self.process.clock.p_uniform, "gamma": self.process.clock.gamma}}

    @classmethod
    def load_transfer(cls, state: dict, *, shape: dict, section: Any, doc: dict, where: str, common: dict[str, Any]):
        """An imported folder's ``gidd`` section (``p_uniform``, ``gamma``) around its DiT, V = C + 1 ids."""
        if not isinstance(section, dict) or not all(
            isinstance(section.get(k), (int, float)) and not isinstance(section.get(k), bool)
            for k in ("p_uniform", "gamma")
        ):
            raise CheckpointError(
                f"{where}: the gidd section is {section!r}; it needs the numbers p_uniform and gamma",
                fix="import the release again (primebench import gidd-hf:PATH --out NEW)",
            )
        kept = {k: v for k, v in common.items() if k != "time_conditioning"}
        return build_gidd(
            state,
            shape=shape,
            p_uniform=float(section["p_uniform"]),
            gamma=float(section["gamma"]),
            extra_keys=[],
            **kept,
        )


MODELS.register("gidd", GIDD)

__all__ = ["GIDD", "GIDDConfig"]
