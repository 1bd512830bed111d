"""The ``bench`` run: every stage in turn, each under its own peak-memory watch, as one record, and
that record as Markdown."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from typing import Any

import torch

from harness.bench.judge import judge_figures
from harness.bench.measure import Figure, PeakRSS, block_matmuls, gemm_throughput
from harness.bench.network import forward_figures, inference_memory_figures, nll_cost_figures, train_step_figure
from harness.bench.paper_shapes import run_paper_shapes
from harness.bench.sampling import precision_cost_figures, sampling_figures
from harness.records import make_record


def run_bench(
    *,
    quick: bool = False,
    device: str = "cpu",
    stages: list[str] | None = None,
    log: Callable[[str], None] = lambda message: None,
) -> dict[str, Any]:
    """Run ``stages`` (default: all seven, in order) on ``device`` and return the ``bench`` record: its
    figures and each stage's peak resident memory. ``quick``: fewer repeats and smaller runs; ``log``
    is called with each stage's name as it starts. The GEMM ceiling is measured within the first stage
    run (the throughput fractions need it), and reported as a figure only by the ``gemm`` stage."""

    began = time.time()
    repeats = 3 if quick else 5
    stages = stages or ["gemm", "forward", "train_step", "nll_cost", "sampling", "precision_cost", "judge"]
    figures: list[Figure] = []
    memory: dict[str, float] = {}
    torch.manual_seed(0)
    B, L, d, layers, heads = 8, 256, 512, 8, 8
    ceiling = None
    for stage in stages:
        log(f"bench: {stage}")
        with PeakRSS() as mem:
            if stage == "gemm" or ceiling is None:
                ceiling = gemm_throughput(block_matmuls(B * L, d), repeats=repeats, device=device)
                if stage == "gemm":
                    figures.append(
                        Figure(
                            "gemm: float32 throughput at the block shapes",
                            ceiling / 1e9,
                            "GFLOP/s",
                            None,
                            None,
                            {"shapes": block_matmuls(B * L, d)},
                        )
                    )
                    if str(device).startswith("cuda"):
                        bf16 = gemm_throughput(
                            block_matmuls(B * L, d), repeats=repeats, device=device, dtype=torch.bfloat16
                        )
                        figures.append(Figure("gemm: bf16 throughput at the block shapes", bf16 / 1e9, "GFLOP/s"))
            if stage == "forward":
                # five repeats per block even when quick: a forward is cheap, and with three the
                # ratio's median moved by more than the gap it measures
                figures += forward_figures(
                    B=B, L=L, d=d, layers=layers, heads=heads, repeats=max(repeats, 5), ceiling=ceiling, device=device
                )
            elif stage == "train_step":
                figures.append(
                    train_step_figure(
                        B=B,
                        L=L,
                        d=d,
                        layers=layers,
                        heads=heads,
                        repeats=max(2, repeats - 2),
                        ceiling=ceiling,
                        device=device,
                    )
                )
            elif stage == "nll_cost":
                figures += nll_cost_figures(repeats=repeats, device=device, B=2 if quick else 4)
                figures += inference_memory_figures(B=2 if quick else 8, L=64 if quick else 256, device=device)
            elif stage == "sampling":
                figures += sampling_figures(
                    L=64 if quick else 256,
                    samples=2 if quick else 4,
                    T=1024,
                    nfe_samples=64,
                    T_uncached=64 if quick else 128,
                    device=device,
                )
            elif stage == "precision_cost":
                figures += precision_cost_figures(
                    L=64 if quick else 256, T=256, samples=2 if quick else 4, device=device, repeats=1 if quick else 3
                )
            elif stage == "judge":
                figures += judge_figures(samples=4 if quick else 8, device=device)
        memory[stage] = mem.peak / 2**20
    record = make_record(
        "bench",
        model={"name": "bench", "family": None},
        metrics={},
        protocol={
            "quick": quick,
            "stages": stages,
            "repeats": repeats,
            "statistic": "median",
            "machine": machine_description(device),
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
        },
        seed=0,
        device=device,
        wall_s=time.time() - began,
        extra={"figures": [f.to_dict() for f in figures], "peak_rss_mib": memory},
    )
    return record


def run_shape_bench(
    preset: str, *, device: str = "cpu", compile_: bool = False, repeats: int = 3, log=lambda message: None
) -> dict[str, Any]:
    """The ``bench --preset`` record (``paper-shapes`` or ``tiny-shapes``,
    :mod:`harness.bench.paper_shapes`): its figures, the protocol (shape, dtype, attention kernel),
    the card or CPU."""
    began = time.time()
    torch.manual_seed(0)
    figures, protocol = run_paper_shapes(preset=preset, device=device, repeats=repeats, compile_=compile_, log=log)
    protocol.update(machine=machine_description(device), threads=torch.get_num_threads(), torch=torch.__version__)
    if str(device).startswith("cuda"):
        protocol.update(cuda=torch.version.cuda, capability=".".join(map(str, torch.cuda.get_device_capability())))
    return make_record(
        "bench",
        model={"name": f"bench-{preset}", "family": None},
        metrics={},
        protocol=protocol,
        seed=0,
        device=device,
        wall_s=time.time() - began,
        extra={"figures": [f.to_dict() for f in figures]},
    )


def render_shapes_markdown(record: dict[str, Any]) -> str:
    """A ``bench --preset`` record as Markdown: the card, shape and kernel, then one row per figure with
    its details (MFU, fraction of the ceiling, peak memory, syncs per step)."""
    p = record["protocol"]
    shape = p["shape"]
    lines = [
        f"# primebench bench --preset {p['preset']}",
        "",
        f"Device: {p['machine']} ({record['provenance']['device']}), torch {p['torch']}; DiT d={shape['d']}, "
        f"{shape['layers']} layers, {shape['heads']} heads, L={shape['L']}, C={shape['C']}, batch {shape['batch']}; "
        f"compute {p['compute_dtype']}{' (autocast)' if p['autocast'] else ''}; attention kernel {p['sdpa_kernel']}; "
        f"torch.compile {'measured' if p['compile'] else 'off'}; medians of {p['repeats']}; wall "
        f"{record['provenance']['wall_s'] or 0:.0f} s.",
        "",
        "| figure | value | units | details |",
        "|---|---|---|---|",
    ]
    for f in record["figures"]:
        detail = ", ".join(
            f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
            for k, v in (f.get("detail") or {}).items()
            if k != "shapes" and v is not None
        )
        lines.append(f"| {f['name']} | {f['value']:.4g} | {f['units']} | {detail} |")
    return "\n".join(lines + [""])


def machine_description(device: str = "cpu") -> str:
    """The GPU's name on CUDA, else the CPU model and its number of logical CPUs."""

    if str(device).startswith("cuda"):
        return torch.cuda.get_device_name()
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} logical CPUs"


def render_markdown(record: dict[str, Any]) -> str:
    """A ``bench`` record as a Markdown page: the machine and protocol, one table row per figure, and
    the peak memory per stage."""
    p = record["protocol"]
    lines = [
        f"# primebench bench ({'quick' if p['quick'] else 'full'})",
        "",
        f"Machine: {p['machine']}, torch {p['torch']}, {p['threads']} threads; medians of {p['repeats']} "
        f"repeats; wall {record['provenance']['wall_s'] or 0:.0f} s; device {record['provenance']['device']}.",
        "",
        "| figure | value | units | target | mark |",
        "|---|---|---|---|---|",
    ]
    for f in record["figures"]:
        lines.append(f"| {f['name']} | {f['value']:.4g} | {f['units']} | {f['target'] or ''} | {f['mark'] or ''} |")
    lines += [
        "",
        "Peak resident memory per stage (MiB): " + ", ".join(f"{k} {v:.0f}" for k, v in record["peak_rss_mib"].items()),
        "",
    ]
    estimates = [f for f in record["figures"] if "memory_estimate_mib" in (f.get("detail") or {})]
    for f in estimates:  # the estimate `train` checks before it starts, beside what the stage measured
        peak = record["peak_rss_mib"].get("train_step")
        lines += [
            f"Training-step memory estimate ({f['name']}): {f['detail']['memory_estimate_mib']:.0f} MiB; "
            f"measured peak of the stage (the process, the model included): {peak:.0f} MiB"
            if peak is not None
            else f"Training-step memory estimate: {f['detail']['memory_estimate_mib']:.0f} MiB",
            "",
        ]
    return "\n".join(lines)
