"""The sampler registry and :func:`generate`, the one entry point that draws samples from a model.

    from harness.sampling import generate
    out = generate(model, "ancestral", num_samples=8, steps=256, dtype="float64", generator=0)
    out.tokens            # (8, L) token ids in [0, C)
    out.nfe, out.idle_steps, out.protocol

Samplers (registry ``SAMPLERS``, did-you-mean on a typo):

* ``ancestral``      mdlm, masked, prime: T-step ancestral sampler with exact caching
                     (:mod:`harness.sampling.ancestral`);
* ``first-hitting``  mdlm, masked, prime: one unit per denoiser call (Zheng et al. Alg. 1)
                     (:mod:`harness.sampling.first_hitting`);
* ``maskgit``        mdlm, masked, prime: confidence-ordered parallel decoding
                     (:mod:`harness.sampling.maskgit`);
* ``remdm``          mdlm, masked, prime, bd3lm: ReMDM's remasking samplers (cap, rescale, conf,
                     loop) on the ancestral grid (:mod:`harness.sampling.remdm`);
* ``posterior``      udlm (uniform and interpolating processes): T steps, every position redrawn
                     from q(x_s | x_t, x_theta) (:mod:`harness.sampling.posterior`);
* ``self-correction`` gidd: the posterior sampler, then GIDD's self-correction steps at a small t
                     (:mod:`harness.sampling.correction`);
* ``tweedie``, ``euler`` sedd, sedd-uniform: SEDD's reverse-chain steps on concrete scores, then its
                     denoising step (:mod:`harness.sampling.scores`);
* ``autoregressive`` arm: left to right from a prefix or BOS (:mod:`harness.sampling.autoregressive`).

Every draw is made in the given ``dtype``: the token of a revealed unit in the default two-stage
ancestral draw by :func:`harness.sampling.categorical.sample_inverse_cdf` (its reveal decisions are
float64 Bernoulli draws), every other categorical draw by :func:`harness.sampling.sample_categorical`
with the given ``method`` (see :mod:`harness.sampling.categorical`). Temperature and nucleus are
applied to the token distribution first; they are checked once, when :func:`generate` builds the
settings. A sampler asks the family for whatever depends on what a unit is (Prime's sub-tokens or
whole tokens) and never which family it drives. The model is put in eval mode (and restored
afterwards) and nothing records gradients.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from harness.errors import PrimebenchError
from harness.models import family_class
from harness.models.base import ModelFamily
from harness.registry import Registry
from harness.resources import check_inference_fits
from harness.sampling import ancestral, first_hitting
from harness.sampling.autoregressive import run_autoregressive
from harness.sampling.blocks import run_by_blocks
from harness.sampling.categorical import METHODS, check_nucleus, check_temperature, parse_dtype
from harness.sampling.correction import CorrectionSettings, run_self_correction
from harness.sampling.maskgit import run_maskgit
from harness.sampling.posterior import run_posterior
from harness.sampling.remdm import RemaskSettings, run_remdm
from harness.sampling.scores import SEDD_T_END, run_euler, run_tweedie
from harness.sampling.settings import DRAWS, NOISE_REMOVAL, BatchResult, SampleOutput, SamplerSettings
from harness.sampling.units import UnitModel


@dataclass(frozen=True)
class SamplerSpec:
    """A registered sampler and whether it takes a number of steps; families list the samplers they
    support (``model.samplers``), so a sampler never asks which family it drives."""

    name: str
    uses_steps: bool
    run: Callable[..., BatchResult]
    about: str
    notes: dict[str, str] = field(default_factory=dict)
    #: the forward processes (:mod:`harness.processes`, or ``none``) whose models it can draw from
    processes: tuple[str, ...] = ("absorbing",)
    #: where its grid ends and how it fills what is left, when :func:`generate` is not told
    t_end: float = 0.0
    noise_removal: str = "argmax"
    #: it runs on a time grid (its record holds the grid, ``t_end`` and ``noise_removal``)
    on_grid: bool = False
    #: its step has the ``--draw two-stage|joint`` choice (recorded)
    draw_choice: bool = False


SAMPLERS: Registry[SamplerSpec] = Registry("sampler")
for _spec in (
    SamplerSpec(
        "ancestral",
        True,
        ancestral.run_ancestral,
        "T-step ancestral sampler on t_k = 1 - k(1 - t_end)/T, exact per-sample caching",
        ancestral.NOTES,
        on_grid=True,
        draw_choice=True,
    ),
    SamplerSpec(
        "first-hitting",
        False,
        first_hitting.run_first_hitting,
        "one masked unit per denoiser call at its first-hitting time (Zheng et al. Alg. 1)",
        first_hitting.NOTES,
    ),
    SamplerSpec(
        "maskgit", True, run_maskgit, "confidence-ordered parallel decoding, ceil(M k / T) tokens decoded after step k"
    ),
    SamplerSpec(
        "remdm",
        True,
        run_remdm,
        "ReMDM: the ancestral grid with decoded tokens remasked (cap, rescale, conf or loop schedule of sigma)",
        on_grid=True,
        draw_choice=True,
    ),
    SamplerSpec(
        "posterior",
        True,
        run_posterior,
        "T steps, every position redrawn from q(x_s | x_t, x_theta) (uniform and interpolating processes)",
        processes=("uniform", "interpolating", "hybrid"),
        on_grid=True,
        draw_choice=True,
    ),
    SamplerSpec(
        "self-correction",
        True,
        run_self_correction,
        "the posterior sampler's T steps, then GIDD's self-correction: the most confident disagreeing "
        "token replaced, one step at a time, at a fixed small t",
        processes=("uniform", "interpolating", "hybrid"),
        on_grid=True,
        draw_choice=True,
    ),
    SamplerSpec(
        "tweedie",
        True,
        run_tweedie,
        "SEDD's Tweedie tau-leaping (analytic) steps on the concrete scores, then its denoising step",
        processes=("absorbing", "uniform"),
        t_end=SEDD_T_END,
        noise_removal="sample",
        on_grid=True,
    ),
    SamplerSpec(
        "euler",
        True,
        run_euler,
        "SEDD's Euler steps of the reverse rates on the concrete scores, then its denoising step",
        processes=("absorbing", "uniform"),
        t_end=SEDD_T_END,
        noise_removal="sample",
        on_grid=True,
    ),
    SamplerSpec(
        "autoregressive",
        False,
        run_autoregressive,
        "left to right from a prefix or BOS, L - P calls",
        processes=("none",),
    ),
):
    SAMPLERS.register(_spec.name, _spec)


def _samplers_of(model) -> tuple[str, ...]:

    if not isinstance(model, ModelFamily):
        raise PrimebenchError(
            f"no sampler knows the model {type(model).__name__}",
            fix="sample from a registered model family (harness.models.family_names())",
        )
    return model.samplers


def sampler_for(model) -> str:
    """The default sampler of a model's family: ``autoregressive`` for the ARM, else ``ancestral``."""
    _samplers_of(model)
    return model.default_sampler


def token_by_token_sampler(model) -> str:
    """The one-unit-per-call sampler of a family (the precision audit's control): ARM or first-hitting."""
    _samplers_of(model)
    return model.token_by_token_sampler


def samplers_for(family: str) -> list[str]:
    """Names of the registered samplers that support ``family``."""

    return sorted(family_class(family).samplers)


def get_sampler(name: str, model) -> SamplerSpec:
    """The registered sampler ``name``, checked against the model's family (clear error otherwise)."""
    spec = SAMPLERS.get(name)
    if name not in _samplers_of(model) or model.forward_process not in spec.processes:
        raise PrimebenchError(
            f"sampler {name!r} does not support the {model.family!r} model family",
            fix=f"samplers for {model.family}: {', '.join(sorted(model.samplers))}",
        )
    return spec


def _generator(generator: torch.Generator | int | None, device: torch.device) -> torch.Generator | None:
    if generator is None or isinstance(generator, torch.Generator):
        return generator
    if isinstance(generator, bool) or not isinstance(generator, int):
        raise PrimebenchError(f"generator must be a torch.Generator, an int seed or None, got {generator!r}")
    return torch.Generator(device=device).manual_seed(generator)


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PrimebenchError(f"{name} must be a positive integer, got {value!r}")
    return value


def _check_prefix(model, prefix, bos_id, spec: SamplerSpec, num_samples: int, L: int) -> torch.Tensor | None:
    """Validate ``prefix`` (N or 1, P) for samples of ``L`` tokens; the ARM falls back to one BOS
    token (an empty prefix when it has its own start token)."""
    C = int(model.vocab_size)
    if spec.name == "autoregressive":
        if prefix is None and bos_id is None and model.start_token:
            return torch.zeros((1, 0), dtype=torch.long)  # the model prepends its own start id
        if prefix is None and bos_id is None:
            raise PrimebenchError(
                "the autoregressive sampler needs a first token: the ARM does not know its BOS id",
                fix="pass bos_id= (the tokenizer's BOS, e.g. tokenizer.bos_id) or prefix=",
            )
        if prefix is not None and bos_id is not None:
            raise PrimebenchError(
                "pass either prefix= or bos_id=, not both", fix="put the BOS token at the start of the prefix"
            )
        if prefix is None:
            if isinstance(bos_id, bool) or not isinstance(bos_id, int) or not 0 <= bos_id < C:
                raise PrimebenchError(f"bos_id must be a token id in [0, {C}), got {bos_id!r}")
            prefix = torch.full((1, 1), bos_id, dtype=torch.long)
    if prefix is None:
        return None
    prefix = torch.as_tensor(prefix)
    if prefix.dim() != 2 or prefix.dtype != torch.long or prefix.shape[0] not in (1, num_samples):
        raise PrimebenchError(
            f"prefix must be an int64 tensor of shape (1 or num_samples={num_samples}, P), "
            f"got {prefix.dtype} {tuple(prefix.shape)}",
            fix="pass torch.tensor([[id, id, ...]]) (one prefix for all) or one row per sample",
        )
    if prefix.shape[1] >= L:
        raise PrimebenchError(
            f"prefix length {prefix.shape[1]} leaves nothing to generate (seq_len={L})",
            fix=f"use a prefix shorter than {L} tokens",
        )
    if prefix.numel() and (int(prefix.min()) < 0 or int(prefix.max()) >= C):
        raise PrimebenchError(
            f"prefix ids must lie in [0, {C}), got [{int(prefix.min())}, {int(prefix.max())}]",
            fix="tokenize the prefix with the model's tokenizer",
        )
    return prefix


def _canvas(model, seq_len) -> int:
    """The samples' length: ``seq_len`` (1 .. the model's length), default the model's."""
    most = int(model.seq_len)
    if seq_len is None:
        return most
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or not 1 <= seq_len <= most:
        raise PrimebenchError(
            f"seq_len must be an integer in [1, {most}] (the model's length), got {seq_len!r}",
            fix=f"use seq_len <= {most}",
        )
    return seq_len


def _own_settings(value, cls, spec: SamplerSpec, owner: str, what: str):
    """The checked settings of the one sampler that has them (``owner``): ``value`` as ``cls`` (or its
    fields as a dict; None: the defaults); refused for any other sampler, None there."""
    if spec.name != owner:
        if value is not None:
            raise PrimebenchError(
                f"{what} settings apply to the {owner} sampler, not {spec.name!r}",
                fix=f"pass sampler='{owner}' (--sampler {owner}) or drop them",
            )
        return None
    if isinstance(value, dict):
        try:
            value = cls(**value)
        except TypeError:
            names = ", ".join(f.name for f in dataclasses.fields(cls))
            raise PrimebenchError(f"unknown {what} setting in {sorted(value)}", fix=f"use {names}") from None
    return (value or cls()).checked()


def _settings(model, spec: SamplerSpec, knobs: dict[str, Any]) -> SamplerSettings:
    """The checked :class:`SamplerSettings` of :func:`generate`'s sampling keywords ``knobs``."""
    steps, draw, L = knobs["steps"], knobs["draw"], _canvas(model, knobs["seq_len"])
    if spec.uses_steps:
        default = model.sampling_block_size or L  # T per block for block-by-block sampling
        steps = int(default) if steps is None else _positive_int("steps", steps)
    elif steps is not None:
        raise PrimebenchError(
            f"sampler {spec.name!r} takes one step per generated unit; steps={steps!r} does not apply",
            fix="leave steps unset for first-hitting and autoregressive sampling",
        )
    temperature = check_temperature(knobs["temperature"])  # the one check: the draws shape unchecked
    nucleus_p, nucleus_rule = check_nucleus(knobs["nucleus_p"], knobs["nucleus_rule"])
    method, noise_removal, t_end, cache = knobs["method"], knobs["noise_removal"], knobs["t_end"], knobs["cache"]
    noise_removal = spec.noise_removal if noise_removal is None else noise_removal
    t_end = spec.t_end if t_end is None else t_end
    if method not in METHODS:
        raise PrimebenchError(f"unknown categorical sampling method {method!r}", fix=f"use one of {', '.join(METHODS)}")
    if noise_removal not in NOISE_REMOVAL:
        raise PrimebenchError(f"noise_removal must be one of {NOISE_REMOVAL}, got {noise_removal!r}")
    if not (isinstance(t_end, (int, float)) and 0.0 <= t_end < 1.0):
        raise PrimebenchError(f"t_end must lie in [0, 1), got {t_end!r}", fix="0 (default) or MDLM's 1e-5")
    if draw not in DRAWS:
        raise PrimebenchError(f"unknown draw {draw!r}", fix=f"use one of {', '.join(DRAWS)}")
    if cache is None:  # the two-stage draw's cache is exact for every network
        cache = draw == "two-stage" or not bool(model.time_conditioning)
    remask = _own_settings(knobs["remask"], RemaskSettings, spec, "remdm", "remasking")
    correction = _own_settings(knobs["correction"], CorrectionSettings, spec, "self-correction", "self-correction")
    return SamplerSettings(
        steps=steps,
        temperature=temperature,
        nucleus_p=nucleus_p,
        dtype=parse_dtype(knobs["dtype"]),
        method=method,
        noise_removal=noise_removal,
        cache=bool(cache) and spec.name in ("ancestral", "remdm"),
        t_end=float(t_end),
        nucleus_rule=nucleus_rule,
        draw=draw,
        seq_len=L,
        remask=remask,
        correction=correction,
    )


def _merge(batches: list[BatchResult], wall: list[float]):
    stats: dict[str, Any] = {}
    for key in batches[0].counts:
        stats[key] = sum(b.counts[key] for b in batches)
    for key in batches[0].per_sample:
        stats[key] = torch.cat([b.per_sample[key] for b in batches])
    per_sample_wall = torch.cat(
        [torch.full((b.tokens.shape[0],), w / b.tokens.shape[0], dtype=torch.float64) for b, w in zip(batches, wall)]
    )
    cat = lambda name: torch.cat([getattr(b, name).cpu() for b in batches])  # noqa: E731
    return cat("tokens"), cat("nfe"), cat("idle_steps"), cat("steps"), per_sample_wall, stats


def _run_batches(model, spec: SamplerSpec, settings: SamplerSettings, gen, prefix, num_samples: int, batch_size: int):
    """Each batch of at most ``batch_size`` rows through the sampler, in eval mode without gradients
    (the model's mode restored afterwards): ``(batch results, wall seconds of each)``."""
    target = model if spec.name == "autoregressive" else UnitModel(model, settings.seq_len)
    run = spec.run
    if model.sampling_block_size and spec.name != "autoregressive":
        run, target = partial(run_by_blocks, spec.run), model
    device = model.device
    was_training = model.training
    model.eval()
    batches, wall = [], []
    try:
        with torch.no_grad():
            for start in range(0, num_samples, batch_size):
                rows = min(batch_size, num_samples - start)
                rows_prefix = None
                if prefix is not None:
                    rows_prefix = prefix.expand(rows, -1) if prefix.shape[0] == 1 else prefix[start : start + rows]
                    rows_prefix = rows_prefix.to(device)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                began = time.perf_counter()
                batches.append(run(target, rows, settings, gen, rows_prefix))
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                wall.append(time.perf_counter() - began)
    finally:
        model.train(was_training)
    return batches, wall


def _protocol(model, spec: SamplerSpec, settings: SamplerSettings, run: dict[str, Any]) -> dict[str, Any]:
    """Every setting of a :func:`generate` call that can move a downstream number; ``run`` holds the
    call's own facts (num_samples, batch_size, prefix_len, bos_id, seeded)."""
    time_cond = bool(model.time_conditioning)
    grid_sampler = spec.on_grid
    protocol = {
        "sampler": spec.name,
        "family": model.family,
        "forward_process": model.forward_process,
        "steps": settings.steps if spec.uses_steps else "one per generated unit",
        "dtype": str(settings.dtype).removeprefix("torch."),
        "method": settings.method,
        "draw": settings.draw if spec.draw_choice else None,
        "temperature": settings.temperature,
        "nucleus_p": settings.nucleus_p,
        "nucleus_rule": settings.nucleus_rule if settings.nucleus_p < 1.0 else None,
        "noise_removal": settings.noise_removal if grid_sampler else None,
        "cache": settings.cache,
        "cache_exact": (settings.draw == "two-stage" or not time_cond) if settings.cache else None,
        "grid": (
            {"kind": "uniform", "t_start": 1.0, "t_end": settings.t_end, "schedule": model.schedule.name}
            if grid_sampler
            else None
        ),
        "num_samples": run["num_samples"],
        "batch_size": run["batch_size"],
        "seq_len": int(settings.seq_len),
        "vocab_size": int(model.vocab_size),
        "ell": int(model.units_per_token),
        "carry_over": model.protocol().get("carry_over"),
        "time_conditioning": time_cond,
        "prefix_len": run["prefix_len"],
        "bos_id": run["bos_id"] if spec.name == "autoregressive" else None,
        "seeded": run["seeded"],
        "device": str(model.device),
        "remask": settings.remask.protocol() if settings.remask is not None else None,
        "correction": settings.correction.protocol() if settings.correction is not None else None,
    }
    if model.sampling_block_size and spec.name != "autoregressive":
        protocol["block_size"] = int(model.sampling_block_size)  # steps, NFE and idle steps are per block, summed
    return protocol


def generate(
    model,
    sampler: str | None = None,
    *,
    num_samples: int,
    batch_size: int = 16,
    steps: int | None = None,
    temperature: float = 1.0,
    nucleus_p: float = 1.0,
    nucleus_rule: str = "cross",
    dtype: str | torch.dtype = "float64",
    method: str = "gumbel",
    noise_removal: str | None = None,
    cache: bool | None = None,
    generator: torch.Generator | int | None = None,
    prefix: torch.Tensor | None = None,
    bos_id: int | None = None,
    t_end: float | None = None,
    draw: str = "two-stage",
    seq_len: int | None = None,
    remask: RemaskSettings | dict | None = None,
    correction: CorrectionSettings | dict | None = None,
) -> SampleOutput:
    """Draw ``num_samples`` sequences of ``seq_len`` tokens (default the model's length L), in batches
    of ``batch_size``.

    ``model``: a registered family (its ``samplers`` list the names it supports). ``sampler``: a
    registered name, default :func:`sampler_for` (ancestral; autoregressive for the ARM).
    ``steps``: T for ancestral and maskgit (default L; per block, default the block size, for a
    family sampled block by block, :mod:`harness.sampling.blocks`); must be unset for the token-by-token
    samplers. ``temperature`` (> 0) and ``nucleus_p`` in (0, 1] with ``nucleus_rule`` shape the
    token distribution before each draw. ``dtype``: the precision of every draw; ``method``: that
    of every draw made by :func:`harness.sampling.sample_categorical` (the two-stage draw's tokens
    use the inverse CDF). ``cache``: None means on, except for time-conditioned networks under the
    joint draw (reuse would use a stale t); True forces it there and records ``cache_exact=False``.
    ``generator``: a torch.Generator on the model's device or an int seed (same seed -> same
    samples). ``prefix``: (N or 1, P) token ids kept fixed at the first P positions (never masked,
    never changed). ``bos_id``: the ARM's first token when no prefix is given (other samplers
    ignore it). ``t_end``: where the ancestral grid stops (then ``noise_removal`` fills the rest);
    None: the sampler's own (0; SEDD's 1e-5 for ``tweedie`` and ``euler``). ``noise_removal``:
    ``argmax`` or ``sample``; None: the sampler's own (``argmax``; ``sample`` for the score samplers,
    as SEDD's denoiser draws).
    ``draw``: the ancestral and posterior steps' draw, ``two-stage`` (reveal, then token by inverse
    CDF; the posterior sampler: pick a part of the posterior's mixture, then a token; exact and
    cheap) or ``joint`` (the family's joint draw with ``method``, MDLM's over C + 1 outcomes; the
    whole posterior for the posterior sampler; the reference for audits). ``seq_len``: a shorter
    canvas than the model's (the model is not changed). ``remask``: ReMDM's settings for the
    ``remdm`` sampler (a :class:`~harness.sampling.remdm.RemaskSettings` or its fields as a dict;
    None: the cap schedule at ReMDM's eta), refused for any other sampler. ``correction``: GIDD's
    settings for the ``self-correction`` sampler (a :class:`~harness.sampling.correction.CorrectionSettings`
    or its fields as a dict; None: GIDD's defaults), refused for any other sampler.
    The last partial batch is sampled too; ``wall_s`` is per sample (batch time / batch size).

    Returns a :class:`~harness.sampling.settings.SampleOutput`: ``tokens`` (num_samples, L) ids in
    [0, C), per-sample ``nfe``, ``idle_steps``, ``steps`` and ``wall_s`` (num_samples,), ``stats``
    and the ``protocol`` of every setting.
    """
    spec = get_sampler(sampler or sampler_for(model), model)
    num_samples = _positive_int("num_samples", num_samples)
    batch_size = _positive_int("batch_size", batch_size)
    knobs = dict(steps=steps, temperature=temperature, nucleus_p=nucleus_p, nucleus_rule=nucleus_rule, dtype=dtype)
    knobs |= dict(method=method, noise_removal=noise_removal, cache=cache, t_end=t_end, draw=draw, seq_len=seq_len)
    knobs["remask"] = remask
    knobs["correction"] = correction
    settings = _settings(model, spec, knobs)
    prefix = _check_prefix(model, prefix, bos_id, spec, num_samples, settings.seq_len)
    check_inference_fits(
        model,
        batch=min(batch_size, num_samples),
        seq_len=settings.seq_len,
        doing="sampling",
        sized_by="--batch-size or the model's sequence length",
        float64_logits=settings.dtype == torch.float64,
    )
    gen = _generator(generator, model.device)
    batches, wall = _run_batches(model, spec, settings, gen, prefix, num_samples, batch_size)
    tokens, nfe, idle, steps_done, wall_s, stats = _merge(batches, wall)
    if model.may_decode_invalid_codes:
        stats.update(spec.notes)
    facts = dict(num_samples=num_samples, batch_size=batch_size, bos_id=bos_id, seeded=gen is not None)
    protocol = _protocol(model, spec, settings, facts | {"prefix_len": 0 if prefix is None else int(prefix.shape[1])})
    return SampleOutput(
        tokens=tokens, nfe=nfe, idle_steps=idle, steps=steps_done, wall_s=wall_s, stats=stats, protocol=protocol
    )


__all__ = [
    "SAMPLERS",
    "SamplerSpec",
    "generate",
    "get_sampler",
    "sampler_for",
    "samplers_for",
    "token_by_token_sampler",
]
