"""Audits that need no trained model: idle steps of the ancestral sampler, and what a finite-precision
Gumbel-max draw really samples."""

from __future__ import annotations

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

__all__ = [
    "IdleSimulation", "empirical_frequencies", "entropy", "expected_nfe", "grid_gumbel_probs",
    "idle_step_ratio", "kl", "mdlm_step_distribution", "peaked_and_flat", "simulate_idle",
    "truncated_gumbel_probs", "truncation_level",
]
