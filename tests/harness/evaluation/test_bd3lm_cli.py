"""BD3-LM through the commands: eval ppl, eval genppl, eval zeroshot and audit precision on a
trained tiny checkpoint (blocks of 8 bytes), each record carrying the block size."""

from __future__ import annotations

import json

from click.testing import CliRunner

from harness.cli import main


def _json(res):
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_bd3lm_through_every_eval_command(trained, tmp_path):
    ckpt, judge = str(trained("bd3lm")), f"arm:{trained('arm')}"
    runner = CliRunner()

    ppl = _json(runner.invoke(main, ["eval", "ppl", ckpt, "--max-rows", "4", "-K", "2", "--json"]))
    assert ppl["metrics"]["nll"]["kind"] == "bound" and ppl["model"]["family"] == "bd3lm"
    assert ppl["protocol"]["block_size"] == 8 and ppl["protocol"]["train_clip"] == [1e-3, 1.0]
    assert ppl["protocol"]["time_sampler"].startswith("one t per block of 8 tokens")
    exact = _json(runner.invoke(main, ["eval", "ppl", ckpt, "--max-rows", "2", "--time-sampler", "n", "--json"]))
    assert (
        exact["protocol"]["time_sampler"].endswith("[n]")
        and "per block of 8 tokens" in exact["protocol"]["time_sampler"]
    )

    gen = runner.invoke(
        main,
        ["eval", "genppl", ckpt, "-n", "3", "--batch-size", "3", "-T", "2", "--judge", judge, "--no-mauve", "--json"],
    )
    rec = _json(gen)
    assert rec["protocol"]["block_size"] == 8 and rec["protocol"]["steps"] == 2
    assert rec["metrics"]["nfe"]["value"] <= 2 * 64 // 8

    zs = _json(
        runner.invoke(
            main, ["eval", "zeroshot", ckpt, "--tasks", "wiki_lastword", "--max-rows", "3", "-K", "2", "--json"]
        )
    )
    assert zs["metrics"]["wiki_lastword/perplexity"]["kind"] == "bound" and zs["protocol"]["block_size"] == 8
    assert "per block of 8 tokens" in zs["protocol"]["estimator"]["estimator"]

    audit = runner.invoke(
        main, ["audit", "precision", ckpt, "-T", "2", "-n", "2", "--batch-size", "2", "--out", str(tmp_path), "--json"]
    )
    assert _json(audit)["protocol"]["block_size"] == 8
