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
   ARM's exact NLL on the same backbone at C = 50257. Target <= 1.25x; BD3-LM (blocks of 16), whose
   network reads 2L positions, <= 2.5x.
5. ``sampling``: L = 256, T = 1024, C = 50257: NFE and wall of ancestral sampling with and without
   caching, first-hitting, Prime ell 2 and 4, BD3-LM block by block with its key-value cache.
   Targets: cached NFE within 3% of T (1 - ISR), wall per NFE within 15% between cached and uncached
   runs (one sample per batch, so a call is one NFE), first-hitting NFE exactly L, BD3-LM NFE <= T.
6. ``precision_cost``: a whole sampling run with float64 draws over float32 at C = 50257 (default
   draw; the joint draw beside it). Target <= 1.10x.
7. ``judge``: Gen-PPL judge throughput (tokens/s) and the peak resident memory of each stage.

``preset="paper-shapes"`` (:mod:`~harness.bench.paper_shapes`, :func:`run_shape_bench`) measures every
family at DiT-small, L = 1024, GPT-2's vocabulary instead (for a GPU; ``tiny-shapes`` is its CPU form).

``quick`` uses fewer repeats and smaller sampling runs (within 5 minutes on a 2-core CPU).

The stages live in :mod:`~harness.bench.measure` (the tools and the GEMM ceiling),
:mod:`~harness.bench.network` (2-4), :mod:`~harness.bench.sampling` (5, 6) and
:mod:`~harness.bench.judge` (7); :mod:`~harness.bench.run` runs them. Every public name is importable
from this package.
"""

from __future__ import annotations

from harness.bench.judge import judge_figures
from harness.bench.measure import C_GPT2, Figure, PeakRSS, block_matmuls, gemm_throughput, median_time, sync_for
from harness.bench.network import backbone_flops, forward_figures, nll_cost_figures, train_step_figure
from harness.bench.paper_shapes import run_paper_shapes
from harness.bench.run import machine_description, render_markdown, render_shapes_markdown, run_bench, run_shape_bench
from harness.bench.sampling import precision_cost_figures, sampling_figures

__all__ = [
    "C_GPT2",
    "Figure",
    "PeakRSS",
    "backbone_flops",
    "block_matmuls",
    "forward_figures",
    "gemm_throughput",
    "judge_figures",
    "machine_description",
    "median_time",
    "nll_cost_figures",
    "precision_cost_figures",
    "render_markdown",
    "render_shapes_markdown",
    "run_bench",
    "run_paper_shapes",
    "run_shape_bench",
    "sampling_figures",
    "sync_for",
    "train_step_figure",
]
