"""MDM-Prime (Chao et al. 2025): masked diffusion over sub-tokens with partial masking.

A token x in [0, C) becomes ell base-b digits y = f(x) (most significant first, b the smallest
integer with b^ell >= C); each of the L * ell sub-tokens is masked independently with the schedule.
The network embeds sub-tokens (:class:`~prime.embedding.SubtokenEmbedding`), runs on L token
positions and outputs C logits per token; the joint over a token's sub-tokens is the softmax of
those logits restricted to V(y_t^i), the valid codes consistent with its unmasked sub-tokens
(carry-over; ``carry_over=False`` is the paper's ablation, a softmax over all C).

MDM-Prime-v2's encodings are options (``docs/prime-v2.md``): ``encoding="binary"`` takes base 2 and
ell = ceil(log2 C); ``shuffle`` encodes token x as the digits of ``code_of[x]``, a seeded permutation
of [0, C) kept as a buffer (saved with the weights); ``embedding="sum"`` sums one table per digit
position instead of concatenating, for a d_model that ell does not divide. The network's C outputs
are indexed by token id; the restriction, marginals and digits are computed over codes.

Two likelihood numbers, never to be confused (see ``prime.bounds``):

* ``estimator="subtoken"`` (default): the valid continuous-time bound, weight times the sum over
  masked sub-tokens of -log of the *marginal* of the restricted joint. Reported as a bound (<=).
* ``estimator="token_joint"``: the paper's L_vb, weight times the sum over tokens of -log of the
  *joint* over the token's masked sub-tokens. Reported as "paper-objective": when sub-tokens depend
  on each other it can fall below the exact NLL, so it is not a bound.

Training minimises ``model.objective``: ``paper`` (default) the token-joint objective, as the
published models were trained, or ``bound`` the valid sub-token bound, through the same terms and
draw that ``eval ppl`` grades with (:meth:`Prime.nll_terms`).
With ell = 1 this is MDLM exactly: same weights give the same logits, loss and bounds.

The samplers (:mod:`harness.sampling`) ask this class for what sub-tokens change: a state of ell
digits per token, MDM-Prime's joint ancestral update, the marginal of one sub-token, and the codes
>= C that digits can spell without carry-over. The bound audit's enumeration on toy denoisers is
reached through :meth:`Prime.toy_bound_audit`, and release checkpoints through :meth:`Prime.base_for`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from harness.audit.gumbel import grid_gumbel_probs
from harness.errors import ConfigError
from harness.models import MODELS
from harness.models.base import Estimator
from harness.models.masked_diffusion import MaskedDiffusion, MDLMConfig
from harness.models.mdlm_import import build_prime
from harness.models.release_config import config_flag, config_size
from harness.sampling.categorical import sample_categorical
from prime.embedding import LAYOUTS, SubtokenEmbedding
from prime.subtokens import binary_ell, check_permutation, decode, encode, subtoken_base, token_permutation
from prime.terms import (
    fused_prime_terms,
    restricted_log_probs,
    subtoken_log_marginals,
    subtoken_nll_terms,
    token_joint_nll_terms,
)
from prime.toy_audit import toy_audit, unigram_audit

SUBTOKEN = Estimator(
    "subtoken", "bound", "", "sub-token bound: marginals of the restricted joint over masked sub-tokens"
)
TOKEN_JOINT = Estimator(
    "token_joint",
    "paper-objective",
    "_token_joint",
    "the paper's L_vb: joint of each token's masked sub-tokens (not a bound)",
)


#: the encodings (``model.encoding``): ``digits`` takes ell from the config and the smallest base b with
#: b^ell >= C (MDM-Prime); ``binary`` takes base 2 and ell = ceil(log2 C) from the vocabulary (MDM-Prime-v2)
ENCODINGS = ("digits", "binary")

#: the training objectives (``model.objective``): the estimator each minimises
OBJECTIVES = {"paper": TOKEN_JOINT.name, "bound": SUBTOKEN.name}


_CHOICES = {
    "objective": (
        tuple(OBJECTIVES),
        "'paper' (the published L_vb, not a bound) or 'bound' (the valid sub-token bound)",
    ),
    "encoding": (ENCODINGS, "'digits' (ell digits of the smallest base b with b^ell >= C) or 'binary' (base 2)"),
    "embedding": (LAYOUTS, "'concat' (ell pieces of d_model/ell) or 'sum' (one table per digit, summed)"),
}


def check_choices(**values: str) -> None:
    """Raise a ConfigError naming ``model.KEY`` for a value of ``objective``, ``encoding`` or
    ``embedding`` that is not one of its choices (the config's check and the constructor share it)."""
    for key, value in values.items():
        choices, meaning = _CHOICES[key]
        if value not in choices:
            raise ConfigError(f"model.{key} must be one of {list(choices)}, got {value!r}", fix=f"use {meaning}")


@dataclass(frozen=True)
class PrimeConfig(MDLMConfig):
    """Prime adds ``ell`` sub-tokens per token and ``carry_over`` (restrict the joint to V(y_t^i))."""

    ell: int = 1
    carry_over: bool = True
    objective: str = "paper"
    encoding: str = "digits"
    embedding: str = "concat"
    shuffle: bool = False
    shuffle_seed: int = 0

    def check(self) -> None:
        check_choices(objective=self.objective, encoding=self.encoding, embedding=self.embedding)
        if self.shuffle_seed < 0:
            raise ConfigError(f"model.shuffle_seed must be >= 0, got {self.shuffle_seed}")
        if self.ell < 1:
            raise ConfigError(f"model.ell must be >= 1, got {self.ell}")
        if self.encoding == "digits" and self.embedding == "concat" and self.d_model % self.ell:
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
    release_formats = ("prime-ckpt:",)

    def __init__(
        self,
        *,
        vocab_size: int,
        ell: int | None = None,
        carry_over: bool = True,
        objective: str = "paper",
        encoding: str = "digits",
        embedding: str = "concat",
        shuffle: bool = False,
        shuffle_seed: int = 0,
        **kwargs: Any,
    ):
        check_choices(objective=objective, encoding=encoding, embedding=embedding)
        if encoding == "binary":
            derived = binary_ell(int(vocab_size))
            if ell not in (None, 1, derived):
                raise ConfigError(
                    f"model.ell={ell} with model.encoding=binary: the binary encoding has ell = ceil(log2 C) = "
                    f"{derived} digits for C = {vocab_size}",
                    fix=f"leave model.ell out (or set it to {derived}) with the binary encoding",
                )
            ell = derived
        self.ell = 2 if ell is None else int(ell)
        self.base = self.base_for(vocab_size, self.ell)
        self.carry_over = bool(carry_over)
        self.objective = objective
        self.encoding, self.embedding_layout, self.shuffle = encoding, embedding, bool(shuffle)
        extra: dict[str, Any] = dict(ell=self.ell, carry_over=carry_over)
        # recorded only when not the default, so earlier checkpoints' hyper-parameters are unchanged
        for key, value, default in (
            ("objective", objective, "paper"),
            ("encoding", encoding, "digits"),
            ("embedding", embedding, "concat"),
            ("shuffle", self.shuffle, False),
        ):
            if value != default:
                extra[key] = value
        if self.shuffle:
            extra["shuffle_seed"] = int(shuffle_seed)
        super().__init__(vocab_size=vocab_size, extra_hparams=extra, **kwargs)
        if self.shuffle:
            # code_of[x]: the code whose digits encode token x; saved with the weights, so the stored
            # permutation (not the seed) is what training, every estimator, sampler and export use
            self.register_buffer("code_of", token_permutation(self.vocab_size, int(shuffle_seed)))
            self.register_buffer("token_of", torch.argsort(self.code_of), persistent=False)
            self.register_load_state_dict_post_hook(_sync_shuffle)

    # -- index shuffling: token ids <-> codes ------------------------------------------------------
    def codes(self, x: torch.Tensor) -> torch.Tensor:
        """(...) token ids -> (...) the codes their digits spell (the ids themselves without shuffling)."""
        return self.code_of[x] if self.shuffle else x

    def tokens_of_codes(self, code: torch.Tensor) -> torch.Tensor:
        """(...) codes -> (...) token ids; codes >= C (no token) are kept as they are."""
        if not self.shuffle:
            return code
        return torch.where(code < self.vocab_size, self.token_of[code.clamp_max(self.vocab_size - 1)], code)

    def to_code_space(self, values: torch.Tensor) -> torch.Tensor:
        """(..., C) indexed by token id -> (..., C) indexed by code (logits or log-probabilities)."""
        return values.index_select(-1, self.token_of) if self.shuffle else values

    def to_token_space(self, values: torch.Tensor) -> torch.Tensor:
        """(..., C) indexed by code -> (..., C) indexed by token id."""
        return values.index_select(-1, self.code_of) if self.shuffle else values

    @property
    def train_estimator(self) -> str:  # type: ignore[override]
        """The estimator the training loss minimises: ``model.objective`` ``paper`` trains on the
        token-joint L_vb (as the published models), ``bound`` on the valid sub-token bound, through
        the same terms (:meth:`nll_terms`) and draw that ``eval ppl`` grades it with."""
        return OBJECTIVES[self.objective]

    # -- units: ell base-b digits per token, mask id b (the absorbing process over b values) ---------
    def _embedding(self, d_model: int):
        return SubtokenEmbedding(self.base, self.ell, d_model, self.embedding_layout)

    subtokens = True
    context_free_law = "grid model over the C tokens (Prime's joint draw has no stay mass in the token draw)"

    @property
    def units_per_token(self) -> int:
        return self.ell

    @property
    def unit_base(self) -> int:
        return self.base

    @property
    def may_decode_invalid_codes(self) -> bool:
        return not self.carry_over

    @staticmethod
    def base_for(vocab_size: int, ell: int) -> int:
        """The base b of ``ell`` digits per token for C = ``vocab_size`` classes: the smallest b with
        b^ell >= C (:func:`prime.subtokens.subtoken_base`); the mask id of a digit is b."""
        return subtoken_base(vocab_size, ell)

    def encode(self, x0: torch.Tensor) -> torch.Tensor:
        """(B, L) token ids -> (B, L, ell) digits of their codes (:meth:`codes`)."""
        return encode(self.codes(x0), self.base, self.ell)

    def units(self, x0: torch.Tensor) -> torch.Tensor:
        return self.encode(x0)

    def unit_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens[..., None].expand(*tokens.shape, self.ell)

    def log_probs(
        self, z_t: torch.Tensor, t: torch.Tensor | None = None, attention_mask=None, x0: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, L, ell) sub-tokens (mask id = base) -> (B, L, C) restricted joint log-probabilities,
        indexed by token id (the network's outputs are restricted in code space, :meth:`codes`)."""
        logits = self.to_code_space(self.backbone(z_t, t if self.time_conditioning else None, attention_mask))
        log_p = restricted_log_probs(
            logits, z_t, C=self.vocab_size, base=self.base, ell=self.ell, carry_over=self.carry_over
        )
        return self.to_token_space(log_p)

    def unit_terms(self, log_p, x0, units, masked, estimator: str, scored=None) -> torch.Tensor:
        if estimator == "subtoken":
            return subtoken_nll_terms(self.to_code_space(log_p), units, masked, self.base, self.ell)
        if estimator == "token_joint":
            # without carry-over a token whose sub-tokens are all visible is not one-hot, and the
            # official code scores it too (with carry-over its term is log 1 = 0 either way)
            if not self.carry_over and scored is not None:
                return token_joint_nll_terms(log_p, x0, masked | scored[..., None])
            return token_joint_nll_terms(log_p, x0, masked)
        raise ValueError(f"unknown estimator {estimator!r}: use 'subtoken' (bound) or 'token_joint' (paper objective)")

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
        """Both estimators' (B, L) terms from one forward pass on ``z_t`` (B, L, ell), without forming
        the (B, L, C) restricted log-softmax or scattering into sub-token marginals
        (:func:`prime.terms.fused_prime_terms`); the same numbers as :meth:`unit_terms` on
        :meth:`log_probs` (to float rounding; ell = 1 takes the log-softmax path, so that it stays
        MDLM bit for bit)."""
        if self.ell == 1:
            return super().nll_terms(
                z_t,
                t,
                masked,
                attention_mask=attention_mask,
                x0=x0,
                units=units,
                estimators=estimators,
                scored=scored,
            )
        logits = self.to_code_space(self.backbone(z_t, t if self.time_conditioning else None, attention_mask))
        joint_scored = None
        if not self.carry_over and scored is not None:
            joint_scored = (masked | scored[..., None]).any(-1)
        return fused_prime_terms(
            logits.float(),
            z_t,
            self.codes(x0),
            units,
            masked,
            C=self.vocab_size,
            base=self.base,
            ell=self.ell,
            carry_over=self.carry_over,
            estimators=estimators,
            joint_scored=joint_scored,
        )

    # -- what the samplers ask: states (..., ell) of ell digits per token --------------------------
    def sampler_units(self, x: torch.Tensor) -> torch.Tensor:
        """(...) token ids -> (..., ell) digits."""
        return self.encode(x)

    def sampler_tokens(self, y: torch.Tensor) -> torch.Tensor:
        """(..., ell) revealed digits -> (...) token ids (codes >= C, possible without carry-over, kept)."""
        return self.tokens_of_codes(decode(y, self.base))

    def sampler_log_probs(self, y: torch.Tensor, t: torch.Tensor | None) -> torch.Tensor:
        """(B, L, ell) digits, t (B,) -> (B, L, C) the restricted joint's log-probabilities."""
        return self.log_probs(y, t)

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
        """MDM-Prime's ``_mdm_prime_update`` at N positions with a masked digit: ``probs`` (N, C) the
        shaped restricted joint, ``y`` and ``masked`` (N, ell) -> (N, ell) the next digits.

        A token x_hat is drawn from ``probs`` at every position, then every masked digit takes x_hat's
        digit with a two-class draw (stay m_s, reveal m_t - m_s); both with ``method`` in ``dtype``
        (:func:`harness.sampling.sample_categorical`)."""
        x_hat = sample_categorical(probs=probs, method=method, dtype=dtype, generator=generator)
        outcome = probs.new_tensor([m_s, m_t - m_s]).expand(int(masked.sum()), 2)
        flags = torch.zeros_like(masked)
        flags[masked] = sample_categorical(probs=outcome, method=method, dtype=dtype, generator=generator) == 1
        return torch.where(flags, self.sampler_units(x_hat), y)

    def context_free_token_law(self, probs: torch.Tensor, *, steps: int, dtype: torch.dtype | str) -> torch.Tensor:
        """The law of the token a position ends with under :meth:`joint_draw` for a context-free
        denoiser: x_hat is drawn from ``probs`` alone (no stay mass) and the digits only decide when
        it is revealed, so the law is the grid law of one Gumbel-max in ``dtype`` at every ``steps``
        (:func:`harness.audit.gumbel.grid_gumbel_probs`)."""

        return grid_gumbel_probs(probs, dtype)

    def unit_log_marginals(self, log_p: torch.Tensor, unit: torch.Tensor) -> torch.Tensor:
        """(B, C) token log-probabilities, ``unit`` (B,) a digit index -> (B, base) log-marginal of that
        digit of the restricted joint (:func:`prime.terms.subtoken_log_marginals`), the law under
        which the valid sub-token bound is computed."""
        code_log_p = self.to_code_space(log_p)[:, None]
        marginals = subtoken_log_marginals(code_log_p, base=self.base, ell=self.ell)[:, 0]  # (B, ell, base)
        return marginals[torch.arange(log_p.shape[0], device=log_p.device), unit]

    def invalid_codes(self, y: torch.Tensor) -> torch.Tensor:
        """(B, L, ell) revealed digits -> (B, L) bool: codes >= C (only without carry-over)."""
        return decode(y, self.base) >= self.vocab_size

    @classmethod
    def toy_bound_audit(cls, C: int, ell: int | str, L: int, *, seeds: int, seed: int, shuffle_seed: int | None = None):
        """The bound audit's enumeration on toy denoisers of this family (:func:`prime.toy_audit.toy_audit`):
        a :class:`harness.audit.bound.BoundAudit` of exact NLL, sub-token bound and token-joint objective.
        ``ell``: digits per token, or ``"binary"`` (ceil(log2 C))."""

        return toy_audit(C, ell, L, seeds=seeds, seed=seed, shuffle_seed=shuffle_seed)

    @classmethod
    def unigram_bound_audit(cls, p: torch.Tensor, *, name: str, shuffle_seed: int | None = 0, protocol=None):
        """The ideal one-token model of the law ``p`` (C,) at ell = 1, 2, 4 and binary, without and with
        index shuffling, by enumeration (:func:`prime.toy_audit.unigram_audit`)."""

        return unigram_audit(p, name=name, shuffle_seed=shuffle_seed, protocol=protocol)

    # -- facts ------------------------------------------------------------------------------------
    def protocol(self) -> dict[str, Any]:
        out = {
            "ell": self.ell,
            "base": self.base,
            "carry_over": self.carry_over,
            "objective": self.objective,
            "encoding": self.encoding,
            "embedding": self.embedding_layout,
            "shuffle": self.shuffle,
        }
        if self.shuffle:
            out["shuffle_seed"] = self.hparams["shuffle_seed"]
            out["shuffle_sha256"] = hashlib.sha256(self.code_of.cpu().numpy().tobytes()).hexdigest()
        if self.carry_over != bool(self.hparams.get("carry_over", self.carry_over)):
            out["carry_over_trained"] = bool(self.hparams["carry_over"])  # overridden at evaluation
        return out

    def set_carry_over(self, carry_over: bool) -> None:
        """Evaluate with (or without) carry-over whatever the checkpoint was trained with (the release
        trains some models without it and evaluates them with it); recorded in :meth:`protocol`."""
        self.carry_over = bool(carry_over)

    @classmethod
    def bench_variants(cls) -> tuple[dict[str, Any], ...]:
        return ({"ell": 2}, {"ell": 4})

    def transfer_keys(self) -> dict[str, Any]:
        return {
            self.family: {"ell": self.ell, "base": self.base, "carry_over": self.carry_over},
            "vocab_out": self.vocab_size,
        }

    @classmethod
    def load_transfer(cls, state: dict, *, shape: dict, section: Any, doc: dict, where: str, common: dict[str, Any]):

        prime = section if isinstance(section, dict) else {}
        shape = dict(
            shape,
            vocab_out=config_size(doc, "vocab_out", where=where),
            ell=config_size(prime, "ell", where=where, minimum=2, label="prime.ell"),
        )
        carry_over = config_flag(prime, "carry_over", where=where, default=True, label="prime.carry_over")
        return build_prime(state, shape=shape, carry_over=carry_over, **common)

    @classmethod
    def label(cls, cfg) -> str:
        """``prime, ell=4`` (``prime, binary`` for the binary encoding); ``, shuffled`` with index
        shuffling, ``, bound-trained`` for a model trained on the valid bound (unmarked Prime rows are
        trained on the paper objective, as the published models)."""
        text = f"{cls.family}, binary" if cfg.encoding == "binary" else f"{cls.family}, ell={cfg.ell}"
        return text + (", shuffled" if cfg.shuffle else "") + (", bound-trained" if cfg.objective == "bound" else "")

    def denoiser(self, t: torch.Tensor | None = None):
        """This network as a ``prime.bounds`` denoiser callable: y_t (B, L, ell) -> raw logits (B, L, C)
        indexed by code; score ``self.codes(x0)`` with it (the token ids themselves without shuffling)."""

        def call(y_t: torch.Tensor) -> torch.Tensor:
            tt = None
            if self.time_conditioning:
                if t is None:
                    raise ValueError("a time-conditioned network needs a fixed t to act as a time-independent denoiser")
                tt = t.expand(y_t.shape[0])
            return self.to_code_space(self.backbone(y_t, tt))

        return call


def _sync_shuffle(module: Prime, keys) -> None:
    """After a state dict is loaded: check the stored permutation and rebuild its inverse."""
    check_permutation(module.code_of, module.vocab_size)
    module.token_of.copy_(torch.argsort(module.code_of))


MODELS.register("prime", Prime)
