"""MDM-Prime (Chao et al. 2025): masked diffusion over sub-tokens with partial masking.

A token x in [0, C) becomes ell base-b digits y = f(x) (most significant first, b the smallest
integer with b^ell >= C); each of the L * ell sub-tokens is masked independently with the schedule.
The network embeds sub-tokens (:class:`~prime.embedding.SubtokenEmbedding`), runs on L token
positions and outputs C logits per token; the joint over a token's sub-tokens is the softmax of
those logits restricted to V(y_t^i), the valid codes consistent with its unmasked sub-tokens
(carry-over; ``carry_over=False`` is the paper's ablation, a softmax over all C).

Two likelihood numbers, never to be confused (see ``prime.bounds``):

* ``estimator="subtoken"`` (default): the valid continuous-time bound, weight times the sum over
  masked sub-tokens of -log of the *marginal* of the restricted joint. Reported as a bound (<=).
* ``estimator="token_joint"``: the paper's L_vb, weight times the sum over tokens of -log of the
  *joint* over the token's masked sub-tokens. Reported as "paper-objective": when sub-tokens depend
  on each other it can fall below the exact NLL, so it is not a bound.

Training minimises the paper's objective (token-joint), as the published models were trained.
With ell = 1 this is MDLM exactly: same weights give the same logits, loss and bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from harness.errors import ConfigError
from harness.models import MODELS
from harness.models.base import Estimator
from harness.models.masked_diffusion import MaskedDiffusion, MDLMConfig
from prime.bounds import fused_prime_terms, restricted_log_probs, subtoken_nll_terms, token_joint_nll_terms
from prime.embedding import SubtokenEmbedding
from prime.subtokens import encode, subtoken_base

SUBTOKEN = Estimator(
    "subtoken", "bound", "", "sub-token bound: marginals of the restricted joint over masked sub-tokens"
)
TOKEN_JOINT = Estimator(
    "token_joint",
    "paper-objective",
    "_token_joint",
    "the paper's L_vb: joint of each token's masked sub-tokens (not a bound)",
)


@dataclass(frozen=True)
class PrimeConfig(MDLMConfig):
    """Prime adds ``ell`` sub-tokens per token and ``carry_over`` (restrict the joint to V(y_t^i))."""

    ell: int = 1
    carry_over: bool = True

    def check(self) -> None:
        if self.ell < 1:
            raise ConfigError(f"model.ell must be >= 1, got {self.ell}")
        if self.d_model % self.ell:
            raise ConfigError(
                f"model.d_model={self.d_model} is not divisible by model.ell={self.ell}: Prime concatenates ell "
                "sub-token embeddings of size d_model/ell",
                fix="choose d_model as a multiple of ell",
            )


class Prime(MaskedDiffusion):
    """MDM-Prime (sub-token partial masking); NLL: sub-token bound (or the paper's token-joint objective)."""

    family = "prime"
    config_class = PrimeConfig
    table_order = 3
    estimators = (SUBTOKEN, TOKEN_JOINT)
    train_estimator = "token_joint"

    def __init__(self, *, vocab_size: int, ell: int = 2, carry_over: bool = True, **kwargs: Any):
        self.ell = int(ell)
        self.base = subtoken_base(vocab_size, self.ell)
        self.carry_over = bool(carry_over)
        super().__init__(vocab_size=vocab_size, extra_hparams=dict(ell=ell, carry_over=carry_over), **kwargs)

    # -- units: ell base-b digits per token, mask id b ------------------------------------------
    def _unit_mask_id(self) -> int:
        return self.base

    def _embedding(self, d_model: int):
        return SubtokenEmbedding(self.base, self.ell, d_model)

    subtokens = True

    @property
    def units_per_token(self) -> int:
        return self.ell

    @property
    def unit_base(self) -> int:
        return self.base

    @property
    def may_decode_invalid_codes(self) -> bool:
        return not self.carry_over

    def encode(self, x0: torch.Tensor) -> torch.Tensor:
        """(B, L) token ids -> (B, L, ell) digits."""
        return encode(x0, self.base, self.ell)

    def units(self, x0: torch.Tensor) -> torch.Tensor:
        return self.encode(x0)

    def unit_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens[..., None].expand(*tokens.shape, self.ell)

    def log_probs(self, z_t: torch.Tensor, t: torch.Tensor | None = None, attention_mask=None) -> torch.Tensor:
        """(B, L, ell) sub-tokens (mask id = base) -> (B, L, C) restricted joint log-probabilities."""
        logits = self.backbone(z_t, t if self.time_conditioning else None, attention_mask)
        return restricted_log_probs(
            logits, z_t, C=self.vocab_size, base=self.base, ell=self.ell, carry_over=self.carry_over
        )

    def unit_terms(self, log_p, x0, units, masked, estimator: str, scored=None) -> torch.Tensor:
        if estimator == "subtoken":
            return subtoken_nll_terms(log_p, units, masked, self.base, self.ell)
        if estimator == "token_joint":
            # without carry-over a token whose sub-tokens are all visible is not one-hot, and the
            # official code scores it too (with carry-over its term is log 1 = 0 either way)
            if not self.carry_over and scored is not None:
                return token_joint_nll_terms(log_p, x0, masked | scored[..., None])
            return token_joint_nll_terms(log_p, x0, masked)
        raise ValueError(f"unknown estimator {estimator!r}: use 'subtoken' (bound) or 'token_joint' (paper objective)")

    def nll_terms(self, z_t, t, attention_mask, x0, units, masked, estimators, scored) -> list[torch.Tensor]:
        """Both estimators' terms from one forward pass, without forming the (B, L, C) restricted
        log-softmax or scattering into sub-token marginals (:func:`prime.bounds.fused_prime_terms`);
        the same numbers as :meth:`unit_terms` on :meth:`log_probs` (to float rounding; ell = 1 takes
        the log-softmax path, so that it stays MDLM bit for bit)."""
        if self.ell == 1:
            return super().nll_terms(z_t, t, attention_mask, x0, units, masked, estimators, scored)
        logits = self.backbone(z_t, t if self.time_conditioning else None, attention_mask)
        joint_scored = None
        if not self.carry_over and scored is not None:
            joint_scored = (masked | scored[..., None]).any(-1)
        return fused_prime_terms(
            logits.float(),
            z_t,
            x0,
            units,
            masked,
            C=self.vocab_size,
            base=self.base,
            ell=self.ell,
            carry_over=self.carry_over,
            estimators=estimators,
            joint_scored=joint_scored,
        )

    # -- facts ------------------------------------------------------------------------------------
    def protocol(self) -> dict[str, Any]:
        out = {"ell": self.ell, "base": self.base, "carry_over": self.carry_over}
        if self.carry_over != bool(self.hparams.get("carry_over", self.carry_over)):
            out["carry_over_trained"] = bool(self.hparams["carry_over"])  # overridden at evaluation
        return out

    def set_carry_over(self, carry_over: bool) -> None:
        """Evaluate with (or without) carry-over whatever the checkpoint was trained with (the release
        trains some models without it and evaluates them with it); recorded in :meth:`protocol`."""
        self.carry_over = bool(carry_over)

    @classmethod
    def label(cls, cfg) -> str:
        return f"{cls.family}, ell={cfg.ell}" if cfg.ell else cls.family

    def denoiser(self, t: torch.Tensor | None = None):
        """This network as a ``prime.bounds`` denoiser callable: y_t (B, L, ell) -> raw logits (B, L, C)."""

        def call(y_t: torch.Tensor) -> torch.Tensor:
            tt = None
            if self.time_conditioning:
                if t is None:
                    raise ValueError("a time-conditioned network needs a fixed t to act as a time-independent denoiser")
                tt = t.expand(y_t.shape[0])
            return self.backbone(y_t, tt)

        return call


MODELS.register("prime", Prime)
