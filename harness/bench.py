"""``primebench bench``: speed and memory of the harness on this machine, as ratios measured in one process.

Each figure is the median of several repeats and sits next to its target with a pass / short mark.
Absolute seconds depend on the machine and its load; the ratios (fraction of the machine's GEMM
throughput, cost against the ARM's exact NLL, float64 over float32) are what the targets are about.

1. ``gemm``: float32 matmul throughput at the backbone's shapes (the ceiling; bf16 too on CUDA).
2. ``forward``: our backbone forward (d_model 512, L 256, batch 8) as a fraction of (1), beside
   ``nn.TransformerEncoder`` of the same size in the same run. Target >= 0.70.
3. ``train_step``: one training step (loss, backward, clipping, EMA, AdamW) as a fraction of (1),
   counting 3x the forward FLOPs. Target >= 0.50.
4. ``nll_cost``: ``model.nll`` per Monte-Carlo sample for MDLM, masked and Prime (ell 2, 4) over the
   ARM's exact NLL on the same backbone at C = 50257. Target <= 1.25x.
5. ``sampling``: L = 256, T = 1024, C = 50257: NFE and wall of ancestral sampling with and without
   caching, first-hitting, Prime ell 2 and 4. Targets: cached NFE within 3% of T (1 - ISR), wall per
   NFE within 15% between cached and uncached runs (one sample per batch, so a call is one NFE),
   first-hitting NFE exactly L.
6. ``precision_cost``: a whole sampling run with float64 draws over float32 at C = 50257 (default
   draw; the joint draw beside it). Target <= 1.10x.
7. ``judge``: Gen-PPL judge throughput (tokens/s) and the peak resident memory of each stage.

``quick`` uses fewer repeats and smaller sampling runs (within 5 minutes on a 2-core CPU).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

C_GPT2 = 50257


@dataclass
class Figure:
    """One measured figure beside its target (``target`` None: reported, no target)."""

    name: str
    value: float
    units: str
    target: str | None = None
    ok: bool | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "units": self.units,
            "target": self.target,
            "mark": None if self.ok is None else ("pass" if self.ok else "short"),
            "detail": self.detail,
        }


class PeakRSS:
    """Peak resident memory of this process while a stage runs (sampled from /proc every 10 ms)."""

    def __init__(self):
        self.peak = 0
        self._stop = threading.Event()

    @staticmethod
    def current() -> int:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4096
        except OSError:  # not Linux: the lifetime peak instead
            import resource

            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.current())
            self._stop.wait(0.01)

    def __enter__(self):
        self.peak = self.current()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.current())


def median_time(
    fn: Callable[[], Any], repeats: int, *, warmup: int = 1, sync: Callable[[], None] = lambda: None
) -> float:
    """Median wall seconds of ``fn()`` over ``repeats`` runs after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


# -- 1. the GEMM ceiling ------------------------------------------------------------------------


def block_matmuls(tokens: int, d: int, mlp: int = 4) -> list[tuple[int, int, int]]:
    """(M, K, N) of one transformer block's GEMMs: fused QKV, output projection, MLP up and down."""
    return [(tokens, d, 3 * d), (tokens, d, d), (tokens, d, mlp * d), (tokens, mlp * d, d)]


def gemm_throughput(shapes, *, repeats: int, dtype=torch.float32, device="cpu") -> float:
    """FLOP/s of the given matmuls run back to back (2 M K N each)."""
    mats = [
        (torch.randn(m, k, dtype=dtype, device=device), torch.randn(k, n, dtype=dtype, device=device))
        for m, k, n in shapes
    ]
    flops = sum(2 * m * k * n for m, k, n in shapes)

    def run():
        for a, b in mats:
            torch.mm(a, b)

    return flops / median_time(run, repeats, sync=_sync(device))


def _sync(device) -> Callable[[], None]:
    if str(device).startswith("cuda"):
        return lambda: torch.cuda.synchronize()
    return lambda: None


# -- 2, 3. backbone forward and training step ------------------------------------------------------


def backbone_flops(B: int, L: int, d: int, layers: int, vocab_out: int) -> int:
    """Matmul FLOPs of one forward: blocks (GEMMs and attention) and the output projection."""
    per_block = sum(2 * m * k * n for m, k, n in block_matmuls(B * L, d)) + 4 * B * L * L * d
    return layers * per_block + 2 * B * L * d * vocab_out


def _our_backbone(B, L, d, layers, heads, vocab, device):
    from harness.backbone import Backbone, BackboneConfig

    net = (
        Backbone(
            BackboneConfig(vocab_in=vocab + 1, vocab_out=vocab, seq_len=L, d_model=d, n_layers=layers, n_heads=heads)
        )
        .to(device)
        .eval()
    )
    return net, torch.randint(0, vocab, (B, L), device=device)


def forward_figures(*, B=8, L=256, d=512, layers=8, heads=8, vocab=1000, repeats=5, ceiling: float, device="cpu"):
    net, ids = _our_backbone(B, L, d, layers, heads, vocab, device)
    ref = (
        nn.TransformerEncoder(
            nn.TransformerEncoderLayer(
                d, heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
            ),
            layers,
            enable_nested_tensor=False,
        )
        .to(device)
        .eval()
    )
    h = torch.randn(B, L, d, device=device)
    with torch.no_grad():
        ours = median_time(lambda: net(ids), repeats, sync=_sync(device))
        theirs = median_time(lambda: ref(h), repeats, sync=_sync(device))
    flops_ours = backbone_flops(B, L, d, layers, vocab)
    flops_ref = backbone_flops(B, L, d, layers, 0)
    frac_ours, frac_ref = flops_ours / ours / ceiling, flops_ref / theirs / ceiling
    shape = {"batch": B, "seq_len": L, "d_model": d, "n_layers": layers, "n_heads": heads, "vocab_out": vocab}
    return [
        Figure(
            "forward: backbone / GEMM ceiling",
            frac_ours,
            "fraction",
            ">= 0.70",
            frac_ours >= 0.70,
            dict(shape, seconds=ours, gflops=flops_ours / 1e9),
        ),
        Figure(
            "forward: nn.TransformerEncoder / GEMM ceiling",
            frac_ref,
            "fraction",
            None,
            None,
            dict(shape, seconds=theirs, gflops=flops_ref / 1e9),
        ),
        Figure(
            "forward: backbone over nn.TransformerEncoder (same FLOPs basis)",
            frac_ours / frac_ref,
            "ratio",
            ">= 1.00",
            frac_ours / frac_ref >= 1.0,
        ),
    ]


def train_step_figure(*, B=8, L=256, d=512, layers=8, heads=8, vocab=1000, repeats=3, ceiling: float, device="cpu"):
    """A training step of MDLM as the trainer runs it: loss, backward, clip, AdamW, EMA."""
    from harness.models import build_model
    from harness.training import EMA, make_optimizer

    model = build_model("mdlm", vocab_size=vocab, seq_len=L, d_model=d, n_layers=layers, n_heads=heads).to(device)
    model.train()
    opt = make_optimizer(model, lr=3e-4, weight_decay=0.0)
    ema = EMA(model, 0.9999)
    x = torch.randint(0, vocab, (B, L), device=device)
    g = torch.Generator(device=device).manual_seed(0)

    def step():
        opt.zero_grad(set_to_none=True)
        model.loss(x, generator=g).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        ema.update(model)

    seconds = median_time(step, repeats, sync=_sync(device))
    flops = 3 * backbone_flops(B, L, d, layers, vocab)
    frac = flops / seconds / ceiling
    return Figure(
        "train step / GEMM ceiling (3x forward FLOPs)",
        frac,
        "fraction",
        ">= 0.50",
        frac >= 0.50,
        {
            "seconds": seconds,
            "batch": B,
            "seq_len": L,
            "d_model": d,
            "n_layers": layers,
            "optimizer": "AdamW (foreach)",
            "clip": "foreach",
            "ema": "foreach",
        },
    )


# -- 4. NLL cost against the ARM -------------------------------------------------------------------


def nll_cost_figures(*, B=4, L=256, d=256, layers=4, heads=4, C=C_GPT2, repeats=3, device="cpu"):
    from harness.models import build_model

    common = dict(vocab_size=C, seq_len=L, d_model=d, n_layers=layers, n_heads=heads)
    x0 = torch.randint(0, C, (B, L), generator=torch.Generator().manual_seed(0)).to(device)
    seconds = {}
    cases = [("arm", {}), ("mdlm", {}), ("masked", {}), ("prime", {"ell": 2}), ("prime", {"ell": 4})]
    for family, extra in cases:
        model = build_model(family, **dict(common, **extra)).to(device).eval()
        label = family + (f" ell={extra['ell']}" if extra else "")

        def run(model=model):
            if model.uses_time_sampler:  # one Monte-Carlo corruption
                model.nll(x0, num_samples=1, generator=torch.Generator(device=device).manual_seed(1))
            else:
                model.nll(x0)

        seconds[label] = median_time(run, repeats, sync=_sync(device))
    arm = seconds[cases[0][0]]
    out = []
    for label, s in seconds.items():
        if label == cases[0][0]:
            out.append(
                Figure("nll: ARM exact NLL per forward", s, "seconds", None, None, {"C": C, "batch": B, "seq_len": L})
            )
            continue
        ratio = s / arm
        out.append(
            Figure(
                f"nll: {label} per Monte-Carlo sample / ARM exact",
                ratio,
                "ratio",
                "<= 1.25",
                ratio <= 1.25,
                {"seconds": s},
            )
        )
    return out


# -- 5, 6. sampling ----------------------------------------------------------------------------------


def _tiny_sampler_model(family, *, C, L, ell=None, device="cpu", d=32):
    """A one-block network: the sampler's own cost at C classes dominates, as it does at scale."""
    from harness.models import build_model

    kw = dict(vocab_size=C, seq_len=L, d_model=d * (ell or 1), n_layers=1, n_heads=2, schedule="linear")
    if ell:
        kw["ell"] = ell
    return build_model(family, **kw).to(device).eval()


def sampling_figures(*, L=256, T=1024, C=C_GPT2, samples=4, nfe_samples=64, T_uncached=128, repeats=3, device="cpu"):
    """Wall at C = 50257; the NFE statistic (which does not depend on C or the network) from
    ``nfe_samples`` samples of a C = 1000 model, so that its standard error is well below 3%."""
    from harness.audit.idle import idle_step_ratio
    from harness.sampling import generate

    out = []

    def timed(model, sampler, **kw):
        began = time.perf_counter()
        res = generate(model, sampler, generator=0, **kw)
        return res, time.perf_counter() - began

    def nfe_figure(label, family, ell=None):
        small = _tiny_sampler_model(family, C=1000, L=L, ell=ell, device=device, d=16)
        res, _ = timed(small, "ancestral", num_samples=nfe_samples, batch_size=nfe_samples, steps=T)
        nfe = res.nfe.double()
        expected = T * (1 - float(idle_step_ratio(L, T, ell=ell or 1, schedule="linear")))
        mean, se = float(nfe.mean()), float(nfe.std() / nfe.numel() ** 0.5)
        return Figure(
            f"sampling: {label} cached NFE / T (1 - ISR)",
            mean / expected,
            "ratio",
            "within 3%",
            abs(mean / expected - 1) <= 0.03,
            {
                "nfe": mean,
                "nfe_stderr": se,
                "expected": expected,
                "T": T,
                "L": L,
                "samples": nfe_samples,
                "C": 1000,
                "draw": res.protocol["draw"],
            },
        )

    out.append(nfe_figure("MDLM", "mdlm"))
    mdlm = _tiny_sampler_model("mdlm", C=C, L=L, device=device)
    timed(mdlm, "ancestral", num_samples=1, batch_size=1, steps=4)  # warm-up: allocations, kernels
    # one sample per batch, so that a denoiser call is exactly one NFE in both runs (in a batch, the
    # cached run calls the network for the few rows that reveal, the uncached run for all of them)
    runs_c = [timed(mdlm, "ancestral", num_samples=samples, batch_size=1, steps=T) for _ in range(repeats)]
    runs_u = [
        timed(mdlm, "ancestral", num_samples=samples, batch_size=1, steps=T_uncached, cache=False)
        for _ in range(repeats)
    ]
    cached, wall_c = runs_c[0][0], statistics.median(w for _, w in runs_c)
    uncached, wall_u = runs_u[0][0], statistics.median(w for _, w in runs_u)
    per_c = wall_c / float(cached.nfe.double().mean())
    per_u = wall_u / float(uncached.nfe.double().mean())
    out.append(
        Figure(
            f"sampling: MDLM wall at C = {C}, T = {T}, cached",
            wall_c / samples,
            "s/sample",
            None,
            None,
            {"nfe": float(cached.nfe.double().mean()), "samples": samples, "batch_size": 1},
        )
    )
    out.append(
        Figure(
            "sampling: wall per NFE, cached / uncached",
            per_c / per_u,
            "ratio",
            "within 15%",
            abs(per_c / per_u - 1) <= 0.15,
            {
                "cached_s_per_nfe": per_c,
                "uncached_s_per_nfe": per_u,
                "uncached_T": T_uncached,
                "uncached_nfe": float(uncached.nfe.double().mean()),
            },
        )
    )
    fh, wall_fh = timed(mdlm, "first-hitting", num_samples=samples, batch_size=samples)
    out.append(
        Figure(
            "sampling: first-hitting NFE",
            float(fh.nfe.double().mean()),
            "calls",
            f"exactly L = {L}",
            bool((fh.nfe == L).all()),
            {"wall_s_per_sample": wall_fh / samples},
        )
    )
    for ell in (2, 4):
        out.append(nfe_figure(f"Prime ell={ell}", "prime", ell))
        prime = _tiny_sampler_model("prime", C=C, L=L, ell=ell, device=device, d=16)
        res, wall = timed(prime, "ancestral", num_samples=samples, batch_size=samples, steps=T)
        out.append(
            Figure(
                f"sampling: Prime ell={ell} wall at C = {C}, T = {T}, cached",
                wall / samples,
                "s/sample",
                None,
                None,
                {
                    "nfe": float(res.nfe.double().mean()),
                    "samples": samples,
                    "s_per_nfe": wall / float(res.nfe.double().mean()),
                },
            )
        )
    return out


def precision_cost_figures(*, L=256, T=256, C=C_GPT2, samples=4, repeats=1, device="cpu"):
    from harness.sampling import generate

    mdlm = _tiny_sampler_model("mdlm", C=C, L=L, device=device)
    out = []
    for draw in ("two-stage", "joint"):
        wall = {}
        for dtype in ("float32", "float64"):
            wall[dtype] = median_time(
                lambda dtype=dtype: generate(
                    mdlm,
                    "ancestral",
                    num_samples=samples,
                    batch_size=samples,
                    steps=T,
                    dtype=dtype,
                    generator=0,
                    draw=draw,
                    method="gumbel",
                ),
                repeats,
                warmup=0,
            )
        ratio = wall["float64"] / wall["float32"]
        target = "<= 1.10" if draw == "two-stage" else None
        out.append(
            Figure(
                f"precision: {draw} draw, float64 / float32 sampling run",
                ratio,
                "ratio",
                target,
                ratio <= 1.10 if target else None,
                {
                    "float32_s": wall["float32"],
                    "float64_s": wall["float64"],
                    "T": T,
                    "L": L,
                    "C": C,
                    "samples": samples,
                },
            )
        )
    return out


# -- 7. judge throughput and memory ------------------------------------------------------------------


def judge_figures(*, samples=8, length=256, device="cpu"):
    from harness.judges import load_judge
    from harness.metrics.genppl import score_ids

    with PeakRSS() as load_mem:
        judge = load_judge("smollm2", device=device)
    g = torch.Generator().manual_seed(0)
    ids = [torch.randint(100, 20000, (length,), generator=g).tolist() for _ in range(samples)]
    with PeakRSS() as score_mem:
        began = time.perf_counter()
        score_ids(judge, ids, max_length=length, batch_size=samples)
        wall = time.perf_counter() - began
    return [
        Figure(
            "judge: smollm2 scoring throughput",
            samples * length / wall,
            "tokens/s",
            None,
            None,
            {"samples": samples, "length": length, "seconds": wall},
        ),
        Figure("memory: peak RSS loading the judge", load_mem.peak / 2**20, "MiB"),
        Figure("memory: peak RSS scoring with the judge", score_mem.peak / 2**20, "MiB"),
    ]


def run_bench(
    *,
    quick: bool = False,
    device: str = "cpu",
    stages: list[str] | None = None,
    log: Callable[[str], None] = lambda message: None,
) -> dict[str, Any]:
    """Run every stage and return the ``bench`` record."""
    from harness.records import make_record

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
                figures += forward_figures(
                    B=B, L=L, d=d, layers=layers, heads=heads, repeats=repeats, ceiling=ceiling, device=device
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


def machine_description(device: str = "cpu") -> str:
    import os
    import platform

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
    return "\n".join(lines)


__all__ = ["Figure", "PeakRSS", "run_bench", "render_markdown", "gemm_throughput", "backbone_flops", "median_time"]
