"""MaskGIT-style confidence-ordered parallel decoding (Chang et al. 2022) on whole tokens.

M = number of masked token positions (L minus the prefix). Linear schedule: after step k of T,
ceil(M k / T) tokens are decoded, so step k decodes ceil(M k / T) - ceil(M (k - 1) / T) tokens
(ceil(M / T) or one less; with T > M some steps decode nothing: they call no network and count as
idle). At each step the denoiser gives the token distribution at every position (Prime: the
joint over valid codes restricted to V(y^i), i.e. whole tokens, so a token is decoded when all
its sub-tokens are set); a candidate token is drawn at every masked position (only there), and the positions
whose drawn token has the highest probability (under the shaped distribution) are kept. No
confidence noise or annealing is added (MaskGIT's choice temperature); ties go to ``torch.topk``'s
order. Time-conditioned networks get t = the fraction of tokens still masked.
"""

from __future__ import annotations

import math

import torch

from harness.sampling.categorical import sample_categorical
from harness.sampling.settings import BatchResult, SamplerSettings
from harness.sampling.units import UnitModel, shaped_log_probs


def decode_counts(masked: int, steps: int) -> list[int]:
    """Tokens decoded at steps k = 1..T under the linear schedule (sums to ``masked``)."""
    done = [math.ceil(masked * k / steps) for k in range(steps + 1)]
    return [done[k] - done[k - 1] for k in range(1, steps + 1)]


def run_maskgit(
    units: UnitModel,
    rows: int,
    settings: SamplerSettings,
    generator: torch.Generator | None,
    prefix: torch.Tensor | None,
) -> BatchResult:
    """Draw ``rows`` samples in T = ``settings.steps`` confidence-ordered steps."""
    steps = int(settings.steps)
    y = units.initial_state(rows, prefix)
    device = y.device
    masked_tokens = units.process.unrevealed(y).all(-1)  # (B, L): tokens not yet decoded
    M = int(masked_tokens[0].sum())
    nfe = torch.zeros(rows, dtype=torch.long, device=device)
    idle = torch.zeros(rows, dtype=torch.long, device=device)
    remaining = M
    for n_k in decode_counts(M, steps):
        if n_k == 0:
            idle += 1
            continue
        log_p = shaped_log_probs(units.log_probs(y, remaining / max(units.seq_len, 1)), settings)
        nfe += 1
        probs = log_p.exp_()  # (B, L, C)
        candidate = torch.zeros(masked_tokens.shape, dtype=torch.long, device=device)
        candidate[masked_tokens] = sample_categorical(
            probs=probs[masked_tokens], method=settings.method, dtype=settings.dtype, generator=generator
        )  # masked only
        confidence = probs.gather(-1, candidate[..., None]).squeeze(-1)
        confidence = confidence.masked_fill(~masked_tokens, float("-inf"))
        chosen = confidence.topk(n_k, dim=-1).indices  # (B, n_k)
        pick = torch.zeros_like(masked_tokens).scatter(-1, chosen, True)
        y = torch.where(pick[..., None], units.encode(candidate), y)
        masked_tokens &= ~pick
        remaining -= n_k
    return BatchResult(
        tokens=units.decode(y),
        nfe=nfe,
        idle_steps=idle,
        steps=torch.full((rows,), steps, dtype=torch.long, device=device),
    )


__all__ = ["run_maskgit", "decode_counts"]
