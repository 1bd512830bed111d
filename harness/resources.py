"""Memory a setting will need, estimated before any work starts, and refused when it cannot fit.

A config can ask for more memory than any machine has (``data.seq_len=100000`` on a tiny model: its
attention scores alone are hundreds of gigabytes), and the operating system then kills the process
minutes later, or it swaps until nothing answers. :func:`training_step_bytes` estimates a training
step from the config: the weights with their gradients, AdamW's two moments and the EMA copy, the
activations every layer keeps for the backward pass (the attention probabilities of each head among
them, since CPU attention with a mask materialises them), and the logits over the vocabulary with
their log-softmax and gradient. :func:`check_fits` compares it with the memory the machine has
(``MemTotal``; ``PRIMEBENCH_MAX_MEMORY`` lowers the limit) and refuses, naming the estimate, the
limit and the settings that size it, when it exceeds the limit.

The estimate is an upper-side model, not a measurement: ``primebench bench`` prints it beside the
measured peak of its training-step stage, so its error is visible.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import torch

from harness.backbone import network_shape
from harness.errors import ConfigError

FLOAT = 4  # bytes of a float32
#: the environment variable that sets the memory limit (bytes, or with a suffix: 8G, 512M)
LIMIT_VARIABLE = "PRIMEBENCH_MAX_MEMORY"


@dataclass(frozen=True)
class Estimate:
    """Bytes by part, and their total."""

    parts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def describe(self) -> str:
        return ", ".join(f"{k} {_size(v)}" for k, v in sorted(self.parts.items(), key=lambda kv: -kv[1]))


def _size(n: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n / 2**10:.0f} KiB"


def backbone_parameters(*, d: int, layers: int, vocab_in: int, vocab_out: int, mlp_ratio: int, cond_dim: int) -> int:
    """Parameters of the shared backbone: embeddings, per layer attention (4 d^2), MLP (2 r d^2) and
    adaLN (6 d cond), the output layer."""
    per_layer = 4 * d * d + 2 * mlp_ratio * d * d + 6 * d * cond_dim + 8 * d
    return layers * per_layer + (vocab_in + vocab_out) * d + vocab_out


def training_step_bytes(
    *,
    batch: int,
    seq_len: int,
    d: int,
    layers: int,
    heads: int,
    vocab_in: int,
    vocab_out: int,
    mlp_ratio: int = 4,
    cond_dim: int = 64,
    attention_matrix: bool = True,
) -> Estimate:
    """The estimate of one training step (module docstring); ``batch`` is the micro-batch one process
    runs at a time. ``attention_matrix``: the L x L attention probabilities are kept per head and layer
    (CPU attention); False for a GPU's fused attention, which keeps none."""
    params = backbone_parameters(
        d=d, layers=layers, vocab_in=vocab_in, vocab_out=vocab_out, mlp_ratio=mlp_ratio, cond_dim=cond_dim
    )
    tokens = batch * seq_len
    per_layer = tokens * d * (14 + 3 * mlp_ratio) + (2 * batch * heads * seq_len * seq_len if attention_matrix else 0)
    return Estimate(
        {
            "weights, gradients, AdamW moments, EMA": 5 * params * FLOAT,
            "activations kept for the backward pass": layers * per_layer * FLOAT,
            "logits, log-softmax and their gradient": 4 * tokens * vocab_out * FLOAT,
        }
    )


def inference_step_bytes(
    *,
    batch: int,
    positions: int,
    vocab_out: int,
    weights: int,
    d: int | None = None,
    layers: int | None = None,
    heads: int | None = None,
    mlp_ratio: int = 4,
    attention_matrix: bool = True,
    float64_logits: bool = False,
) -> Estimate:
    """One forward pass without gradients (an evaluation batch, a sampler step): ``weights`` bytes of
    parameters, the largest layer's transient activations (its input, q, k, v, the attention output,
    the MLP's hidden features before and after the activation, and with ``attention_matrix`` each
    head's L x L scores and probabilities; only one layer's are alive at a time), and the logits over
    the vocabulary with their log-softmax and a working copy, plus two float64 copies when the sampler
    draws in float64. ``d``, ``layers``, ``heads`` None: the network's sizes are unknown and only the
    weights and the logits are counted."""
    tokens = batch * positions
    parts = {
        "weights": int(weights),
        "logits over the vocabulary": tokens * vocab_out * (3 * FLOAT + (2 * 8 if float64_logits else 0)),
    }
    if d and layers and heads:
        parts["one layer's activations"] = FLOAT * (
            tokens * d * (5 + 2 * mlp_ratio) + (2 * batch * heads * positions * positions if attention_matrix else 0)
        )
    return Estimate(parts)


def inference_for_model(model, *, batch: int, seq_len: int, float64_logits: bool = False) -> Estimate:
    """:func:`inference_step_bytes` for a loaded family ``model`` scoring or sampling ``batch`` rows of
    ``seq_len`` tokens (its network reads ``network_positions_per_token`` positions per token)."""

    shape = network_shape(model.backbone) or {}
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return inference_step_bytes(
        batch=batch,
        positions=seq_len * int(model.network_positions_per_token),
        vocab_out=int(model.vocab_size),
        weights=weights,
        d=shape.get("d_model"),
        layers=shape.get("n_layers"),
        heads=shape.get("n_heads"),
        mlp_ratio=int(shape.get("mlp_ratio", 4)),
        attention_matrix=model.device.type != "cuda",
        float64_logits=float64_logits,
    )


def check_inference_fits(
    model, *, batch: int, seq_len: int, doing: str, sized_by: str, float64_logits: bool = False
) -> None:
    """Refuse, before the first batch, ``doing`` ``batch`` rows of ``seq_len`` tokens with ``model``
    when :func:`inference_for_model` exceeds the memory limit (the evaluators' and samplers' check)."""
    check_fits(
        inference_for_model(model, batch=batch, seq_len=seq_len, float64_logits=float64_logits),
        what=f"{doing} batches of {batch} rows of {seq_len} tokens",
        sized_by=sized_by,
        device=str(model.device),
    )


def estimate_for_config(cfg, vocab_size: int, *, world: int = 1, device: str = "cpu") -> Estimate:
    """:func:`training_step_bytes` for a training config on one of ``world`` processes (its micro-batch:
    the global batch over the processes and the accumulation steps; the family's input vocabulary read
    as C + 1 at most, Prime's sub-tokens are smaller)."""

    model = cfg.model
    keys = dataclasses.asdict(model)
    micro = max(1, cfg.train.batch_size // max(1, world) // max(1, cfg.train.grad_accum))
    return training_step_bytes(
        batch=micro,
        seq_len=cfg.data.seq_len,
        d=model.d_model,
        layers=model.n_layers,
        heads=model.n_heads,
        vocab_in=vocab_size + 1,
        vocab_out=vocab_size,
        mlp_ratio=int(keys.get("mlp_ratio", 4)),
        cond_dim=int(keys.get("cond_dim", 64)),
        attention_matrix=not str(device).startswith("cuda"),
    )


def memory_limit(device: str = "cpu") -> tuple[int, str]:
    """``(bytes, where it comes from)``: ``PRIMEBENCH_MAX_MEMORY`` when set, else a CUDA device's
    memory, else the machine's ``MemTotal``, else 0 (unknown: nothing is refused)."""
    raw = os.environ.get(LIMIT_VARIABLE, "").strip()
    if raw:
        scale = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}.get(raw[-1:].upper(), 1)
        number = raw[:-1] if scale != 1 else raw
        try:
            value = float(number)
        except ValueError:
            raise ConfigError(
                f"{LIMIT_VARIABLE}={raw!r} is not a size", fix=f"set {LIMIT_VARIABLE} to bytes or e.g. 8G, 512M"
            ) from None
        if not value > 0:
            raise ConfigError(f"{LIMIT_VARIABLE}={raw!r} must be positive", fix=f"unset {LIMIT_VARIABLE} or raise it")
        return int(value * scale), f"{LIMIT_VARIABLE}={raw}"
    if str(device).startswith("cuda"):
        index = torch.device(device).index
        props = torch.cuda.get_device_properties(index if index is not None else torch.cuda.current_device())
        return int(props.total_memory), f"the memory of {device} ({props.name})"
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024, "the machine's memory (MemTotal)"
    except OSError:
        pass
    return 0, "unknown"


def check_fits(estimate: Estimate, *, what: str, sized_by: str, device: str = "cpu") -> None:
    """Refuse ``what`` when ``estimate`` exceeds :func:`memory_limit`, before any work starts."""
    limit, source = memory_limit(device)
    if limit and estimate.total > limit:
        raise ConfigError(
            f"{what} needs about {_size(estimate.total)} of memory ({estimate.describe()}), more than "
            f"{_size(limit)}, {source}",
            fix=f"lower {sized_by}, or raise the limit ({LIMIT_VARIABLE}) on a machine that has the memory",
        )


__all__ = [
    "Estimate",
    "LIMIT_VARIABLE",
    "backbone_parameters",
    "check_fits",
    "check_inference_fits",
    "estimate_for_config",
    "inference_for_model",
    "inference_step_bytes",
    "memory_limit",
    "training_step_bytes",
]
