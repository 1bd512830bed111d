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


def test_paper_shapes_bench_runs_at_tiny_shapes_for_every_family(tmp_path):
    """`bench --preset tiny-shapes` is the CPU form of the GPU check (`make gpu-check`): the same code as
    `--preset paper-shapes`, so it cannot rot. Every registered family gets a training and an NLL figure."""
    import subprocess
    from pathlib import Path

    from harness.bench.paper_shapes import PRESETS, count_flops
    from harness.cli.bench import PRESETS as CLI_PRESETS
    from harness.models import family_names

    assert set(CLI_PRESETS) == set(PRESETS)
    paper = PRESETS["paper-shapes"]
    assert (paper.d, paper.layers, paper.heads, paper.L, paper.C, paper.dtype) == (768, 12, 12, 1024, 50257, "bfloat16")
    res = CliRunner().invoke(main, ["bench", "--preset", "tiny-shapes", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    record = json.loads((tmp_path / "bench.json").read_text())
    names = [f["name"] for f in record["figures"]]
    for family in family_names():
        assert any(n.startswith(f"train {family}") for n in names), family
        assert any(n.startswith(f"eval ppl {family}") for n in names), family
    assert any("nn.TransformerEncoder" in n for n in names)
    assert {f"sampling MDLM T={T} {d}: samples/s" for T in (8, 32) for d in ("float32", "float64")} <= set(names)
    train = next(f for f in record["figures"] if f["name"].startswith("train mdlm"))
    assert train["detail"]["mfu"] > 0 and train["detail"]["step_tflops"] > 0
    protocol = record["protocol"]
    assert protocol["preset"] == "tiny-shapes" and protocol["sdpa_kernel"].startswith("cpu")
    assert protocol["compute_dtype"] == "float32" and not protocol["autocast"]
    assert "attention kernel" in (tmp_path / "README.md").read_text()
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    assert count_flops(lambda: a @ b) == 2 * 8 * 16 * 4
    res = CliRunner().invoke(main, ["bench", "--compile", "--stages", "gemm"])
    assert res.exit_code == 2 and "--compile goes with --preset" in res.output
    script = Path(__file__).resolve().parents[2] / "scripts" / "gpu-check.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0 and script.stat().st_mode & 0o111


def test_forward_stage_reports_the_encoder_ratio_and_the_activation_diagnostic():
    from harness.bench import forward_figures

    figures = forward_figures(B=2, L=16, d=32, layers=2, heads=4, vocab=10, repeats=1, ceiling=1e9)
    names = [f.name for f in figures]
    assert names[2] == "forward: backbone over nn.TransformerEncoder (same FLOPs basis)"
    assert figures[2].target == ">= 1.00" and figures[2].ok in (True, False)
    blocks = figures[2].detail["block_seconds"]  # ours, the encoder, the encoder, ours: each block's median
    assert len(blocks["ours"]) == len(blocks["encoder"]) == 2
    mean = lambda pair: sum(pair) / 2  # noqa: E731
    assert figures[0].detail["seconds"] == mean(blocks["ours"]) and figures[1].detail["seconds"] == mean(
        blocks["encoder"]
    )
    diagnostic = figures[3]
    assert "erf GELU" in diagnostic.name and diagnostic.target is None and diagnostic.ok is None
    assert diagnostic.value > 0 and diagnostic.detail["seconds"] > 0
