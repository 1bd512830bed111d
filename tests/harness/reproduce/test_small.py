import shutil

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.errors import InputError
from harness.reproduce.report import gap_table, idle_table
from harness.views import render


def _ppl(name, ell, bound, se_b, joint=None, se_j=None):
    metrics = {"nll": {"value": bound, "stderr": se_b, "kind": "bound"}}
    if joint is not None:
        metrics["nll_token_joint"] = {"value": joint, "stderr": se_j, "kind": "paper-objective"}
    return {"evaluation": "ppl", "model": {"name": name}, "metrics": metrics, "protocol": {"ell": ell}}


def test_gap_table_states_objective_below_bound_with_a_conservative_stderr():
    table = gap_table([_ppl("mdlm", None, 5.0, 0.1), _ppl("p2", 2, 5.2, 0.03, 5.0, 0.04)])
    assert len(table.rows) == 1  # MDLM has no paper objective
    gap = table.rows[0][4]
    assert gap.value == pytest.approx(0.2) and gap.stderr == pytest.approx(0.05)
    assert "conservative" in render(table, "md")


def test_idle_table_measures_isr_from_nfe_of_cached_ancestral_samples():
    rec = {
        "evaluation": "genppl",
        "model": {"name": "m"},
        "metrics": {"nfe": {"value": 80.0, "stderr": 1.0}},
        "protocol": {"sampler": "ancestral", "cache": True, "steps": 128, "seq_len": 128, "ell": 1},
    }
    arm = {
        "evaluation": "genppl",
        "model": {"name": "a"},
        "metrics": {"nfe": {"value": 127.0}},
        "protocol": {"sampler": "autoregressive", "cache": False, "steps": None, "seq_len": 128},
    }
    table = idle_table([rec, arm])
    assert len(table.rows) == 1
    row = table.rows[0]
    assert row[4].value == pytest.approx(37.5) and row[5].value == pytest.approx(100 * (1 - 1 / 128) ** 128)


def test_idle_table_counts_a_block_samplers_steps_over_all_blocks():
    """BD3-LM: 8 steps in each of 16 blocks of 8 tokens, 128 steps in all; a block's 8 tokens make
    (1 - 1/8)^8 of its steps idle, in every block alike."""
    rec = {
        "evaluation": "genppl",
        "model": {"name": "b"},
        "metrics": {"nfe": {"value": 84.5, "stderr": 0.6}},
        "protocol": {"sampler": "ancestral", "cache": True, "steps": 8, "seq_len": 128, "block_size": 8},
    }
    row = idle_table([rec]).rows[0]
    assert row[2].text == "8 per block of 8 (128 in all)"
    assert row[4].value == pytest.approx(100 * (1 - 84.5 / 128)) and row[4].stderr == pytest.approx(100 * 0.6 / 128)
    assert row[5].value == pytest.approx(100 * (7 / 8) ** 8)


def test_small_configs_share_backbone_tokenizer_and_budget():
    from harness.config import load_config

    cfgs = [load_config(f"small/{m}") for m in ("arm", "mdlm", "masked", "prime2", "prime4", "bd3lm")]
    assert (
        len(
            {
                (c.model.d_model, c.model.n_layers, c.data.tokenizer, c.data.seq_len, c.train.steps, c.train.batch_size)
                for c in cfgs
            }
        )
        == 1
    )
    assert [getattr(c.model, "ell", None) for c in cfgs][3:5] == [2, 4] and cfgs[5].model.block_size == 8


@pytest.mark.slow
def test_small_smoke_run(trained, tmp_path):
    out = tmp_path / "small"
    res = CliRunner().invoke(
        main,
        [
            "reproduce",
            "small",
            "--out",
            str(out),
            "--train-steps",
            "1",
            "--max-rows",
            "2",
            "--samples",
            "2",
            "--judge",
            f"arm:{trained('arm')}",
            "--seeds",
            "2",
        ],
    )
    assert res.exit_code == 0, res.output
    tables = (out / "tables.md").read_text()
    assert "paper objective against the valid bound" in tables and "Perplexity over training seeds" in tables
    assert "Differences between models against the seed spread" in tables
    assert len(list((out / "records").glob("*.json"))) == 2 * 6 * 3
    assert (out / "mdlm-seed1").is_dir()
    (out / "tables.md").unlink()
    res = CliRunner().invoke(
        main,
        ["reproduce", "small", "--out", str(out), "--train-steps", "1", "--max-rows", "2", "--samples", "2"]
        + ["--judge", f"arm:{trained('arm')}", "--models", "bd3lm"],
    )
    assert res.exit_code == 0, res.output
    assert "small-mdlm" in (out / "tables.md").read_text()  # the other models' records stay in the tables
    # a later seed without seed 0's checkpoints: seed 0's records are read back, seed 1 is reused
    for name in ("arm", "bd3lm", "mdlm", "masked", "prime2", "prime4"):
        shutil.rmtree(out / name)
    (out / "tables.md").unlink()
    res = CliRunner().invoke(
        main,
        ["reproduce", "small", "--out", str(out), "--train-steps", "1", "--max-rows", "2", "--samples", "2"]
        + ["--judge", f"arm:{trained('arm')}", "--seed", "1", "--seeds", "1"],
    )
    assert res.exit_code == 0, res.output
    assert not (out / "mdlm").exists() and "Perplexity over training seeds" in (out / "tables.md").read_text()


def test_gap_table_names_the_training_seed_of_each_row():
    seed1 = _ppl("p2", 2, 5.2, 0.03, 5.0, 0.04)
    seed1["model"]["config"] = {"seed": 1}
    table = gap_table([_ppl("p2", 2, 5.2, 0.03, 5.0, 0.04), seed1])
    assert [row[0].text for row in table.rows] == ["p2", "p2 (seed 1)"]


def test_small_configs_name_each_seed_from_the_first():
    from harness.reproduce.small import MODELS, small_configs

    cfgs = small_configs(2, first_seed=1)
    assert list(cfgs)[:2] == ["arm-seed1", "bd3lm-seed1"] and list(cfgs)[-1] == f"{MODELS[-1]}-seed2"
    assert {"udlm", "duo"} <= set(MODELS)  # a small/ preset joins the job by being there
    assert {c.seed for name, c in cfgs.items() if name.endswith("seed2")} == {2}
    assert small_configs(1)["mdlm"].seed == 0
    with pytest.raises(InputError, match="first training seed"):
        small_configs(1, first_seed=-1)


def test_kept_records_reads_one_record_per_model_and_seed_of_a_kind(tmp_path):
    """The committed small records: one per named model, Gen PPL in float64 only, other names left out."""
    import json
    import os
    import shutil
    from pathlib import Path

    from harness.reproduce.small import kept_records

    committed = Path(__file__).resolve().parents[3] / "results" / "small" / "records"
    shutil.copytree(committed, tmp_path / "records")
    ppl = kept_records(tmp_path, "ppl", {"small-mdlm", "small-arm", "small-none"})
    keys = [(r["model"]["name"], r["model"]["config"].get("seed", 0)) for r in ppl]
    assert keys == sorted(set(keys)) and {name for name, _ in keys} == {"small-arm", "small-mdlm"}
    assert ("small-mdlm", 0) in keys  # one record per model and seed, in name and seed order
    gen = kept_records(tmp_path, "genppl", {"small-prime2"})
    assert len(gen) == len({r["model"]["config"].get("seed", 0) for r in gen}) >= 1
    assert {r["protocol"]["dtype"] for r in gen} == {"float64"}
    newer = json.loads((tmp_path / "records" / "ppl-mdlm.json").read_text())
    newer["metrics"]["nll"]["value"] = 1.0
    (tmp_path / "records" / "ppl-mdlm-again.json").write_text(json.dumps(newer))
    os.utime(tmp_path / "records" / "ppl-mdlm-again.json", (2e9, 2e9))
    newer["model"]["config"]["seed"] = 1
    (tmp_path / "records" / "ppl-mdlm-seed1-again.json").write_text(json.dumps(newer))
    os.utime(tmp_path / "records" / "ppl-mdlm-seed1-again.json", (2e9, 2e9))
    (tmp_path / "records" / "torn.json").write_text("{")
    got = kept_records(tmp_path, "ppl", {"small-mdlm"})
    assert [(r["model"]["config"]["seed"], r["metrics"]["nll"]["value"]) for r in got] == [(0, 1.0), (1, 1.0)]


def test_reproduce_small_refuses_an_unknown_model():
    res = CliRunner().invoke(main, ["reproduce", "small", "--models", "mdlm,gpt", "--out", "unused"])
    assert res.exit_code == 2 and "unknown model 'gpt'" in res.output and "bd3lm" in res.output
