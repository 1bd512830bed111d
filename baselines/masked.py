"""Time-agnostic masked model (Zheng et al. 2024, "MDMs are secretly time-agnostic masked models").

The network has no time input. Training (Prop. 3.1): draw n ~ U{1..L}, mask exactly n positions
uniformly at random, and weight the summed masked cross-entropies by L / n; in expectation this
equals the continuous-time MDLM NELBO, and so is an upper bound on the NLL of the any-order
sampler. The bound is estimated with the same mask-count estimator, stratified over n.
The parameterisation is MDLM's SUBS (mask logit -inf, unmasked positions carried over).
"""

from __future__ import annotations

from baselines.mdlm import MDLM
from harness.models import MODELS
from harness.models.masked_diffusion import MaskedDiffusionConfig


class MaskedModel(MDLM):
    """Time-agnostic masked model (exact-count masking, L/n weight); NLL is an upper bound."""

    family = "masked"
    config_class = MaskedDiffusionConfig  # no time input, so no time_conditioning / cond_dim keys
    table_order = 2
    release_formats = ()  # no release: MDLM's loaders build MDLM
    train_sampler = "n"
    default_time_sampler = "n"


MODELS.register("masked", MaskedModel)
