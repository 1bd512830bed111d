"""``primebench audit idle`` and ``primebench audit gumbel``: the paper's ISR column, measurement
through the real ancestral sampler, closed forms next to draws, records and bad inputs."""

from __future__ import annotations

import json
import math

import pytest
import torch
from click.testing import CliRunner

from harness.audit.idle_measure import measure_idle, uniform_model
from harness.cli import main

PAPER = {1: "36.77", 2: "13.52", 3: "4.97", 4: "1.83", 6: "0.25", 8: "0.03"}


pytestmark = pytest.mark.usefixtures("single_thread")


def _audit(*args: str):
    return CliRunner().invoke(main, ["audit", *args])


def _json(*args: str) -> dict:
    res = _audit(*args, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


# -- idle -----------------------------------------------------------------------------------------


def test_idle_reproduces_the_prime_table_analytically():
    args = ("idle", "--seq-len", "1024", "--steps", "1024", "--ell", "1,2,3,4,6,8", "--samples", "0")
    res = _audit(*args)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    for ell, pct in PAPER.items():
        row = next(line for line in lines if line.strip("│┃ ").startswith(f"{ell} "))
        assert row.count(f"{pct}%") >= 2, row  # the analytic column and the paper column
    rec = _json(*args)
    assert rec["schema"] == "primebench-record/1" and rec["evaluation"] == "idle"
    assert [r["ell"] for r in rec["rows"]] == list(PAPER)
    for r in rec["rows"]:
        assert f"{100 * r['isr']:.2f}" == PAPER[r["ell"]]
        assert r["isr"] == pytest.approx((1 - 1 / 1024) ** (1024 * r["ell"]), rel=1e-9)
        assert r["paper_percent"] == float(PAPER[r["ell"]]) and r["measured"] is None
        # MDLM/Prime loop convention: T (1 - ISR) + P(step T idle), and P(step T idle) = ISR (linear)
        assert r["expected_nfe"] == pytest.approx(1024 * (1 - r["isr"]) + r["isr"], rel=1e-9)
    assert rec["metrics"]["isr[ell=1]"]["kind"] == "exact"


def test_idle_paper_column_is_blank_outside_the_paper_setting():
    rec = _json("idle", "--seq-len", "512", "--steps", "1024", "--ell", "1", "--samples", "0")
    assert rec["rows"][0]["paper_percent"] is None and rec["protocol"]["paper"] is None


def test_idle_measured_through_the_sampler_agrees_with_analytic():
    rec = _json("idle", "--seq-len", "32", "--steps", "32", "--ell", "1,2", "--samples", "20")
    assert rec["protocol"]["measurement"]["sampler"] == "ancestral"
    for r in rec["rows"]:
        m = r["measured"]
        assert m["runs"] == 20 and m["isr_stderr"] > 0
        assert abs(m["isr"] - r["isr"]) <= 4 * m["isr_stderr"], r
        assert r["expected_nfe_sampler"] == pytest.approx(32 * (1 - r["isr"]), rel=1e-12)
        assert abs(m["nfe"] - r["expected_nfe_sampler"]) <= 4 * m["nfe_stderr"], r
        assert rec["metrics"][f"isr_measured[ell={r['ell']}]"]["kind"] == "estimate"


@pytest.mark.parametrize("schedule", ["loglinear", "polynomial:3"])
def test_idle_measured_matches_analytic_for_other_schedules(schedule):
    rec = _json("idle", "--seq-len", "16", "-T", "16", "--ell", "1,3", "--samples", "40", "--schedule", schedule)
    for r in rec["rows"]:
        m = r["measured"]
        assert abs(m["isr"] - r["isr"]) <= 4 * m["isr_stderr"] + 1e-12, r


def test_idle_batch_lowers_the_ratio():
    T, L, B = 64, 16, 4
    rec = _json("idle", "--seq-len", str(L), "-T", str(T), "--ell", "1,2", "--batch-size", str(B), "--samples", "0")
    for r in rec["rows"]:
        assert r["isr_batch"] == pytest.approx((1 - 1 / T) ** (B * L * r["ell"]), rel=1e-9)
        assert r["isr"] == pytest.approx((1 - 1 / T) ** (L * r["ell"]), rel=1e-9)
        assert r["isr_batch"] < r["isr"] and r["expected_nfe_batch"] > r["expected_nfe"]
    table = _audit(
        "idle", "--seq-len", str(L), "-T", str(T), "--ell", "1", "--batch-size", str(B), "--samples", "0"
    ).stdout
    assert f"ISR (batch B={B})" in table and f"{100 * (1 - 1 / T) ** (B * L):.2f}%" in table


def test_uniform_model_is_the_registered_family_on_the_prime_sub_token_path():
    from harness.audit.idle_measure import UniformDenoiser
    from harness.models import build_model, family_class
    from harness.sampling import generate

    model = uniform_model(vocab_size=5, seq_len=6, ell=3)
    # the family itself (its mask id, base, units, carry-over), only its network is uniform
    assert type(model) is family_class("prime") and (model.base, model.mask_id, model.carry_over) == (2, 2, True)
    assert not list(p for p in model.parameters() if p.numel())  # no weights
    out = generate(model, "ancestral", num_samples=4, batch_size=4, steps=8, generator=0)
    assert out.protocol["family"] == "prime" and out.protocol["ell"] == 3
    assert out.tokens.shape == (4, 6) and int(out.tokens.max()) < 5  # carry-over: only valid codes
    assert out.stats["invalid_codes"] == 0
    one = uniform_model(vocab_size=5, seq_len=6)
    assert type(one) is family_class("prime") and one.mask_id == 5 and one.units_per_token == 1
    # at ell = 1 the sub-token family's sampler is MDLM's: the same samples and NFE, draw for draw
    mdlm = build_model("mdlm", vocab_size=5, seq_len=6, d_model=2, n_layers=1, n_heads=1, schedule="linear")
    mdlm.backbone = UniformDenoiser(5)
    for T in (4, 16, 64):
        a, b = (generate(m.eval(), num_samples=6, batch_size=3, steps=T, generator=T) for m in (one, mdlm))
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.nfe, b.nfe)
    m = measure_idle(6, 8, 1, runs=3)
    assert m.runs == 3 and 0 <= m.isr <= 1 and m.nfe >= 1


def test_idle_out_writes_a_record(tmp_path):
    res = _audit("idle", "--seq-len", "8", "-T", "8", "--ell", "1", "--samples", "2", "--out", str(tmp_path))
    assert res.exit_code == 0, res.output
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1
    rec = json.loads(files[0].read_text())
    assert rec["schema"] == "primebench-record/1" and rec["evaluation"] == "idle"
    assert rec["rows"][0]["measured"]["runs"] == 2


@pytest.mark.parametrize(
    "args, message",
    [
        (("--ell", "0"), "ell"),
        (("--ell", "1,x"), "integers"),
        (("--seq-len", "-3"), "--seq-len"),
        (("--samples", "-1"), "--samples"),
        (("--schedule", "cosine"), "unknown schedule"),
    ],
)
def test_idle_bad_inputs_exit_2(args, message):
    res = _audit("idle", "--samples", "0", *args) if "--samples" not in args else _audit("idle", *args)
    assert res.exit_code == 2, res.output
    assert message in res.output


# -- gumbel ---------------------------------------------------------------------------------------


def test_gumbel_probs_closed_forms_and_draws():
    rec = _json("gumbel", "--probs", "0.1,0.2,0.3,0.4", "--samples", "50000")
    assert rec["schema"] == "primebench-record/1" and rec["evaluation"] == "gumbel"
    assert rec["truncation_levels"]["float32"] == pytest.approx(16.6355, abs=1e-4)
    assert rec["truncation_levels"]["float64"] == pytest.approx(36.7368, abs=1e-4)
    rows = rec["rows"]
    intended = next(r for r in rows if r["source"] == "intended")["probs"]
    prop = [r for r in rows if r["source"] == "prop5.2"]
    emp = [r for r in rows if r["source"] == "empirical"]
    assert len(prop) == 2 and len(emp) == 6  # 2 dtypes; 3 methods x 2 dtypes
    for r in prop + emp:
        assert sum(r["probs"]) == pytest.approx(1.0, abs=1e-12)
        assert r["kl"] >= 0 and r["entropy"] > 0
    fp32 = next(r for r in prop if r["dtype"] == "float32")["probs"]
    assert fp32[0] < intended[0] and fp32[3] > intended[3]  # truncation sharpens (lower temperature)
    for r in emp:  # 50000 draws: within 5 binomial standard errors of the intended probabilities
        for q, p in zip(r["probs"], intended):
            assert abs(q - p) <= 5 * math.sqrt(p * (1 - p) / 50000)
    res = _audit("gumbel", "--probs", "0.1,0.2,0.3,0.4", "--samples", "1000")
    assert res.exit_code == 0 and "Prop. 5.2" in res.stdout and "M = 16.6355" in res.stdout


def test_gumbel_probs_caps_the_displayed_classes():
    probs = ",".join(["1"] * 20)
    res = _audit("gumbel", "--probs", probs, "--samples", "100", "--method", "gumbel", "--dtype", "float32")
    assert res.exit_code == 0, res.output
    assert (
        "rest (9 classes)" in res.stdout
        and "KL nats" in res.stdout
        and "p[10]" in res.stdout
        and "p[11]" not in res.stdout
    )


def test_gumbel_mdlm_step_aggregates():
    rec = _json(
        "gumbel", "--mdlm-step", "1", "--steps", "1024", "--vocab", "50257", "--method", "gumbel", "--samples", "50"
    )
    rows = rec["rows"]
    assert {r["case"] for r in rows} == {"peaked", "flat"}
    for case in ("peaked", "flat"):
        mass = {(r["source"], r["dtype"]): r["unmask_mass"] for r in rows if r["case"] == case}
        assert mass[("intended", None)] == pytest.approx(1 / 1024, rel=1e-12)
        # fp32 loses unmasking mass (Zheng et al. Sec. 5); the grid model loses less than Prop. 5.2
        assert mass[("prop5.2", "float32")] < mass[("grid", "float32")] < mass[("intended", None)]
        assert mass[("prop5.2", "float64")] == pytest.approx(1 / 1024, rel=1e-6)
    flat = {r["source"] + str(r["dtype"]): r for r in rows if r["case"] == "flat"}
    assert flat["intended" + "None"]["entropy"] == pytest.approx(math.log(50257), rel=1e-12)
    assert all(r["draws"] == 50 and r["events"] is not None for r in rows if r["source"] == "empirical")
    res = _audit("gumbel", "--mdlm-step", "1", "--vocab", "50257", "--method", "gumbel", "--dtype", "float32")
    assert res.exit_code == 0, res.output
    assert "/ 333" in res.stdout and "2^24" in res.stdout and "M = 16.6355" in res.stdout


def test_gumbel_out_writes_a_record(tmp_path):
    res = _audit("gumbel", "--probs", "0.5,0.5", "--samples", "10", "--out", str(tmp_path))
    assert res.exit_code == 0, res.output
    (path,) = tmp_path.glob("*.json")
    rec = json.loads(path.read_text())
    assert rec["schema"] == "primebench-record/1" and rec["protocol"]["draws"] == 10


@pytest.mark.parametrize(
    "args, message",
    [
        (("--probs", "0.5,abc"), "not a comma-separated list of numbers"),
        (("--probs", "0.5,-0.1"), ">= 0"),
        (("--probs", "0.5,nan"), "finite"),
        (("--probs", "0.7"), "at least two"),
        ((), "exactly one of --probs"),
        (("--probs", "0.5,0.5", "--mdlm-step", "1"), "exactly one of --probs"),
        (("--probs", "0.5,0.5", "--vocab", "10"), "only with --mdlm-step"),
        (("--mdlm-step", "5", "--steps", "4"), "past the last step"),
        (("--probs", "0.5,0.5", "--dtype", "float16"), "unknown dtype"),
        (("--probs", "0.5,0.5", "--method", "gumbel,foo"), "unknown method"),
    ],
)
def test_gumbel_bad_inputs_exit_2(args, message):
    res = _audit("gumbel", *args)
    assert res.exit_code == 2, res.output
    assert message in res.output
