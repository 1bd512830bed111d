"""Audits of the harness's claims: ``bound`` (exact NLL vs the sub-token bound vs the paper objective),
``idle`` / ``idle_measure`` (idle steps of the ancestral sampler, analytic and measured),
``gumbel`` / ``gumbel_audit`` (what a finite-precision Gumbel-max draw samples) and ``precision``
(fp32 vs fp64 sampling).

The analytic idle-step and Gumbel functions this package exported before are still importable from
it (``from harness.audit import idle_step_ratio``); they are re-exported lazily (PEP 562), so importing
the package loads neither them nor torch, and the command line can read the submodules' defaults
without loading torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.lazy import lazy_exports

_EXPORTS = {
    "IdleSimulation": "idle",
    "expected_nfe": "idle",
    "idle_step_ratio": "idle",
    "simulate_idle": "idle",
    "empirical_frequencies": "gumbel",
    "entropy": "gumbel",
    "grid_gumbel_probs": "gumbel",
    "kl": "gumbel",
    "mdlm_step_distribution": "gumbel",
    "peaked_and_flat": "gumbel",
    "truncated_gumbel_probs": "gumbel",
    "truncation_level": "gumbel",
}

__all__ = [
    "IdleSimulation",
    "empirical_frequencies",
    "entropy",
    "expected_nfe",
    "grid_gumbel_probs",
    "idle_step_ratio",
    "kl",
    "mdlm_step_distribution",
    "peaked_and_flat",
    "simulate_idle",
    "truncated_gumbel_probs",
    "truncation_level",
]

if TYPE_CHECKING:
    from harness.audit.gumbel import (
        empirical_frequencies,
        entropy,
        grid_gumbel_probs,
        kl,
        mdlm_step_distribution,
        peaked_and_flat,
        truncated_gumbel_probs,
        truncation_level,
    )
    from harness.audit.idle import IdleSimulation, expected_nfe, idle_step_ratio, simulate_idle


__getattr__, __dir__ = lazy_exports("harness.audit", _EXPORTS, globals(), __all__)
