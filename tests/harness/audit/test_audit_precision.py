"""The entropy metric (known values, batch invariance, float64 state) and the fp32-vs-fp64 audit:
its rows, seeding, record and plot, and the ``primebench audit precision`` command."""

from __future__ import annotations

import json
import math

import pytest
import torch
from click.testing import CliRunner

from harness.audit.precision import precision_audit, record
from harness.errors import PrimebenchError
from harness.metrics import MeanEntropy, unigram_entropy
from tests.toys import tiny

pytestmark = pytest.mark.usefixtures("single_thread")


# -- entropy --------------------------------------------------------------------------------------


def test_unigram_entropy_known_values():
    assert unigram_entropy([0, 1, 2, 3]) == pytest.approx(math.log(4), abs=1e-15)
    assert unigram_entropy(torch.tensor([5, 5, 5])) == 0.0
    assert unigram_entropy([1, 1, 2, 2], base=2) == pytest.approx(1.0, abs=1e-15)
    # p = (1/2, 1/4, 1/4): H = 1.5 bits
    assert unigram_entropy([7, 7, 8, 9], base=2) == pytest.approx(1.5, abs=1e-15)
    assert unigram_entropy([7, 7, 8, 9, 0, 0], ignore_ids=[0], base=2) == pytest.approx(1.5, abs=1e-15)
    with pytest.raises(PrimebenchError, match="no tokens"):
        unigram_entropy([0, 0], ignore_ids=[0])
    with pytest.raises(PrimebenchError, match="shape"):
        unigram_entropy(torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(PrimebenchError, match="nats"):
        unigram_entropy([1], base=10)


def test_mean_entropy_is_batch_invariant_with_float64_state():
    g = torch.Generator().manual_seed(0)
    samples = torch.randint(0, 6, (23, 16), generator=g)
    per_sample = torch.tensor([unigram_entropy(r) for r in samples], dtype=torch.float64)
    whole = MeanEntropy()
    whole.update(samples)
    parts = MeanEntropy()
    for chunk in samples.split(5):  # last partial batch of 3 counts too
        parts.update(chunk)
    a, b = whole.compute(), parts.compute()
    assert a.count == b.count == 23 and a.units == "nats"
    assert a.mean == pytest.approx(float(per_sample.mean()), rel=1e-14)
    assert b.mean == pytest.approx(a.mean, rel=1e-14)
    assert a.stderr == pytest.approx(float(per_sample.std() / math.sqrt(23)), rel=1e-9)
    assert b.stderr == pytest.approx(a.stderr, rel=1e-9)
    # two ranks: sum their states
    r0, r1 = MeanEntropy(), MeanEntropy()
    r0.update(samples[:10])
    r1.update(samples[10:])
    r0.load_state(r0.state() + r1.state())
    assert r0.compute().mean == pytest.approx(a.mean, rel=1e-14)
    whole.reset()
    with pytest.raises(PrimebenchError, match="before any update"):
        whole.compute()
    bits = MeanEntropy(base=2)
    bits.update(samples)
    assert bits.compute().mean == pytest.approx(a.mean / math.log(2), rel=1e-14) and bits.units == "bits"


# -- the audit logic --------------------------------------------------------------------------------


def test_precision_audit_rows_and_seeding():
    model = tiny("mdlm", C=11, L=8)
    audit = precision_audit(model, steps=(2, 4), num_samples=3, batch_size=2, seed=5)
    main, control = audit.main_rows(), audit.control_rows()
    assert [(r.steps, r.dtype) for r in main] == [(2, "float32"), (2, "float64"), (4, "float32"), (4, "float64")]
    assert [(r.sampler, r.dtype) for r in control] == [("first-hitting", "float32"), ("first-hitting", "float64")]
    assert all(r.nfe == 8 for r in control) and all(r.nfe <= r.steps for r in main)
    assert all(0 <= r.entropy <= math.log(8) and r.units == "nats" and r.num_samples == 3 for r in audit.rows)
    again = precision_audit(model, steps=(2, 4), num_samples=3, batch_size=2, seed=5)
    assert [r.entropy for r in again.rows] == [r.entropy for r in audit.rows]  # same seed, same samples
    assert audit.protocol["method"] == "mdlm-legacy" and audit.protocol["seed"] == 5
    assert audit.protocol["sampler_protocol"]["cache"] is True
    rec = json.loads(json.dumps(record(audit, checkpoint=None)))
    assert len(rec["rows"]) == 6 and rec["protocol"]["float32_flags"]["float32_matmul_precision"]
    assert rec["schema"] == "primebench-record/1" and rec["evaluation"] == "precision"
    assert rec["rows"][0]["metrics"]["entropy"]["kind"] == "estimate"
    bits = precision_audit(model, steps=(2,), num_samples=3, batch_size=2, controls=False, entropy_base=2, seed=5)
    assert len(bits.rows) == 2 and bits.rows[0].units == "bits"
    assert bits.rows[0].entropy == pytest.approx(audit.rows[0].entropy / math.log(2), rel=1e-12)


def test_a_family_without_a_token_by_token_sampler_runs_without_a_control():
    """UDLM (the posterior sampler redraws every position at every step): the audit runs its sampler in
    both precisions and records that there was no control, instead of failing on the missing one."""
    model = tiny("udlm", C=11, L=8)
    audit = precision_audit(model, steps=(2, 4), num_samples=3, batch_size=2, method="gumbel", seed=5)
    assert [(r.sampler, r.steps, r.dtype) for r in audit.rows] == [
        ("posterior", 2, "float32"),
        ("posterior", 2, "float64"),
        ("posterior", 4, "float32"),
        ("posterior", 4, "float64"),
    ]
    assert not audit.control_rows() and all(r.nfe == r.steps for r in audit.rows)
    assert audit.protocol["control_sampler"] is None and audit.protocol["control_protocol"] is None


def test_marginal_surprisal_known_values_and_audit_rows():
    from harness.audit.precision import all_masked_marginal, audit_from_record, marginal_surprisal

    log_p = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64).log()
    tokens = torch.tensor([[0, 0, 1, 2], [1, 1, 2, 2]])
    mean, se = marginal_surprisal(tokens, log_p)
    per = torch.tensor([(2 * math.log(2) + 2 * math.log(4)) / 4, math.log(4)], dtype=torch.float64)
    assert mean == pytest.approx(float(per.mean()), rel=1e-14)
    assert se == pytest.approx(float(per.std()) / math.sqrt(2), rel=1e-12)
    assert marginal_surprisal(tokens, log_p, base=2)[0] == pytest.approx(mean / math.log(2), rel=1e-14)
    assert math.isnan(marginal_surprisal(tokens[:1], log_p)[1])
    with pytest.raises(PrimebenchError, match="samples"):
        marginal_surprisal(tokens[0], log_p)

    model = tiny("mdlm", C=11, L=8)
    p = all_masked_marginal(model)
    assert p.shape == (11,) and float(p.sum()) == pytest.approx(1.0, abs=1e-12) and bool((p > 0).all())
    audit = precision_audit(model, steps=(2,), num_samples=3, batch_size=3, seed=1)
    assert all(r.surprisal is not None and r.surprisal > 0 and r.surprisal_stderr >= 0 for r in audit.rows)
    entropy = audit.protocol["surprisal"]["marginal_entropy"]
    assert entropy == pytest.approx(float(-(p * p.log()).sum()), rel=1e-12)
    rec = json.loads(json.dumps(record(audit, checkpoint=None)))
    assert rec["rows"][0]["metrics"]["surprisal"]["kind"] == "estimate"
    assert [r.surprisal for r in audit_from_record(rec).rows] == pytest.approx([r.surprisal for r in audit.rows])
    prime = precision_audit(tiny("prime", C=9, L=4, ell=2), steps=(2,), num_samples=2, batch_size=2, controls=False)
    assert all(r.surprisal is not None for r in prime.rows)
    arm = precision_audit(tiny("arm", C=9, L=6), steps=(4,), num_samples=2, bos_id=8)
    assert all(r.surprisal is None for r in arm.rows) and arm.protocol["surprisal"] is None


def test_precision_audit_arm_and_errors():
    arm = tiny("arm", C=9, L=6)
    audit = precision_audit(arm, steps=(4,), num_samples=2, bos_id=8)
    assert [(r.sampler, r.steps, r.control, r.nfe) for r in audit.rows] == [
        ("autoregressive", None, False, 5.0),
        ("autoregressive", None, False, 5.0),
    ]
    with pytest.raises(PrimebenchError, match="bos_id"):
        precision_audit(arm, num_samples=2)
    with pytest.raises(PrimebenchError, match="method"):
        precision_audit(tiny("mdlm", C=5, L=4), steps=(2,), num_samples=2, method="gumbal")
    with pytest.raises(PrimebenchError, match="dtype"):
        precision_audit(tiny("mdlm", C=5, L=4), steps=(2,), num_samples=2, dtypes=("bfloat16",))


# -- the command ----------------------------------------------------------------------------------


def test_cli_precision_table_json_and_plot(trained, tmp_path):
    from harness.cli import main

    ckpt = str(trained("mdlm"))
    runner = CliRunner()
    out = tmp_path / "audit"
    result = runner.invoke(
        main, ["audit", "precision", ckpt, "--steps", "4,16", "--samples", "4", "--batch-size", "4", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    table = result.stdout
    for text in ("float32", "float64", "first-hitting (control)", "ancestral", "entropy (nats)"):
        assert text in table
    [json_path] = list(out.glob("precision-*.json"))
    rec = json.loads(json_path.read_text())
    assert [(r["protocol"]["sampler"], r["protocol"]["steps"], r["protocol"]["dtype"]) for r in rec["rows"]] == [
        ("ancestral", 4, "float32"),
        ("ancestral", 4, "float64"),
        ("ancestral", 16, "float32"),
        ("ancestral", 16, "float64"),
        ("first-hitting (control)", None, "float32"),
        ("first-hitting (control)", None, "float64"),
    ]
    assert rec["model"]["checkpoint_sha256"] and rec["protocol"]["steps"] == [4, 16]
    assert json_path.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from harness.views import build_table, load_records, render

    assert "float32" in render(build_table(load_records([out]), "precision"), "md")

    result = runner.invoke(
        main,
        [
            "audit",
            "precision",
            ckpt,
            "--steps",
            "4",
            "--samples",
            "2",
            "--no-controls",
            "--dtype",
            "float64",
            "--bits",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    rec = json.loads(result.stdout)
    assert len(rec["rows"]) == 1 and rec["rows"][0]["protocol"]["dtype"] == "float64"
    assert rec["rows"][0]["metrics"]["entropy"]["units"].startswith("bits")

    result = runner.invoke(main, ["audit", "precision", ckpt, "--steps", "4", "--sampler", "autoregressive"])
    assert result.exit_code == 2 and "does not support" in result.output


def test_cli_precision_with_judge_reports_gen_ppl(trained, tmp_path):
    from harness.cli import main

    result = CliRunner().invoke(
        main,
        [
            "audit",
            "precision",
            str(trained("mdlm")),
            "--steps",
            "4",
            "--samples",
            "2",
            "--no-controls",
            "--judge",
            f"arm:{trained('arm')}",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    rec = json.loads(result.stdout)
    assert rec["protocol"]["judge"].startswith("arm:")
    assert all(r["metrics"]["gen_ppl"]["value"] > 1 for r in rec["rows"])
