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

import torch

from harness import diffusion
from harness.backbone import Backbone, BackboneConfig
from harness.models import MODELS, ModelFamily
from harness.results import NLL
from prime.bounds import restricted_log_probs, subtoken_nll_terms, token_joint_nll_terms
from prime.embedding import SubtokenEmbedding
from prime.subtokens import encode, subtoken_base

ESTIMATORS = {"subtoken": "bound", "token_joint": "paper-objective"}


class Prime(ModelFamily):
    """MDM-Prime (sub-token partial masking); NLL: sub-token bound (or the paper's token-joint objective)."""

    family = "prime"
    nll_kind = "bound"

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
        time_conditioning: bool = False,
        cond_dim: int = 64,
        schedule: str = "loglinear",
        ell: int = 2,
        carry_over: bool = True,
        positions: str = "rope",
        image_shape: str = "",
        start_token: bool = False,
    ):
        from harness.positions import build_positions
        from harness.schedules import get_schedule

        if start_token:
            raise ValueError("model.start_token only applies to the arm family (diffusion models score every position)")

        hparams = dict(d_model=d_model, n_layers=n_layers, n_heads=n_heads, mlp_ratio=mlp_ratio, dropout=dropout)
        super().__init__(
            vocab_size=vocab_size, seq_len=seq_len, hparams=dict(hparams, schedule=schedule, positions=positions, image_shape=image_shape, ell=ell, carry_over=carry_over)
        )
        self.ell = int(ell)
        self.base = subtoken_base(vocab_size, self.ell)
        self.mask_id = self.base  # the sub-token mask id
        self.carry_over = bool(carry_over)
        self.time_conditioning = time_conditioning
        self.schedule = get_schedule(schedule)
        self.backbone = Backbone(
            BackboneConfig(
                vocab_in=self.base + 1, vocab_out=vocab_size, seq_len=seq_len,
                time_conditioning=time_conditioning, cond_dim=cond_dim, **hparams,
            ),
            embedding=SubtokenEmbedding(self.base, self.ell, d_model),
            positions=build_positions(positions, image_shape, d_model=d_model, seq_len=seq_len),
        )

    def encode(self, x0: torch.Tensor) -> torch.Tensor:
        """(B, L) token ids -> (B, L, ell) digits."""
        return encode(x0, self.base, self.ell)

    def log_probs(self, z_t: torch.Tensor, t: torch.Tensor | None = None, attention_mask=None) -> torch.Tensor:
        """(B, L, ell) sub-tokens (mask id = base) -> (B, L, C) restricted joint log-probabilities."""
        logits = self.backbone(z_t, t if self.time_conditioning else None, attention_mask)
        return restricted_log_probs(logits, z_t, C=self.vocab_size, base=self.base, ell=self.ell, carry_over=self.carry_over)

    def _valid(self, x0: torch.Tensor, attention_mask) -> torch.Tensor:
        tokens = torch.ones_like(x0, dtype=torch.bool) if attention_mask is None else attention_mask.to(torch.bool)
        return tokens[..., None].expand(*x0.shape, self.ell)

    def _corrupt(self, y0: torch.Tensor, u: torch.Tensor, valid: torch.Tensor, sampler: str, generator):
        return diffusion.corrupt(
            y0, u, valid, sampler=sampler, schedule=self.schedule, mask_id=self.mask_id,
            generator=generator, time_conditioning=self.time_conditioning,
        )

    def _terms(self, x0, y0, z_t, masked, t, attention_mask, estimator: str) -> torch.Tensor:
        """(B,) summed nats of the chosen estimator for one corruption."""
        log_p = self.log_probs(z_t, None if t is None else t.float(), attention_mask)
        if estimator == "subtoken":
            return subtoken_nll_terms(log_p, y0, masked, self.base, self.ell).sum(-1)
        if estimator == "token_joint":
            return token_joint_nll_terms(log_p, x0, masked).sum(-1)
        raise ValueError(f"unknown estimator {estimator!r}: use 'subtoken' (bound) or 'token_joint' (paper objective)")

    def loss(self, x0: torch.Tensor, *, generator: torch.Generator | None = None, attention_mask=None) -> torch.Tensor:
        """The paper's objective per token (nats), one time per sequence stratified over the batch."""
        self.check_tokens(x0)
        y0 = self.encode(x0)
        valid = self._valid(x0, attention_mask)
        u = diffusion.batch_stratified_uniform(x0.shape[0], generator=generator, device=x0.device)
        z_t, masked, weight, t = self._corrupt(y0, u, valid, "t", generator)
        per_seq = weight.to(torch.float32) * self._terms(x0, y0, z_t, masked, t, attention_mask, "token_joint")
        return per_seq.sum() / valid[..., 0].sum().clamp_min(1)

    @torch.no_grad()
    def nll(
        self,
        x0: torch.Tensor,
        *,
        num_samples: int = 1,
        generator: torch.Generator | None = None,
        attention_mask=None,
        estimator: str = "subtoken",
        time_sampler: str = "t",
    ) -> NLL:
        """Monte-Carlo estimate per sequence (nats over L tokens, not L * ell sub-tokens).

        ``estimator="subtoken"`` -> kind "bound"; ``"token_joint"`` -> kind "paper-objective".
        Sampling of the corruption as in :meth:`baselines.mdlm.MDLM.nll`.
        """
        if estimator not in ESTIMATORS:
            raise ValueError(f"unknown estimator {estimator!r}: use one of {sorted(ESTIMATORS)}")
        self.check_tokens(x0)
        y0 = self.encode(x0)
        valid = self._valid(x0, attention_mask)

        def estimate(u: torch.Tensor) -> torch.Tensor:
            z_t, masked, weight, t = self._corrupt(y0, u, valid, time_sampler, generator)
            return weight.double() * self._terms(x0, y0, z_t, masked, t, attention_mask, estimator).double()

        estimates = diffusion.monte_carlo(estimate, x0.shape[0], num_samples, generator=generator, device=x0.device)
        nats, stderr = diffusion.summarize_samples(estimates)
        return NLL(
            nats=nats, tokens=valid[..., 0].sum(-1).double(), kind=ESTIMATORS[estimator], stderr=stderr, num_samples=num_samples
        )

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
