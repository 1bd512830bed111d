"""``primebench bench --preset paper-shapes``: every family at the papers' shape, for the GPU the users
have, in one command that fits five minutes on one H100.

The shape is DiT-small (12 layers, width 768, 12 heads), L = 1,024, GPT-2's 50,257 tokens, random
weights, bf16 autocast on CUDA (float32 on a CPU). On a CPU the same command runs at tiny shapes
(``--preset tiny-shapes``, what the test suite runs), so it cannot rot. Figures:

* the ceiling: a GEMM of the DiT block's shapes in the run's compute dtype, measured in the same run;
* the reference row: ``nn.TransformerEncoder`` at the same shape (its fused inference path), and our
  backbone's forward beside it, both as tokens/s and as a fraction of the ceiling; with
  ``compile=True`` also our forward under ``torch.compile`` (compilation excluded from the timing);
* training, per family: tokens/s of a whole step (loss, backward, clip, AdamW) and MFU, the step's
  FLOPs counted from the shapes by ``torch.utils.flop_counter`` over the ceiling;
* ``eval ppl``: rows/s of one Monte-Carlo sample per family, against the ARM's exact pass;
* sampling: MDLM's ancestral sampler in samples/s at T = 128 and 1,024, float32 and float64 draws;
  the tensor reads to the host per step (each a synchronisation on a GPU; counted on any device by
  :class:`harness.bench.measure.HostReads`), and on CUDA the synchronisations the driver reports
  (``torch.cuda.set_sync_debug_mode``);
* peak memory of each figure (CUDA's allocator; the process's RSS on a CPU).

The record's protocol says which scaled-dot-product attention kernel ran (flash, memory-efficient,
math or the CPU's), the dtype, the shapes and the card.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from harness.bench.measure import (
    Figure,
    PeakRSS,
    block_matmuls,
    gemm_throughput,
    host_reads_per_step,
    median_time,
    sync_for,
)
from harness.bench.network import backbone_flops
from harness.models import build_model, family_class, family_names
from harness.sampling import generate
from harness.training import make_optimizer


@dataclass(frozen=True)
class Shape:
    """A bench shape: the DiT's width ``d``, ``layers``, ``heads``; length ``L``; ``C`` tokens;
    ``batch`` rows per training step and per NLL call; ``samples`` per sampler run; ``steps``: the T of
    the sampler figures; ``dtype``: the compute dtype (autocast on CUDA)."""

    name: str
    d: int
    layers: int
    heads: int
    L: int
    C: int
    batch: int
    samples: int
    steps: tuple[int, ...]
    dtype: str


PRESETS = {
    "paper-shapes": Shape("paper-shapes", 768, 12, 12, 1024, 50257, 16, 8, (128, 1024), "bfloat16"),
    "tiny-shapes": Shape("tiny-shapes", 64, 2, 4, 64, 1000, 4, 2, (8, 32), "float32"),
}


def _autocast(device: str, dtype: str):
    if str(device).startswith("cuda") and dtype != "float32":
        return torch.autocast("cuda", dtype=getattr(torch, dtype))
    return contextlib.nullcontext()


class _Peak:
    """Peak memory of a block: CUDA's allocator on a GPU, the process's RSS on a CPU (MiB)."""

    def __init__(self, device: str):
        self.cuda = str(device).startswith("cuda")
        self.rss = None if self.cuda else PeakRSS()
        self.mib = 0.0

    def __enter__(self):
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        else:
            self.rss.__enter__()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            self.mib = torch.cuda.max_memory_allocated() / 2**20
        else:
            self.rss.__exit__(*exc)
            self.mib = self.rss.peak / 2**20
        return False


def sdpa_kernel_name(device: str, dtype: str, heads: int, head_dim: int, L: int) -> str:
    """Which scaled-dot-product attention kernel runs for this shape: the first of flash,
    memory-efficient, cuDNN and math that accepts it on CUDA (the order of PyTorch's dispatch), or the
    CPU's flash kernel."""
    if not str(device).startswith("cuda"):
        return "cpu (aten::_scaled_dot_product_flash_attention_for_cpu)"
    from torch.nn.attention import SDPBackend, sdpa_kernel  # deferred: only on CUDA

    q = torch.randn(1, heads, L, head_dim, device=device, dtype=getattr(torch, dtype))
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        try:
            with sdpa_kernel([backend]):
                F.scaled_dot_product_attention(q, q, q)
            return backend.name.lower()
        except RuntimeError:
            continue
    return "math"


def count_flops(fn: Callable[[], Any]) -> int:
    """FLOPs of one call of ``fn``, counted from the shapes of its matmuls and attention
    (``torch.utils.flop_counter``)."""
    from torch.utils.flop_counter import FlopCounterMode  # deferred: only the bench counts FLOPs

    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def _families() -> list[tuple[str, dict]]:
    names = sorted(family_names(), key=lambda n: (family_class(n).table_order, n))
    return [(n, family_class(n).bench_variants()[0]) for n in names]


def _model(shape: Shape, family: str, extra: dict, device: str):
    """``family`` (with its bench variant's keys ``extra``) at ``shape``, random weights, on ``device``."""
    return build_model(
        family,
        vocab_size=shape.C,
        seq_len=shape.L,
        d_model=shape.d,
        n_layers=shape.layers,
        n_heads=shape.heads,
        **extra,
    ).to(device)


def _label(family: str, extra: dict) -> str:
    return family + "".join(f" {k.split('_')[0]}={v}" for k, v in extra.items())


def _forward_figures(shape: Shape, device: str, ceiling: float, repeats: int, compile_: bool) -> list[Figure]:
    B, L, d = shape.batch, shape.L, shape.d
    ref = (
        nn.TransformerEncoder(
            nn.TransformerEncoderLayer(
                d, shape.heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
            ),
            shape.layers,
            enable_nested_tensor=False,
        )
        .to(device)
        .eval()
    )
    model = _model(shape, "mdlm", {}, device).eval()
    net = model.backbone
    ids = torch.randint(0, shape.C, (B, L), device=device)
    t = torch.rand(B, device=device)
    h = torch.randn(B, L, d, device=device)
    sync = sync_for(device)
    out = []
    with torch.no_grad(), _autocast(device, shape.dtype):
        # the same count for both (torch's fused encoder path is invisible to the FLOP counter)
        theirs_flops, ours_flops = (
            backbone_flops(B, L, d, shape.layers, 0),
            backbone_flops(B, L, d, shape.layers, shape.C),
        )
        with _Peak(device) as peak:
            theirs = median_time(lambda: ref(h), repeats, sync=sync)
        out.append(
            Figure(
                "reference: nn.TransformerEncoder forward",
                B * L / theirs,
                "tokens/s",
                None,
                None,
                {"fraction_of_ceiling": theirs_flops / theirs / ceiling, "peak_mib": peak.mib},
            )
        )
        with _Peak(device) as peak:
            ours = median_time(lambda: net(ids, t), repeats, sync=sync)
        frac = ours_flops / ours / ceiling
        out.append(
            Figure(
                "backbone forward (MDLM's DiT)",
                B * L / ours,
                "tokens/s",
                None,
                None,
                {"fraction_of_ceiling": frac, "gflops": ours_flops / 1e9, "peak_mib": peak.mib},
            )
        )
        ratio = frac / (theirs_flops / theirs / ceiling)
        out.append(
            Figure("backbone over nn.TransformerEncoder (fraction of ceiling)", ratio, "ratio", ">= 1.00", ratio >= 1.0)
        )
        if compile_:
            compiled = torch.compile(net)
            began = time.perf_counter()
            compiled(ids, t)
            sync()
            build = time.perf_counter() - began
            fast = median_time(lambda: compiled(ids, t), repeats, sync=sync)
            out.append(
                Figure(
                    "backbone forward, torch.compile",
                    B * L / fast,
                    "tokens/s",
                    None,
                    None,
                    {"speedup": ours / fast, "compile_seconds": build},
                )
            )
    return out


def _train_figures(shape: Shape, device: str, ceiling: float, repeats: int) -> list[Figure]:
    out = []
    sync = sync_for(device)
    for family, extra in _families():
        model = _model(shape, family, extra, device).train()
        opt = make_optimizer(model, lr=3e-4, weight_decay=0.0)
        x = torch.randint(0, shape.C, (shape.batch, shape.L), device=device)
        g = torch.Generator(device=device).manual_seed(0)

        def step(model=model, opt=opt, x=x, g=g):
            opt.zero_grad(set_to_none=True)
            with _autocast(device, shape.dtype):
                loss = model.loss(x, generator=g)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
            opt.step()

        flops = count_flops(step)
        with _Peak(device) as peak:
            seconds = median_time(step, repeats, sync=sync)
        out.append(
            Figure(
                f"train {_label(family, extra)}: tokens/s",
                shape.batch * shape.L / seconds,
                "tokens/s",
                None,
                None,
                {
                    "mfu": flops / seconds / ceiling,
                    "step_tflops": flops / 1e12,
                    "seconds": seconds,
                    "peak_mib": peak.mib,
                },
            )
        )
        del model, opt
    return out


def _nll_figures(shape: Shape, device: str, repeats: int) -> list[Figure]:
    sync = sync_for(device)
    x0 = torch.randint(0, shape.C, (shape.batch, shape.L), device=device)
    rates: dict[str, tuple[float, float]] = {}
    exact = None
    for family, extra in _families():
        model = _model(shape, family, extra, device).eval()

        def run(model=model):
            with torch.no_grad(), _autocast(device, shape.dtype):
                if model.uses_time_sampler:
                    model.nll(x0, num_samples=1, generator=torch.Generator(device=device).manual_seed(1))
                else:
                    model.nll(x0)

        with _Peak(device) as peak:
            seconds = median_time(run, repeats, sync=sync)
        label = _label(family, extra)
        rates[label] = (shape.batch / seconds, peak.mib)
        if exact is None and not model.uses_time_sampler:
            exact = label
        del model
    out = []
    for label, (rows, mib) in rates.items():
        detail = {"peak_mib": mib}
        if exact is not None and label != exact:
            detail["seconds_over_arm_exact"] = rates[exact][0] / rows  # seconds per row, relative
        what = "exact pass" if label == exact else "per Monte-Carlo sample"
        out.append(Figure(f"eval ppl {label}: rows/s, {what}", rows, "rows/s", None, None, detail))
    return out


def _count_syncs(fn: Callable[[], Any], device: str) -> int | None:
    """Host-device synchronisations during ``fn`` on CUDA (None on a CPU)."""
    if not str(device).startswith("cuda"):
        return None
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def _sampling_figures(shape: Shape, device: str) -> list[Figure]:
    model = _model(shape, "mdlm", {}, device).eval()
    sync = sync_for(device)
    out = []
    for T in shape.steps:
        for dtype in ("float32", "float64"):

            def run(T=T, dtype=dtype):
                with _autocast(device, shape.dtype):
                    return generate(
                        model,
                        "ancestral",
                        num_samples=shape.samples,
                        batch_size=shape.samples,
                        steps=T,
                        dtype=dtype,
                        generator=0,
                    )

            run()  # warm-up
            sync()
            with _Peak(device) as peak:
                began = time.perf_counter()
                res = run()
                sync()
                seconds = time.perf_counter() - began
            detail = {
                "seconds": seconds,
                "peak_mib": peak.mib,
                "nfe": float(res.nfe.float().mean()) if hasattr(res, "nfe") and torch.is_tensor(res.nfe) else None,
            }
            syncs = _count_syncs(run, device)
            if syncs is not None:
                detail["host_syncs_per_step"] = syncs / T
            out.append(
                Figure(
                    f"sampling MDLM T={T} {dtype}: samples/s", shape.samples / seconds, "samples/s", None, None, detail
                )
            )
    reads = host_reads_per_step(
        lambda T: generate(model, "ancestral", num_samples=1, batch_size=1, steps=T, generator=0), (8, 16)
    )
    out.append(
        Figure(
            "sampling MDLM: host reads per step (two-stage draw, cached)",
            reads,
            "reads/step",
            "<= 3",
            reads <= 3,
            {"counted": "tensor reads to the host (harness.bench.measure.HostReads)"},
        )
    )
    return out


def run_paper_shapes(
    *, preset: str = "paper-shapes", device: str = "cpu", repeats: int = 3, compile_: bool = False, log=print
) -> tuple[list[Figure], dict[str, Any]]:
    """Every figure of ``preset`` on ``device``, and the protocol the record keeps."""
    shape = PRESETS[preset]
    compute = getattr(torch, shape.dtype) if str(device).startswith("cuda") else torch.float32
    tokens = shape.batch * shape.L
    log(f"bench {preset}: ceiling")
    ceiling = gemm_throughput(block_matmuls(tokens, shape.d), repeats=repeats, dtype=compute, device=device)
    figures = [
        Figure(
            f"gemm: {str(compute).removeprefix('torch.')} ceiling at the DiT block shapes",
            ceiling / 1e12,
            "TFLOP/s",
            None,
            None,
            {"shapes": block_matmuls(tokens, shape.d)},
        )
    ]
    for name, stage in (
        ("forward", lambda: _forward_figures(shape, device, ceiling, repeats, compile_)),
        ("train", lambda: _train_figures(shape, device, ceiling, repeats)),
        ("nll", lambda: _nll_figures(shape, device, repeats)),
        ("sampling", lambda: _sampling_figures(shape, device)),
    ):
        log(f"bench {preset}: {name}")
        figures += stage()
        if str(device).startswith("cuda"):
            torch.cuda.empty_cache()
    protocol = {
        "preset": preset,
        "shape": asdict(shape),
        "compute_dtype": str(compute).removeprefix("torch."),
        "autocast": str(device).startswith("cuda") and shape.dtype != "float32",
        "sdpa_kernel": sdpa_kernel_name(
            device, str(compute).removeprefix("torch."), shape.heads, shape.d // shape.heads, shape.L
        ),
        "compile": compile_,
        "repeats": repeats,
        "statistic": "median",
        "flops": "torch.utils.flop_counter over one call (matmuls and attention, from their shapes)",
        "weights": "random",
    }
    return figures, protocol


__all__ = ["PRESETS", "Shape", "count_flops", "run_paper_shapes", "sdpa_kernel_name"]
