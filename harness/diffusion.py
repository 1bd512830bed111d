"""Forward-process draws shared by the masked-diffusion families: times, mask counts, masks.

Two ways to draw the corruption of a sequence, both of which make the NELBO an expectation:

* **time** (MDLM): t in [eps, 1], each unit masked independently with probability 1 - alpha_t,
  weight -alpha'_t / (1 - alpha_t) (1/t for MDLM's log-linear schedule). MDLM's protocol draws one
  t per sequence, stratified over the batch: t_i = (u_i + i) / B with independent u_i, mapped into
  [eps, 1] (eps = 1e-3). The [0, eps) part of the integral is left out, an O(eps) bias that MDLM's
  reported numbers carry too.
* **count** (Zheng et al., Prop. 3.1): n ~ U{1..N}, exactly n of the N units masked uniformly at
  random, weight N / n on the summed masked cross-entropies. Unbiased and finite-variance for a
  time-independent network; it is the time-agnostic masked model's objective.

With K Monte-Carlo samples per sequence the uniforms are stratified over the K samples instead.

**Blocks** (BD3-LM, ``block_size``): the sequence is cut into blocks of ``block_size`` positions
and each block draws its own t (or mask count) as above; its weight multiplies only its own terms.
The blocks' uniforms are stratified over batch x blocks (BD3-LM's antithetic draw) for K = 1, over
the K samples of each row and block otherwise. One block of length L is MDLM's draw, number for number.

Every draw takes one generator, or a list with one generator per row: then each row draws only
for its own units (its uniforms, then per sample its valid units), so its corruption does not
depend on the batch it is scored in or on the padding of that batch (the lm-eval adapter).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from harness.errors import InputError
from harness.processes import ForwardProcess

EPS = 1e-3  # MDLM's sampling_eps: t is drawn in [eps, 1]

#: the two time samplers, as records describe them
TIME_SAMPLERS = {
    "t": "one t per sequence in [1e-3, 1], stratified over the batch (K=1) or over K samples; weight -alpha'/(1-alpha)",
    "n": "exact mask count n = ceil(N u), stratified; weight N/n (unbiased for a time-independent network)",
}

Generators = torch.Generator | Sequence[torch.Generator] | None


def time_sampler_text(sampler: str, block_size: int | None = None) -> str:
    """A record's words for time sampler ``sampler`` (``t`` or ``n``); ``block_size`` (BD3-LM): one
    draw per block of that many tokens instead of one per sequence."""
    if block_size is None:
        return TIME_SAMPLERS[sampler]
    per_block = {
        "t": f"one t per block of {block_size} tokens in [1e-3, 1], stratified over rows x blocks (K=1) or over "
        "K samples; weight -alpha'/(1-alpha) of the block's t",
        "n": f"exact mask count n = ceil(N u) per block of {block_size} tokens (N its tokens), stratified; weight N/n",
    }
    return per_block[sampler]


#: ``terms(z_t, t, masked)`` of :func:`monte_carlo_nelbo`: E tensors (B, L) of nats per token, one per estimator
Terms = Callable[[torch.Tensor, torch.Tensor | None, torch.Tensor], Sequence[torch.Tensor]]


def _per_row(generator: Generators) -> bool:
    return isinstance(generator, (list, tuple))


def check_time_sampler(sampler: str) -> str:
    if sampler not in TIME_SAMPLERS:
        raise InputError(f"unknown time sampler {sampler!r}", fix="use 't' (MDLM) or 'n' (mask count)")
    return sampler


def unit_uniforms(valid: torch.Tensor, generator: Generators, *, fill: float) -> torch.Tensor:
    """float64 U(0, 1) per unit, shape of ``valid``; with per-row generators only valid units draw
    (row-major, the others hold ``fill``)."""
    if not _per_row(generator):
        return torch.rand(valid.shape, generator=generator, device=valid.device, dtype=torch.float64)
    out = torch.full(valid.shape, fill, dtype=torch.float64, device=valid.device)
    for row, g in enumerate(generator):
        where = valid[row]
        draw = torch.rand(int(where.sum()), generator=g, device=g.device, dtype=torch.float64)
        out[row][where] = draw.to(valid.device)
    return out


def stratified_uniform(batch: int, k: int, *, generator: Generators, device=None) -> torch.Tensor:
    """(batch, k) uniforms, stratified along k: u_{b,j} = (v_{b,j} + j) / k with v iid U(0,1)."""
    if _per_row(generator):
        v = torch.cat(
            [torch.rand(1, k, generator=g, device=g.device, dtype=torch.float64).to(device) for g in generator]
        )
    else:
        v = torch.rand(batch, k, generator=generator, device=device, dtype=torch.float64)
    return (v + torch.arange(k, device=device, dtype=torch.float64)) / k


def batch_stratified_uniform(batch: int, *, generator: torch.Generator | None, device=None) -> torch.Tensor:
    """MDLM's low-discrepancy draw, one per sequence: u_i = (v_i + i) / B, shape (B,)."""
    v = torch.rand(batch, generator=generator, device=device, dtype=torch.float64)
    return (v + torch.arange(batch, device=device, dtype=torch.float64)) / batch


def times_from_uniform(u: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Map uniforms into [eps, 1] as MDLM does: t = eps + (1 - eps) u."""
    return eps + (1.0 - eps) * u


def counts_from_uniform(u: torch.Tensor, n_max: torch.Tensor) -> torch.Tensor:
    """Map uniforms to mask counts n = ceil(n_max * u) in {1..n_max} (uniform when u is)."""
    n = torch.ceil(u * n_max.to(u.dtype)).long()
    return torch.minimum(n.clamp_min(1), n_max.long())


def mask_bernoulli(p: torch.Tensor, valid: torch.Tensor, *, generator: Generators) -> torch.Tensor:
    """Mask each valid unit independently with probability ``p`` (broadcast against ``valid``)."""
    while p.dim() < valid.dim():
        p = p[..., None]
    return (unit_uniforms(valid, generator, fill=1.0) < p) & valid


def mask_exact(n: torch.Tensor, valid: torch.Tensor, *, generator: Generators) -> torch.Tensor:
    """Mask exactly ``n[b]`` of the valid units of row b, chosen uniformly at random.

    ``valid`` is (B, ...) bool; units are flattened per row. Invalid units (padding) never masked.
    """
    B = valid.shape[0]
    flat = valid.reshape(B, -1)
    keys = unit_uniforms(flat, generator, fill=2.0).masked_fill(~flat, 2.0)  # padding sorts last
    rank = keys.argsort(dim=1).argsort(dim=1)
    return ((rank < n.reshape(B, 1)) & flat).reshape(valid.shape)


def corrupt(
    clean: torch.Tensor,
    u: torch.Tensor,
    valid: torch.Tensor,
    *,
    sampler: str,
    schedule,
    process: ForwardProcess,
    generator: Generators,
    time_conditioning: bool = False,
):
    """One corruption per row from uniforms ``u`` (B,): returns ``(z_t, masked, weight (B,), t)``.

    ``clean`` and ``valid`` have the same shape (B, ...) (tokens, or (B, L, ell) sub-tokens).
    ``sampler="t"``: time t from u, units hit independently with 1 - alpha_t and redrawn from the
    ``process``'s prior (:meth:`~harness.processes.ForwardProcess.noise`: the mask id for the
    absorbing process), weight :meth:`~harness.processes.ForwardProcess.corruption_weight`
    (-alpha'_t/(1 - alpha_t) for the absorbing process). ``sampler="n"`` (absorbing only): n = ceil(N u)
    units masked exactly, weight N / n, t None (only for time-independent networks). ``masked``:
    the units that were hit.
    """
    if sampler == "t":
        t = times_from_uniform(u)
        masked = mask_bernoulli(schedule.mask_prob(t), valid, generator=generator)
        weight = process.corruption_weight(schedule, t)
    elif sampler == "n":
        _count_needs_absorbing(process)
        if time_conditioning:
            raise InputError(
                "the mask-count estimator needs a time-independent network",
                fix="use time_sampler='t' (--time-sampler t)",
            )
        n_units = valid.reshape(valid.shape[0], -1).sum(1)
        n = counts_from_uniform(u, n_units)
        masked = mask_exact(n, valid, generator=generator)
        weight = n_units.double() / n.double()
        t = None
    else:
        check_time_sampler(sampler)
    return (
        _redraw(process, clean, masked, generator, None if t is None else lambda: schedule.alpha(t)),
        masked,
        weight,
        t,
    )


def _redraw(process: ForwardProcess, clean, masked, generator, alpha_of) -> torch.Tensor:
    """``clean`` with the ``masked`` units redrawn; a process whose redraw law moves with time also gets
    the alpha of each row or unit (``alpha_of()``, None for the mask-count draw: then t = 1)."""
    alpha = alpha_of() if process.moving_prior and alpha_of is not None else None
    return process.noise(clean, masked, generator=generator, alpha=alpha)


def _count_needs_absorbing(process: ForwardProcess) -> None:
    if process.name != "absorbing":
        raise InputError(
            f"the mask-count estimator holds for the absorbing process only, not {process.name!r}",
            fix="use time_sampler='t' (--time-sampler t)",
        )


def block_ids(length: int, block_size: int, device=None) -> torch.Tensor:
    """(L,) long: the block of each position (blocks of ``block_size``; the last may be shorter)."""
    return torch.arange(length, device=device) // block_size


def blocked(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """(B, L) -> (B, blocks, block_size), the last block padded with zeros (False for bool)."""
    blocks = -(-x.shape[1] // block_size)
    return torch.nn.functional.pad(x, (0, blocks * block_size - x.shape[1])).view(x.shape[0], blocks, block_size)


def block_uniforms(batch: int, blocks: int, k: int, *, generator: Generators, device=None) -> torch.Tensor:
    """(batch, k, blocks) float64 uniforms. K = 1 with one generator: stratified over the batch x
    blocks draws in row-major order (BD3-LM's antithetic sampling; MDLM's draw when blocks = 1);
    otherwise stratified along k for every row and block."""
    if k == 1 and not _per_row(generator):
        n = batch * blocks
        v = torch.rand(n, generator=generator, device=device, dtype=torch.float64)
        return ((v + torch.arange(n, device=device, dtype=torch.float64)) / n).view(batch, 1, blocks)
    if _per_row(generator):
        v = torch.cat(
            [torch.rand(1, k, blocks, generator=g, device=g.device, dtype=torch.float64).to(device) for g in generator]
        )
    else:
        v = torch.rand(batch, k, blocks, generator=generator, device=device, dtype=torch.float64)
    return (v + torch.arange(k, device=device, dtype=torch.float64)[:, None]) / k


def corrupt_blocks(
    clean: torch.Tensor,
    u: torch.Tensor,
    valid: torch.Tensor,
    *,
    block_size: int,
    sampler: str,
    schedule,
    process: ForwardProcess,
    generator: Generators,
    t_range: tuple[float, float] = (EPS, 1.0),
):
    """One corruption per row with one draw per block, from uniforms ``u`` (B, blocks): returns
    ``(z_t, masked, weight (B, blocks), t (B, blocks) or None)`` for (B, L) ``clean`` and ``valid``.

    ``sampler="t"``: block b's time t_b = lo + (hi - lo) u_b with ``t_range`` = (lo, hi) (the
    NELBO's (1e-3, 1); BD3-LM trains on a clipped range), its tokens masked independently with
    1 - alpha(t_b), weight -alpha'/(1 - alpha) at t_b. ``sampler="n"``: n_b = ceil(N_b u_b) of the
    N_b valid tokens of block b masked exactly, weight N_b / n_b (0 for a block with none)."""
    B, L = clean.shape
    blocks = u.shape[1]
    ids = block_ids(L, block_size, clean.device)
    if sampler == "t":
        lo, hi = t_range
        t = lo + (hi - lo) * u
        masked = mask_bernoulli(schedule.mask_prob(t)[:, ids], valid, generator=generator)
        weight = process.corruption_weight(schedule, t)
    elif sampler == "n":
        _count_needs_absorbing(process)
        t = None
        grid = blocked(valid, block_size).reshape(B * blocks, block_size)
        n_units = grid.sum(1)
        n = counts_from_uniform(u.reshape(-1), n_units)
        gens = [g for g in generator for _ in range(blocks)] if _per_row(generator) else generator
        masked = mask_exact(n, grid, generator=gens).reshape(B, blocks * block_size)[:, :L]
        weight = torch.where(n_units > 0, n_units.double() / n.clamp_min(1).double(), 0.0).reshape(B, blocks)
    else:
        check_time_sampler(sampler)
    alpha_of = None if t is None else lambda: schedule.alpha(t)[:, ids]  # each position at its block's time
    return _redraw(process, clean, masked, generator, alpha_of), masked, weight, t


def summarize_samples(estimates: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, K[, E]) per-sample estimates -> mean and standard error over K, (B[, E]) (NaN when K = 1)."""
    K = estimates.shape[1]
    mean = estimates.mean(1)
    if K < 2:
        return mean, torch.full_like(mean, float("nan"))
    return mean, estimates.std(1, unbiased=True) / K**0.5


def monte_carlo_nelbo(
    units: torch.Tensor,
    valid: torch.Tensor,
    terms: Terms,
    *,
    schedule,
    process: ForwardProcess,
    sampler: str,
    num_samples: int,
    generator: Generators,
    time_conditioning: bool = False,
    block_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The Monte-Carlo NELBO of E estimators from the same corruptions: mean and standard error per
    row, each (B, E) float64 nats (the standard error is NaN for K = 1).

    ``units`` (B, L) or (B, L, ell) are the clean units and ``valid`` (same shape, bool) those that
    may be masked. Each of the K = ``num_samples`` draws corrupts every row once (:func:`corrupt`
    with ``sampler``, ``schedule`` and ``process``) and calls ``terms(z_t, t, masked)``: z_t and
    masked have the shape of ``units``, t is (B,) float32 (None for the mask-count sampler), and it
    returns E tensors (B, L) of nats per token, one per estimator. A draw's estimate is its weight
    (B,) times each tensor's sum over L. K = 1 with one generator stratifies the single draw over
    the batch (MDLM's protocol); K > 1, or per-row generators, stratify over the K draws of each
    row. The families' ``nll`` and ``prime.bounds``' Monte-Carlo mode both run this.

    ``block_size`` (BD3-LM, whole tokens (B, L)): one draw per block of that many positions
    (:func:`corrupt_blocks`, uniforms from :func:`block_uniforms`); a draw's estimate sums each
    block's weight times the sum of its terms, and ``terms`` gets t = None (the network has no time
    input).
    """
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    batch, device = units.shape[0], units.device
    if block_size is None:
        if num_samples == 1 and not _per_row(generator):
            u = batch_stratified_uniform(batch, generator=generator, device=device)[:, None]
        else:
            u = stratified_uniform(batch, num_samples, generator=generator, device=device)
    else:
        if block_size < 1:
            raise InputError(f"block_size must be >= 1, got {block_size}")
        blocks = -(-units.shape[1] // block_size)
        u = block_uniforms(batch, blocks, num_samples, generator=generator, device=device)
    draws = []
    for k in range(num_samples):
        if block_size is None:
            z_t, masked, weight, t = corrupt(
                units,
                u[:, k],
                valid,
                sampler=sampler,
                schedule=schedule,
                process=process,
                generator=generator,
                time_conditioning=time_conditioning,
            )
            out = terms(z_t, None if t is None else t.float(), masked)
            estimates = [weight.double() * o.sum(-1).double() for o in out]
        else:
            z_t, masked, weight, _ = corrupt_blocks(
                units,
                u[:, k],
                valid,
                block_size=block_size,
                sampler=sampler,
                schedule=schedule,
                process=process,
                generator=generator,
            )
            out = terms(z_t, None, masked)
            estimates = [(weight * blocked(o, block_size).sum(-1).double()).sum(-1) for o in out]
        draws.append(torch.stack(estimates, dim=-1))  # (B, E)
    return summarize_samples(torch.stack(draws, dim=1))  # (B, K, E)
