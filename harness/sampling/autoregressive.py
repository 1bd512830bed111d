"""Left-to-right sampling of the autoregressive model (MDLM's ``_ar_sampler`` without its fp32 Gumbel).

The first P tokens are given (a prefix, or one BOS token: the ARM was trained on blocks whose first
token is given and scores the L - 1 that follow); a start-token ARM (images) may start from an
empty prefix, its ``log_probs`` prepending the start id. Each of the L - P remaining tokens is drawn from
p(x^{i} | x^{<i}), the last position of one causal forward pass over x^{<i}: L - P denoiser calls
per sample (L - 1 with a BOS), no KV cache, no idle steps.
"""

from __future__ import annotations

import torch

from harness.sampling.categorical import sample_categorical
from harness.sampling.settings import BatchResult, SamplerSettings
from harness.sampling.units import shaped_log_probs


def run_autoregressive(
    model, rows: int, settings: SamplerSettings, generator: torch.Generator | None, prefix: torch.Tensor
) -> BatchResult:
    """Draw ``rows`` sequences of length L continuing ``prefix`` (rows, P), P >= 1 (P >= 0 with a start token)."""
    L, P = int(settings.seq_len or model.seq_len), int(prefix.shape[1])
    device = model.device
    x = torch.empty(rows, L, dtype=torch.long, device=device)
    x[:, :P] = prefix.to(device)
    for i in range(P, L):
        log_p = shaped_log_probs(model.log_probs(x[:, :i])[:, -1], settings)  # (B, C)
        x[:, i] = sample_categorical(
            probs=torch.exp(log_p), method=settings.method, dtype=settings.dtype, generator=generator
        )
    return BatchResult(
        tokens=x,
        nfe=torch.full((rows,), L - P, dtype=torch.long, device=device),
        idle_steps=torch.zeros(rows, dtype=torch.long, device=device),
        steps=torch.full((rows,), L - P, dtype=torch.long, device=device),
    )


__all__ = ["run_autoregressive"]
