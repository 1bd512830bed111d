"""``primebench audit bound``: reference numbers by enumeration, labels, JSON, checkpoints, errors."""

from __future__ import annotations

import json
import math

import pytest
import torch
from click.testing import CliRunner

from harness.audit.bound import ABOVE, BELOW, checkpoint_audit, toy_audit
from harness.cli import main
from harness.errors import PrimebenchError
from harness.models import build_model


def _invoke(*args: str):
    return CliRunner().invoke(main, ["audit", "bound", *args])


def test_toy_table_shows_the_worked_example_and_the_verdicts():
    res = _invoke("--seeds", "2")
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "0.8342" in out and "1.0182" in out
    assert "-0.1840" in out  # gap = paper objective - exact for the worked example
    assert "not a bound" in out and "bound holds here" in out
    assert "sub-token bound >= exact NLL in all 5 rows" in out


def test_toy_json_record():
    res = _invoke("--seeds", "2", "--toy", "5,2,2", "--json")
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout)
    assert rec["schema"] == "primebench-record/1" and rec["evaluation"] == "bound" and rec["protocol"]["C"] == 5
    assert rec["subtoken_bound_always_holds"] is True
    rows = rec["rows"]
    assert len(rows) == 1 + 2 * 2
    worked = rows[0]
    m = {k: v["value"] for k, v in worked["metrics"].items()}
    assert round(m["exact_nll"], 4) == 1.0182 == round(worked["data_entropy"], 4)
    assert round(m["subtoken_bound"], 4) == 1.0182
    assert round(m["token_joint"], 4) == 0.8342
    assert {k: v["kind"] for k, v in worked["metrics"].items()} == {
        "exact_nll": "exact",
        "subtoken_bound": "bound",
        "token_joint": "paper-objective",
    }
    assert all(v["units"] == "nats/token" for v in worked["metrics"].values())
    assert worked["gap_paper_minus_exact"] == pytest.approx(m["token_joint"] - m["exact_nll"])
    assert worked["verdict"] == BELOW and all(v["stderr"] == 0.0 for v in worked["metrics"].values())
    for row in rows:
        m = {k: v["value"] for k, v in row["metrics"].items()}
        assert set(m) == {"exact_nll", "subtoken_bound", "token_joint"} and "case" in row["protocol"]
        assert m["subtoken_bound"] >= m["exact_nll"] - 1e-9
        assert row["verdict"] == (BELOW if m["token_joint"] < m["exact_nll"] else ABOVE)
    from harness.views import build_table, render

    assert "0.8342" in render(build_table([rec], "bound"), "md")


def test_toy_rows_against_known_answers():
    audit = toy_audit(6, 2, 2, seeds=3, seed=5)
    ideal = [r for r in audit.rows if r.name.startswith("ideal")]
    table = [r for r in audit.rows if r.name.startswith("random table")]
    assert len(ideal) == len(table) == 3
    for r in ideal:  # the network is the true conditional: exact = sub-token bound = entropy
        assert r.exact_nll == pytest.approx(r.data_entropy, abs=1e-9)
        assert r.subtoken_bound == pytest.approx(r.exact_nll, abs=1e-9)
        assert r.token_joint < r.exact_nll - 1e-3 and r.verdict == BELOW  # H - I(Y1; Y2) / 2
    for r in table:
        assert r.subtoken_bound > r.exact_nll + 1e-3  # a random network: the bound is loose
        assert 0 < r.exact_nll < math.log(6) + 1e-9  # an entropy of the model's own distribution
    # ell = 1: marginal and joint coincide, the paper objective is MDLM's bound.
    flat = toy_audit(5, 1, 3, seeds=1)
    for r in flat.rows[1:]:
        assert r.token_joint == pytest.approx(r.subtoken_bound, abs=1e-9)
        assert r.gap >= -1e-9


def test_bad_toy_strings_and_sizes_fail_with_a_message():
    for bad in ("6,2", "a,b,c", "6,2,2,1", "1,2,2"):
        res = _invoke("--toy", bad)
        assert res.exit_code != 0
        assert "C,ELL,L" in res.output, res.output
    res = _invoke("--toy", "4,2,9")  # L * ell = 18 > 16
    assert res.exit_code == 2
    assert "L*ell = 9*2 = 18 exceeds the limit" in res.output and "fix:" in res.output
    res = _invoke("--toy", "9,2,5")  # 9^5 sequences x 2^10 patterns
    assert res.exit_code == 2 and "exceed the limit" in res.output
    with pytest.raises(PrimebenchError):
        toy_audit(6, 2, 2, seeds=-1)


def test_prime_checkpoint_shows_both_labelled_numbers(trained):
    path = str(trained("prime"))
    res = _invoke(path, "--max-rows", "8", "--mc-samples", "3")
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "UPPER BOUND on the NLL (sub-token bound)" in out
    assert "PAPER OBJECTIVE (token-joint L_vb), not a bound" in out
    assert "ppl" in out
    res = _invoke(path, "--max-rows", "8", "--mc-samples", "3", "--json")
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout)
    assert rec["protocol"]["checkpoint"] == path and rec["protocol"]["split"] == "validation"
    assert rec["model"]["family"] == "prime" and rec["model"]["checkpoint_sha256"]
    (row,) = rec["rows"]
    assert "exact_nll" not in row["metrics"] and row["protocol"]["method"] == "monte-carlo"
    assert {k: v["kind"] for k, v in row["metrics"].items()} == {
        "subtoken_bound": "bound",
        "token_joint": "paper-objective",
    }
    for key in ("subtoken_bound", "token_joint"):
        assert row["metrics"][key]["stderr"] > 0 and 0 < row["metrics"][key]["value"] < 10
    assert _invoke(path, "--toy", "6,2,2").exit_code != 0  # toy shapes only without a checkpoint


def test_checkpoint_audit_labels_each_family():
    C, L = 9, 8
    x = torch.randint(0, C, (5, L), generator=torch.Generator().manual_seed(0))
    sizes = dict(vocab_size=C, seq_len=L, d_model=16, n_layers=1, n_heads=2)
    arm = checkpoint_audit(build_model("arm", **sizes), x, None, num_samples=2, batch_size=2)
    (row,) = arm.rows
    assert row.exact_nll is not None and row.subtoken_bound is None and row.token_joint is None
    assert row.tokens == 5 * (L - 1)
    assert row.to_record()["kinds"] == {"exact_nll": "exact"}
    assert row.exact_nll == pytest.approx(math.log(C), rel=1e-5)  # zero-initialised output layer: uniform
    masked = checkpoint_audit(build_model("masked", **sizes), x, None, num_samples=2, batch_size=2)
    (row,) = masked.rows
    assert row.subtoken_bound == pytest.approx(math.log(C), rel=1e-5)  # uniform prediction: bound = log C
    assert row.to_record()["kinds"] == {"subtoken_bound": "bound"} and row.exact_nll is None
    with pytest.raises(PrimebenchError, match="mc-samples"):
        checkpoint_audit(build_model("mdlm", **sizes), x, None, num_samples=1)


@pytest.mark.parametrize(
    "source, families",
    [
        ("prime-ckpt:{}/prime-l2.ckpt", {"subtoken_bound": "bound", "token_joint": "paper-objective"}),
        ("mdlm-hf:{}/mdlm-owt", {"subtoken_bound": "bound"}),
        ("ar-ckpt:{}/ar.ckpt", {"exact_nll": "exact"}),
    ],
)
def test_release_checkpoints_by_prefix_as_every_audit_takes_them(release_files, source, families):
    source = source.format(release_files)
    res = _invoke(source, "--max-rows", "2", "--batch-size", "2", "--mc-samples", "2", "--json")
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout)
    assert rec["protocol"]["checkpoint"] == source and rec["protocol"]["corpus"] == "wiki-embedded"
    assert rec["model"]["checkpoint_sha256"]
    (row,) = rec["rows"]
    assert {k: v["kind"] for k, v in row["metrics"].items()} == families


# --- MDM-Prime-v2's encodings: binary digits and index shuffling ------------------------------------


def test_binary_toys_are_enumerated_with_ceil_log2_C_digits():
    audit = toy_audit(16, "binary", 1, seeds=2, seed=1)
    assert audit.protocol["ell"] == 4 and audit.protocol["encoding"] == "binary"
    ideal = [r for r in audit.rows if r.name.startswith("ideal")]
    assert all("ell=4 binary" in r.name for r in ideal)
    for r in ideal:
        assert r.exact_nll == pytest.approx(r.data_entropy, abs=1e-9) and r.verdict == BELOW
    assert audit.subtoken_always_holds
    res = _invoke("--toy", "8,binary,2", "--seeds", "1", "--json")  # 3 digits x 2 tokens: 6 units
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["protocol"]["ell"] == 3
    res = _invoke("--toy", "6,ternary,2")
    assert res.exit_code != 0 and "binary" in res.output


def test_a_shuffle_relabels_the_ideal_rows_data():
    """Shuffling the classes of the ideal model's data changes which codes share digits, so the paper
    objective moves; the exact NLL is the entropy either way."""
    plain = toy_audit(12, 2, 1, seeds=1, seed=4)
    mixed = toy_audit(12, 2, 1, seeds=1, seed=4, shuffle_seed=1)
    a, b = (next(r for r in audit.rows if r.name.startswith("ideal")) for audit in (plain, mixed))
    assert a.exact_nll == pytest.approx(b.exact_nll, abs=1e-12)
    assert abs(a.token_joint - b.token_joint) > 1e-3 and "shuffled by seed 1" in b.name
    assert mixed.protocol["shuffle_seed"] == 1


@pytest.mark.parametrize("C, ell", [(12, 2), (12, 4), (7, 3), (16, 4), (30, 5)])
def test_the_ideal_one_token_closed_form_equals_enumeration(C, ell):
    from prime.toy import ConstantDenoiser
    from prime.toy_audit import _expectations, ideal_one_token

    g = torch.Generator().manual_seed(C + ell)
    p = -(torch.log(torch.rand(C, generator=g, dtype=torch.float64)) ** 3)  # a skewed law
    p = p / p.sum()
    closed = ideal_one_token(p, ell)
    enumerated = _expectations(ConstantDenoiser(torch.log(p)), torch.arange(C)[:, None], p, C=C, ell=ell)
    assert closed == pytest.approx(enumerated, abs=1e-10)


def test_unigram_audit_of_the_embedded_corpus():
    res = _invoke("--unigram", "bytes", "--json")
    assert res.exit_code == 0, res.output
    rec = json.loads(res.output)
    rows = {row["protocol"]["case"]: row for row in rec["rows"]}
    assert rec["protocol"]["tokenizer"] == "bytes" and rec["protocol"]["tokens_counted"] > 100_000
    names = list(rows)
    assert len(names) == 7 and "ell=9 binary, shuffled by seed 0" in names[-1]  # 257 byte-level ids
    H = rows[names[0]]["metrics"]["exact_nll"]["value"]
    assert 3.0 < H < math.log(257)
    previous = None
    for name, row in rows.items():
        m = row["metrics"]
        assert m["exact_nll"]["value"] == pytest.approx(H) and m["subtoken_bound"]["value"] == pytest.approx(H)
        if "ell=1" in name:
            assert m["token_joint"]["value"] == pytest.approx(H)
        else:
            assert m["token_joint"]["value"] < H - 0.05 and row["verdict"].startswith("paper objective is BELOW")
        if "shuffled" not in name and "ell=1" not in name:
            assert previous is None or m["token_joint"]["value"] < previous  # the gap grows with ell
            previous = m["token_joint"]["value"]
    for bad in (["--unigram", "bytes", "--toy", "6,2,2"], ["--unigram", "bytes", "some-checkpoint"]):
        res = _invoke(*bad)
        assert res.exit_code == 2 and "--unigram" in res.output
    res = _invoke("--unigram", "nonsense:3")
    assert res.exit_code != 0 and "Traceback" not in res.output


def test_each_toy_row_carries_its_own_sizes_into_the_table():
    """The worked example is C = 4 whatever --toy says; one-token rows have L = 1."""
    from harness.audit.bound import toy_audit
    from harness.views import build_table, render

    record = toy_audit(6, 2, 2, seeds=1).to_record()
    shapes = {item["protocol"]["case"].split(" (")[0]: item["protocol"] for item in record["rows"]}
    assert (shapes["worked example"]["C"], shapes["worked example"]["L"]) == (4, 1)
    assert (shapes["ideal model, random data p"]["C"], shapes["ideal model, random data p"]["L"]) == (6, 1)
    assert (shapes["random table denoiser"]["C"], shapes["random table denoiser"]["L"]) == (6, 2)
    lines = [line for line in render(build_table([record], "bound"), "md").splitlines() if "worked" in line]
    assert len(lines) == 1 and "| 4 | 2 | 1 |" in lines[0]
