"""``primebench bench``: the figures' bookkeeping and one cheap stage through the CLI (the timings
themselves are the command's output, never asserted)."""

from __future__ import annotations

import json

import torch
from click.testing import CliRunner

from harness.bench import PeakRSS, backbone_flops, block_matmuls, median_time, render_markdown
from harness.cli import main


def test_flop_counts_are_the_gemms_and_attention():
    B, L, d = 2, 8, 16
    assert sum(2 * m * k * n for m, k, n in block_matmuls(B * L, d)) == 2 * B * L * 12 * d * d
    assert backbone_flops(B, L, d, 3, 10) == 3 * (2 * B * L * 12 * d * d + 4 * B * L * L * d) + 2 * B * L * d * 10


def test_median_time_and_peak_memory():
    calls = []
    assert median_time(lambda: calls.append(1), 3, warmup=2) >= 0 and len(calls) == 5
    with PeakRSS() as mem:
        block = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
        block.add_(1)
    assert mem.peak >= 64 * 2**20


def test_bench_cli_writes_record_and_table(tmp_path):
    res = CliRunner().invoke(main, ["bench", "--quick", "--stages", "gemm", "--out", str(tmp_path / "b"), "--json"])
    assert res.exit_code == 0, res.output
    record = json.loads((tmp_path / "b" / "bench.json").read_text())
    assert record["evaluation"] == "bench" and record["figures"][0]["units"] == "GFLOP/s"
    assert record["figures"][0]["value"] > 0 and record["protocol"]["statistic"] == "median"
    assert "| gemm: float32 throughput" in (tmp_path / "b" / "README.md").read_text()
    assert render_markdown(record).startswith("# primebench bench (quick)")
    bad = CliRunner().invoke(main, ["bench", "--stages", "gemm,warp"])
    assert bad.exit_code == 2 and "unknown stage" in bad.output


def test_bd3lm_figures_have_their_own_targets():
    """BD3-LM's NLL reads 2L positions (target 2.5x the ARM, not 1.25x); its block sampler's NFE is at
    most T = L."""
    from harness.bench.network import nll_cost_figures
    from harness.bench.sampling import _bd3lm_figure

    figures = nll_cost_figures(B=1, L=32, d=16, layers=1, heads=2, C=100, repeats=1)
    bd3 = [f for f in figures if "bd3lm" in f.name and "DUEL" not in f.name]
    assert len(bd3) == 1 and "block=16" in bd3[0].name and bd3[0].target == "<= 2.5"
    duel = [f for f in figures if "DUEL" in f.name]
    assert all(f.target == "<= 1.25" for f in figures[1:] if "bd3lm" not in f.name and f not in duel)
    # DUEL's cost is counted in forward passes: ceil(L / tokens) of them, each allowed the bound's 1.25x
    assert len(duel) == 1 and duel[0].detail["forward_passes"] == 2 and duel[0].target.startswith("<= 2.5 (2 passes)")

    fig = _bd3lm_figure(L=32, C=100, samples=2, device="cpu", block=8)
    assert fig.ok and fig.value > 0 and fig.detail["nfe"] <= 32 and fig.detail["steps_per_block"] == 8


def test_sampling_stage_at_tiny_shapes_has_every_sampler():
    """The sampling stage runs end to end at tiny shapes; the posterior sampler's figure reads its own
    NFE (= T, every step calls the network) against MDLM's uncached step."""
    from harness.bench.sampling import sampling_figures

    figures = sampling_figures(L=16, T=16, C=100, samples=1, nfe_samples=4, T_uncached=4, repeats=1)
    names = [f.name for f in figures]
    assert any("first-hitting" in n for n in names) and any("BD3-LM" in n for n in names)
    (post,) = [f for f in figures if "posterior" in f.name]
    assert post.detail["nfe"] == 4 and post.detail["T"] == 4 and post.value > 0
    assert post.value == post.detail["posterior_s_per_nfe"] / post.detail["mdlm_uncached_s_per_nfe"]
