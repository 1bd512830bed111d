"""Training health: is the model learning to use context, or sitting on the unigram plateau?

A masked-diffusion model can train for a long time at the cross-entropy of a unigram model (it has
learned token frequencies and nothing else), which its falling loss alone does not reveal. At every
evaluation the training log gets, beside the validation loss:

* ``unigram_ref``: the exact cross-entropy of the add-one unigram model fitted on the train rows,
  on the scored tokens of the same validation rows (:mod:`harness.metrics.references`);
* for masked families, ``ce_masked_15`` and ``ce_all_masked``: the mean cross-entropy at masked
  positions with 15% of the tokens masked and with all of them masked, on the same rows, and their
  difference ``context_gain`` (nats/token). A network that ignores context has a gain near 0.

A diffusion model whose validation loss is not yet :data:`PLATEAU_MARGIN` nats below the unigram
reference at half of its steps (within the margin, or above the reference) gets one warning (stderr
and the log line's ``warning``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from harness.metrics.references import fit_counts, reference_nlls

#: how close to the unigram reference (nats/token) counts as "still on the plateau"
PLATEAU_MARGIN = 0.05
#: the small mask rate of the context gain
CONTEXT_RATE = 0.15


@dataclass
class Health:
    """The references of one run's validation slice and the warning state."""

    unigram_ref: float
    rows: torch.Tensor
    mask: torch.Tensor
    half_step: int
    diffusion: bool
    seed: int
    warned: bool = field(default=False)

    @classmethod
    def build(cls, model, train, valid, *, n_rows: int, steps: int, seed: int) -> Health:
        """``train``/``valid``: rows with ``input_ids``/``attention_mask``; the first ``n_rows``
        validation rows are the ones the validation loss scores."""

        rows, mask = valid.input_ids[:n_rows], valid.attention_mask[:n_rows]
        counts = fit_counts(train.input_ids, train.attention_mask, vocab_size=model.vocab_size)
        unigram = reference_nlls(counts, rows, model.scored_positions(rows, mask), mask)["unigram"]
        return cls(
            unigram_ref=unigram,
            rows=rows,
            mask=mask,
            half_step=max(1, steps // 2),
            diffusion=bool(model.uses_time_sampler),
            seed=seed,
        )

    @torch.no_grad()
    def measure(self, model, *, step: int, val_loss: float, device) -> dict:
        """The log fields of one evaluation (``model`` in eval mode, EMA weights swapped in)."""
        out: dict = {"unigram_ref": self.unigram_ref}
        x, m = self.rows.to(device), self.mask.to(device)
        g = torch.Generator().manual_seed(self.seed)
        few = model.masked_cross_entropy(x, rate=CONTEXT_RATE, generator=g, attention_mask=m)
        if few is not None:  # a family that masks tokens
            every = model.masked_cross_entropy(x, rate=1.0, attention_mask=m)
            out.update(ce_masked_15=few, ce_all_masked=every, context_gain=every - few)
        if (
            self.diffusion
            and not self.warned
            and step >= self.half_step
            and val_loss > self.unigram_ref - PLATEAU_MARGIN
        ):
            self.warned = True
            where = (
                f"is within {PLATEAU_MARGIN} nats of"
                if val_loss <= self.unigram_ref + PLATEAU_MARGIN
                else f"is {val_loss - self.unigram_ref:.4f} nats above"
            )
            out["warning"] = (
                f"at step {step} the validation loss {val_loss:.4f} {where} the unigram reference "
                f"{self.unigram_ref:.4f}: the model has not learned to use context (see docs/training-recipe.md)"
            )
        return out


__all__ = ["CONTEXT_RATE", "Health", "PLATEAU_MARGIN"]
