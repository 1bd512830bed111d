"""MDLM (Sahoo et al. 2024): absorbing-mask diffusion with the SUBS parameterisation.

* mask id = C (one beyond the vocabulary); the network outputs C logits, i.e. the mask logit is
  -inf (SUBS "zero masking probabilities");
* unmasked positions are carried over: log p(x_0^i = z_t^i | z_t) = 0 (SUBS "carry-over");
* continuous-time NELBO: E_t[ -alpha'_t/(1 - alpha_t) * sum over masked i of -log p(x_0^i | z_t) ],
  with MDLM's log-linear schedule (weight 1/t) and one t per sequence from the stratified sampler
  t_i = (u_i + i)/B mapped into [eps, 1]; the training loss divides by the number of tokens.
* time conditioning off by default, as MDLM's OWT checkpoints (``model.time_conditioning``).

The likelihood it reports is a bound (an upper bound on the NLL of its any-order sampler).
"""

from __future__ import annotations

import torch

from harness import diffusion
from harness.backbone import Backbone, BackboneConfig
from harness.models import MODELS, ModelFamily
from harness.results import NLL


class MDLM(ModelFamily):
    """Masked diffusion LM (SUBS parameterisation, continuous-time NELBO); NLL is an upper bound."""

    family = "mdlm"
    nll_kind = "bound"
    #: how the training loss draws its corruption: "t" (per-sequence time) or "n" (exact mask count)
    train_sampler = "t"
    default_nll_sampler = "t"

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
        ell: int = 1,
        carry_over: bool = True,
        positions: str = "rope",
        image_shape: str = "",
        start_token: bool = False,
    ):
        from harness.positions import build_positions
        from harness.schedules import get_schedule

        if start_token:
            raise ValueError("model.start_token only applies to the arm family (diffusion models score every position)")

        if ell != 1:
            raise ValueError(f"model.ell={ell} only applies to the prime family; {self.family} works on whole tokens")
        hparams = dict(d_model=d_model, n_layers=n_layers, n_heads=n_heads, mlp_ratio=mlp_ratio, dropout=dropout)
        super().__init__(vocab_size=vocab_size, seq_len=seq_len, hparams=dict(hparams, schedule=schedule, positions=positions, image_shape=image_shape))
        self.mask_id = vocab_size
        self.time_conditioning = time_conditioning
        self.schedule = get_schedule(schedule)
        self.backbone = Backbone(
            BackboneConfig(
                vocab_in=vocab_size + 1, vocab_out=vocab_size, seq_len=seq_len,
                time_conditioning=time_conditioning, cond_dim=cond_dim, **hparams,
            ),
            embedding=self._embedding(vocab_size, d_model),
            positions=build_positions(positions, image_shape, d_model=d_model, seq_len=seq_len),
        )

    def _embedding(self, vocab_size: int, d_model: int):
        return None  # the backbone's plain (C + 1) x D table

    # -- parameterisation ---------------------------------------------------------------------
    def log_probs(self, z_t: torch.Tensor, t: torch.Tensor | None = None, attention_mask=None) -> torch.Tensor:
        """(B, L) ids with mask id C -> (B, L, C) SUBS log-probabilities (float32)."""
        logits = self.backbone(z_t, t if self.time_conditioning else None, attention_mask)
        log_p = torch.log_softmax(logits, dim=-1)
        unmasked = z_t != self.mask_id
        carried = torch.full_like(log_p, float("-inf")).scatter(-1, z_t.clamp_max(self.vocab_size - 1)[..., None], 0.0)
        return torch.where(unmasked[..., None], carried, log_p)

    # -- corruption ---------------------------------------------------------------------------
    def _valid(self, x0: torch.Tensor, attention_mask) -> torch.Tensor:
        return torch.ones_like(x0, dtype=torch.bool) if attention_mask is None else attention_mask.to(torch.bool)

    def _corrupt(self, x0: torch.Tensor, u: torch.Tensor, valid: torch.Tensor, sampler: str, generator):
        """Return (z_t, masked, weight (B,), t (B,) or None) for uniforms u (B,)."""
        return diffusion.corrupt(
            x0, u, valid, sampler=sampler, schedule=self.schedule, mask_id=self.mask_id,
            generator=generator, time_conditioning=self.time_conditioning,
        )

    def _masked_nll(self, x0, z_t, masked, t, attention_mask) -> torch.Tensor:
        """(B,) sum over masked positions of -log p(x_0^i | z_t)."""
        log_p = self.log_probs(z_t, None if t is None else t.float(), attention_mask)
        true = log_p.gather(-1, x0[..., None]).squeeze(-1)
        return torch.where(masked, -true, torch.zeros_like(true)).sum(-1)

    # -- objectives ---------------------------------------------------------------------------
    def loss(self, x0: torch.Tensor, *, generator: torch.Generator | None = None, attention_mask=None) -> torch.Tensor:
        """NELBO per token (nats), one corruption per sequence, stratified over the batch."""
        self.check_tokens(x0)
        valid = self._valid(x0, attention_mask)
        u = diffusion.batch_stratified_uniform(x0.shape[0], generator=generator, device=x0.device)
        z_t, masked, weight, t = self._corrupt(x0, u, valid, self.train_sampler, generator)
        per_seq = weight.to(torch.float32) * self._masked_nll(x0, z_t, masked, t, attention_mask)
        return per_seq.sum() / valid.sum().clamp_min(1)

    @torch.no_grad()
    def nll(
        self,
        x0: torch.Tensor,
        *,
        num_samples: int = 1,
        generator: torch.Generator | None = None,
        attention_mask=None,
        time_sampler: str | None = None,
    ) -> NLL:
        """Monte-Carlo NELBO per sequence (nats), an upper bound on the NLL.

        K = ``num_samples`` corruptions per sequence, stratified over the K samples; with K = 1
        the single draw is stratified over the batch (MDLM's protocol) and the per-sequence
        standard error is not estimable (NaN). ``time_sampler``: "t" (MDLM, default for mdlm)
        or "n" (exact mask count, unbiased; default for the time-agnostic masked model).
        """
        self.check_tokens(x0)
        sampler = time_sampler or self.default_nll_sampler
        valid = self._valid(x0, attention_mask)

        def estimate(u: torch.Tensor) -> torch.Tensor:
            z_t, masked, weight, t = self._corrupt(x0, u, valid, sampler, generator)
            return weight.double() * self._masked_nll(x0, z_t, masked, t, attention_mask).double()

        estimates = diffusion.monte_carlo(estimate, x0.shape[0], num_samples, generator=generator, device=x0.device)
        nats, stderr = diffusion.summarize_samples(estimates)
        return NLL(nats=nats, tokens=valid.sum(-1).double(), kind="bound", stderr=stderr, num_samples=num_samples)


MODELS.register("mdlm", MDLM)
