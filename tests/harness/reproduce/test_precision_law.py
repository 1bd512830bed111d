import math
from pathlib import Path

import pytest
import torch

from harness.audit import gumbel as G


def _zipf():
    return G.peaked_and_flat(50257, torch.Generator().manual_seed(0)).peaked


def test_joint_draw_law_of_a_zipf_model_matches_the_known_entropy_drop():
    """Zipf over GPT-2 ids (7.57 nats): float32 joint draws give 7.26 nats at T = 100; float64 keeps 7.57."""
    p = _zipf()
    q32 = G.mdlm_joint_draw_law(p, steps=100, dtype="float32")
    q64 = G.mdlm_joint_draw_law(p, steps=100, dtype="float64")
    assert float(G.entropy(p)) == pytest.approx(7.5659, abs=1e-4)
    assert float(G.entropy(q32)) == pytest.approx(7.2597, abs=1e-3)
    assert float(G.entropy(q64)) == pytest.approx(float(G.entropy(p)), abs=1e-8)
    assert float(q32.sum()) == pytest.approx(1.0, abs=1e-12)
    rare = p < 1e-5
    assert float(q32[rare].sum()) < 0.8 * float(
        p[rare].sum()
    )  # the rare tokens lose a quarter of their mass (0.153 -> 0.112)


def test_joint_draw_law_on_a_small_vocabulary_is_the_intended_law():
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    q = G.mdlm_joint_draw_law(p, steps=64, dtype="float32")
    assert torch.allclose(q, p, atol=1e-5)


def test_tabulated_win_probability_matches_the_direct_sum():
    x = torch.logspace(-40, 0, 3000, dtype=torch.float64)
    for bits in (24, 53):
        exact, fast = G._grid_win(x, bits), G._grid_win_fast(x, bits)
        keep = exact > 1e-300
        assert float(((fast - exact).abs() / exact.clamp_min(1e-300))[keep].max()) < 1e-5


def test_joint_draw_law_rejects_bad_input():
    from harness.errors import PrimebenchError

    with pytest.raises(PrimebenchError):
        G.mdlm_joint_draw_law(torch.ones(2, 3), steps=4, dtype="float32")
    with pytest.raises(PrimebenchError):
        G.mdlm_joint_draw_law(torch.ones(3), steps=0, dtype="float32")


def test_prediction_record_and_table_from_a_trained_model(trained, tmp_path):
    """predict() on a tiny MDLM: rows per (T, dtype), exact law entropies, and the comparison table."""
    from harness.audit.precision import all_masked_marginal, audit_checkpoint, audit_from_record
    from harness.evaluation import load_for_evaluation
    from harness.reproduce.precision import PrecisionRecords, predict
    from harness.reproduce.report import drop_table, plot_precision_comparison, precision_table
    from harness.views import render

    ckpt = trained("mdlm")
    _, model, _, cfg = load_for_evaluation(ckpt, "cpu")
    p = all_masked_marginal(model)
    assert p.dtype == torch.float64 and float(p.sum()) == pytest.approx(1.0)
    record = predict(
        model, steps=[2, 8], dtypes=["float32", "float64"], seq_len=cfg.data.seq_len, mc_samples=50, seed=0
    )
    assert [(r["steps"], r["dtype"]) for r in record["rows"]] == [
        (2, "float32"),
        (2, "float64"),
        (8, "float32"),
        (8, "float64"),
    ]
    assert all(r["metrics"][k]["kind"] == "estimate" for r in record["rows"] for k in ("law_entropy", "surprisal"))
    assert math.isfinite(record["rows"][0]["metrics"]["entropy"]["value"])
    audits = {
        f"m-{draw}": audit_checkpoint(
            ckpt,
            steps=[2, 8],
            num_samples=2,
            dtypes=["float32", "float64"],
            method="mdlm-legacy",
            sampler=None,
            controls=draw == "joint",
            batch_size=2,
            seed=0,
            entropy_base="e",
            draw=draw,
        ).record
        for draw in ("joint", "two-stage")
    }
    assert len(audit_from_record(audits["m-joint"]).rows) == 6
    result = PrecisionRecords(out=tmp_path, audits=audits, predictions={"m": record})
    md = render(precision_table(result, "m"), "md")
    assert "joint draw, measured" in md and "predicted, context-free" in md and "| 8 | float32 |" in md
    surprisal = render(precision_table(result, "m", "surprisal"), "md")
    assert "marginal surprisal" in surprisal and "predicted law entropy" not in surprisal
    drops = render(drop_table(result, "m"), "md")
    assert "| 8 | surprisal |" in drops and "| 2 | entropy |" in drops
    assert plot_precision_comparison(result, tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_drop_table_known_values():
    """fp64 - fp32 per (T, statistic), the unpaired standard error, and the number of standard errors."""
    from harness.reproduce.precision import PrecisionRecords
    from harness.reproduce.report import drop_table
    from harness.views import render

    def m(value, se):
        return {"value": value, "stderr": se, "kind": "estimate", "units": "nats"}

    def audit(values):
        return {
            "model": {"name": "toy"},
            "protocol": {},
            "rows": [
                {
                    "protocol": {"steps": 4, "dtype": d, "control": False},
                    "metrics": {"entropy": m(e, 0.3), "surprisal": m(s, 0.4)},
                }
                for d, (e, s) in values.items()
            ],
        }

    result = PrecisionRecords(
        out=Path("."),
        audits={
            "x-joint": audit({"float64": (4.0, 8.0), "float32": (3.0, 6.0)}),
            "x-two-stage": audit({"float64": (4.0, 8.0), "float32": (4.0, 8.0)}),
        },
        predictions={
            "x": {
                "rows": [
                    {"steps": 4, "dtype": "float64", "metrics": {"surprisal": m(8.5, None)}},
                    {"steps": 4, "dtype": "float32", "metrics": {"surprisal": m(8.0, None)}},
                ]
            }
        },
    )
    table = drop_table(result, "x")
    (entropy, surprisal) = table.rows
    assert entropy[2].value == pytest.approx(1.0) and entropy[2].stderr == pytest.approx(0.3 * 2**0.5)
    assert entropy[3].text == f"{1.0 / (0.3 * 2**0.5):.1f}" and entropy[5].value is None
    assert surprisal[2].value == pytest.approx(2.0) and surprisal[3].text == f"{2.0 / (0.4 * 2**0.5):.1f}"
    assert surprisal[4].value == pytest.approx(0.0) and surprisal[5].value == pytest.approx(0.5)
    assert "fp64 - fp32" in render(table, "md")


@pytest.mark.slow
def test_reproduce_precision_smoke_run(tmp_path):
    """The whole job with one training step, T = 2 and 2 samples: records, the drop table, both statistics,
    and a second run that skips every stage."""
    from click.testing import CliRunner

    from harness.cli import main

    out = tmp_path / "precision"
    args = ["reproduce", "precision", "--out", str(out), "--train-steps", "1", "--steps", "2", "--samples", "2"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    text = (out / "tables.md").read_text()
    assert "the float32 drop" in text and "marginal surprisal" in text and "| 2 | surprisal |" in text
    assert sorted(p.stem for p in (out / "records").glob("*.json")) == [
        "precision-mdlm-joint",
        "precision-mdlm-two-stage",
        "precision-prime-joint",
        "precision-prime-two-stage",
        "prediction-mdlm",
        "prediction-prime",
    ]
    before = {p.name: p.stat().st_mtime_ns for p in (out / "records").glob("*.json")}
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.output
    assert {p.name: p.stat().st_mtime_ns for p in (out / "records").glob("*.json")} == before


def test_per_name_ints_parses_one_number_or_pairs():
    import click

    from harness.cli.parsing import per_name_ints

    names = ("mdlm", "prime")
    assert per_name_ints("16", names) == {"mdlm": 16, "prime": 16}
    assert per_name_ints("mdlm=48", names) == {"mdlm": 48}
    assert per_name_ints(" mdlm=48 , prime=4 ", names) == {"mdlm": 48, "prime": 4}
    for bad, words in [
        ("arm=3", "NAME one of mdlm, prime"),
        ("mdlm=0", "integer >= 1"),
        ("mdlm=x", "integer >= 1"),
        ("0", "integer >= 1"),
        ("", "empty"),
        ("4,8", "NAME=N pairs"),
    ]:
        with pytest.raises(click.BadParameter, match=words):
            per_name_ints(bad, names)


def test_reproduce_precision_samples_per_model_reach_each_audit(tmp_path, monkeypatch):
    """--samples mdlm=N changes MDLM's audits only (Prime keeps its default), the batch never exceeds the
    preset's, and a bad model name fails before any training."""
    from types import SimpleNamespace

    from click.testing import CliRunner

    import harness.reproduce.report as report
    import harness.reproduce.stages as stages
    from harness.cli import main
    from harness.errors import PrimebenchError
    from harness.reproduce import precision

    calls = []
    monkeypatch.setattr(stages.Stages, "train", lambda self, name, cfg: None)
    monkeypatch.setattr(
        precision,
        "audit_checkpoint",
        lambda ckpt, **kw: (
            calls.append((ckpt.name, kw)) or SimpleNamespace(record={"model": {"name": ckpt.name}, "rows": []})
        ),
    )
    monkeypatch.setattr(precision, "load_for_evaluation", lambda *a: (None, None, None, None))
    monkeypatch.setattr(precision, "predict", lambda model, **kw: {"rows": []})
    monkeypatch.setattr(precision, "write_precision_report", lambda result: None)
    monkeypatch.setattr(report, "print_sections", lambda sections: None)
    monkeypatch.setattr(report, "precision_sections", lambda result: [])

    res = CliRunner().invoke(main, ["reproduce", "precision", "--out", str(tmp_path / "a"), "--samples", "mdlm=12"])
    assert res.exit_code == 0, res.output
    seen = {(name, kw["draw"]): (kw["num_samples"], kw["batch_size"]) for name, kw in calls}
    batch = precision.AUDIT["batch_size"]
    assert seen == {
        ("mdlm", "joint"): (12, batch),
        ("mdlm", "two-stage"): (12, batch),
        ("prime", "joint"): (precision.SAMPLES["prime"], batch),
        ("prime", "two-stage"): (precision.SAMPLES["prime"], batch),
    }
    calls.clear()
    precision.run_precision(tmp_path / "b", samples=3)
    assert {kw["num_samples"] for _, kw in calls} == {3} and {kw["batch_size"] for _, kw in calls} == {3}

    bad = CliRunner().invoke(main, ["reproduce", "precision", "--out", str(tmp_path / "c"), "--samples", "arm=4"])
    assert bad.exit_code == 2 and "NAME one of mdlm, prime" in bad.output
    paper = CliRunner().invoke(main, ["reproduce", "precision", "--paper-scale", "--dry-run", "--samples", "mdlm=4"])
    assert paper.exit_code == 2 and "one number" in paper.output
    zero = CliRunner().invoke(main, ["reproduce", "precision", "--paper-scale", "--dry-run", "--samples", "0"])
    assert zero.exit_code == 2 and "integer >= 1" in zero.output
    with pytest.raises(PrimebenchError, match="integers >= 1"):
        precision.run_precision(tmp_path / "d", samples={"arm": 4})
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").rglob("*.json"))
