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
