import json
import math

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.evaluation.ppl import run_ppl
from harness.metrics.nll import NLLAccumulator
from harness.nll import NLL


def test_accumulator_is_token_weighted_and_batch_invariant():
    import torch

    nats = torch.tensor([10.0, 20.0, 30.0], dtype=torch.float64)
    tokens = torch.tensor([5.0, 10.0, 20.0], dtype=torch.float64)
    se = torch.tensor([1.0, 2.0, 2.0], dtype=torch.float64)
    one = NLLAccumulator()
    one.update(NLL(nats=nats, tokens=tokens, kind="bound", stderr=se, num_samples=4))
    split = NLLAccumulator()
    for i in range(3):
        split.update(
            NLL(nats=nats[i : i + 1], tokens=tokens[i : i + 1], kind="bound", stderr=se[i : i + 1], num_samples=4)
        )
    a, b = one.compute(), split.compute()
    assert a.nll == pytest.approx(60 / 35) and b.nll == pytest.approx(a.nll)
    assert a.stderr == pytest.approx(3 / 35) and b.stderr == pytest.approx(a.stderr)
    assert a.stderr_method == "per-sequence"


def test_arm_ppl_exact_and_independent_of_batch_size(trained):
    recs = [run_ppl(trained("arm"), batch_size=bs, max_rows=10) for bs in (1, 3, 10)]
    values = [r["metrics"]["nll"]["value"] for r in recs]
    assert values[0] == pytest.approx(values[1], abs=1e-6) == pytest.approx(values[2], abs=1e-6)
    rec = recs[0]
    assert rec["metrics"]["nll"]["kind"] == "exact" and rec["metrics"]["nll"]["stderr"] == 0.0
    assert rec["protocol"]["tokens_scored"] == 10 * 63  # L - 1 targets per row
    assert math.isclose(rec["metrics"]["ppl"]["value"], math.exp(values[0]))


def test_mdlm_bound_batch_size_only_moves_mc_noise(trained):
    a = run_ppl(trained("mdlm"), batch_size=2, mc_samples=8, max_rows=8, seed=1)["metrics"]["nll"]
    b = run_ppl(trained("mdlm"), batch_size=8, mc_samples=8, max_rows=8, seed=2)["metrics"]["nll"]
    assert a["kind"] == b["kind"] == "bound"
    assert abs(a["value"] - b["value"]) < 4 * math.hypot(a["stderr"], b["stderr"])


def test_single_sample_uses_between_sequence_stderr(trained):
    rec = run_ppl(trained("masked"), max_rows=8)
    assert rec["protocol"]["stderr_method"] == "between-sequence"
    assert rec["protocol"]["tokens_scored"] == 8 * 64  # diffusion scores all L positions
    assert rec["metrics"]["nll"]["stderr"] > 0


def test_prime_both_estimators_labelled(trained):
    rec = run_ppl(trained("prime"), estimator="both", mc_samples=4, max_rows=4)
    m = rec["metrics"]
    assert m["nll"]["kind"] == "bound" and m["nll_token_joint"]["kind"] == "paper-objective"
    assert rec["protocol"]["ell"] == 2 and rec["protocol"]["base"] == 17


def test_cli_json_out_and_errors(trained, tmp_path):
    runner = CliRunner()
    res = runner.invoke(
        main,
        [
            "eval",
            "ppl",
            str(trained("prime")),
            "--max-rows",
            "2",
            "--estimator",
            "both",
            "--json",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout)
    assert set(rec["metrics"]) == {"nll", "ppl", "nll_token_joint", "ppl_token_joint"}
    assert len(list(tmp_path.glob("ppl-*.json"))) == 1
    human = runner.invoke(main, ["eval", "ppl", str(trained("prime")), "--max-rows", "2", "--estimator", "both"])
    assert human.exit_code == 0 and "paper objective (not a bound)" in human.stdout and "<=" in human.stdout
    too_long = runner.invoke(main, ["eval", "ppl", str(trained("arm")), "--seq-len", "4096"])
    assert too_long.exit_code == 2 and "longer than the model" in too_long.output
    missing = runner.invoke(main, ["eval", "ppl", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "does not exist" in missing.output
    wrong = runner.invoke(main, ["eval", "ppl", str(trained("arm")), "--estimator", "token_joint"])
    assert wrong.exit_code == 2 and "only applies to prime" in wrong.output


def test_zeroshot_preset_from_local_copy(trained):
    from pathlib import Path

    fixture = Path(__file__).parent.parent.parent / "fixtures" / "zeroshot" / "ptb.txt"
    rec = run_ppl(trained("arm"), data=f"ptb@{fixture}", seq_len=32, remainder="pad")
    p = rec["protocol"]
    assert p["dataset"].startswith("ptb") and p["detokenizer"] == "ptb" and p["split"] == "all"
    assert p["packing"]["eos_between_docs"] is True
    no_eos = run_ppl(trained("arm"), data=f"ptb@{fixture}", seq_len=32, remainder="pad", eos_between_docs=False)
    assert no_eos["protocol"]["packing"]["eos_between_docs"] is False
    assert no_eos["protocol"]["tokens_scored"] < p["tokens_scored"]


def test_sharded_over_two_processes_equals_one(trained, tmp_path):
    """torchrun with two gloo ranks scores disjoint batches and reduces once: same number as one process."""
    import os
    import shutil
    import subprocess
    import sys

    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    ckpt = str(trained("mdlm"))
    args = ["eval", "ppl", ckpt, "--max-rows", "12", "--batch-size", "4", "--mc-samples", "2", "--json"]
    proc = subprocess.run(
        [torchrun, "--nproc_per_node", "2", "--master_port", "29519", "-m", "harness", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    sharded = json.loads(proc.stdout)
    single = run_ppl(ckpt, max_rows=12, batch_size=4, mc_samples=2)
    assert sharded["protocol"]["world_size"] == 2
    for key in ("nll", "ppl"):
        assert sharded["metrics"][key]["value"] == pytest.approx(single["metrics"][key]["value"], rel=1e-9)
        assert sharded["metrics"][key]["stderr"] == pytest.approx(single["metrics"][key]["stderr"], rel=1e-9)
    assert sharded["protocol"]["tokens_scored"] == single["protocol"]["tokens_scored"]


def test_ignore_bos_gives_position_zero_as_context(trained):
    from harness.errors import DataError

    arm = [run_ppl(trained("arm"), max_rows=6, ignore_bos=flag) for flag in (False, True)]
    # the ARM never scores its first token: the flag changes nothing but the record
    assert arm[0]["metrics"]["nll"]["value"] == arm[1]["metrics"]["nll"]["value"]
    assert arm[1]["protocol"]["ignore_bos"] is True and arm[0]["protocol"]["ignore_bos"] is False
    plain, ignored = (run_ppl(trained("mdlm"), max_rows=6, mc_samples=2, ignore_bos=flag) for flag in (False, True))
    L = plain["protocol"]["seq_len"]
    assert plain["protocol"]["tokens_scored"] == 6 * L and ignored["protocol"]["tokens_scored"] == 6 * (L - 1)
    assert ignored["metrics"]["nll"]["value"] != plain["metrics"]["nll"]["value"]
    with pytest.raises(DataError, match="ignore-bos"):
        run_ppl(trained("mdlm"), data="image:digits:test", ignore_bos=True)


@pytest.mark.parametrize("family", ["arm", "mdlm", "prime"])
def test_references_are_scored_on_the_models_own_tokens(trained, family):
    """The unigram reference equals an independent computation on the same rows and positions:
    L - 1 targets per row for the ARM, all L for the diffusion families (and the ignore-BOS rows)."""
    import torch

    from harness import load
    from harness.data import get_packed

    rec = run_ppl(trained(family), max_rows=6)
    refs = rec["references"]
    assert refs["tokens_scored"] == rec["protocol"]["tokens_scored"] == 6 * (63 if family == "arm" else 64)
    assert refs["fit_on"] == "wiki-embedded:train" and refs["unigram"]["nll"]["kind"] == "exact"
    _, tok, cfg = load(trained(family))
    train = get_packed("wiki-embedded", "train", tokenizer=tok, seq_len=64)
    valid = get_packed("wiki-embedded", "validation", tokenizer=tok, seq_len=64).input_ids[:6]
    n = torch.bincount(train.input_ids[train.attention_mask.bool()], minlength=tok.vocab_size).double()
    p = (n + 1) / (n.sum() + tok.vocab_size)
    scored = valid[:, 1:] if family == "arm" else valid
    assert refs["unigram"]["nll"]["value"] == pytest.approx(float(-p[scored].log().mean()), rel=1e-9)
    assert refs["bigram"]["nll"]["value"] < refs["unigram"]["nll"]["value"]  # text has bigram structure
    if family != "arm":
        bos = run_ppl(trained(family), max_rows=6, ignore_bos=True)["references"]
        assert bos["tokens_scored"] == 6 * 63


def test_a_model_no_better_than_unigram_is_flagged_in_the_table_and_on_stderr(trained, tmp_path):
    from harness.views import build_table, render

    runner = CliRunner()
    res = runner.invoke(main, ["eval", "ppl", str(trained("mdlm")), "--max-rows", "4", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    record = json.loads(next(tmp_path.glob("ppl-*.json")).read_text())
    flagged = record["metrics"]["nll"]["value"] >= record["references"]["unigram"]["nll"]["value"]
    assert flagged  # 20 steps of a tiny model do not beat the unigram model
    assert "no better than a unigram model" in res.stderr and "unigram reference (nll)" in res.stdout
    text = render(build_table([record], "ppl"), "md")
    assert "| unigram | reference |" in text and "| bigram | reference |" in text and "(!)" in text
    fake = json.loads(json.dumps(record))
    fake["metrics"]["nll"]["value"] = record["references"]["unigram"]["nll"]["value"] - 0.5
    assert "(!)" not in render(build_table([fake], "ppl"), "md")
    off = runner.invoke(main, ["eval", "ppl", str(trained("mdlm")), "--max-rows", "2", "--no-references", "--json"])
    assert off.exit_code == 0 and "references" not in json.loads(off.stdout)


def test_the_number_is_a_short_path_from_run_ppl(trained, monkeypatch):
    """docs/ppl-trace.md: from run_ppl to the network the path is short (a hop budget, not the names of
    the hops, so a helper on the path does not break this), every hop is a function of the project's
    packages (no wrapper from elsewhere in between, torch's no_grad aside), and the likelihood goes
    through the family's own nll and the shared Monte-Carlo estimator."""
    import inspect
    from pathlib import Path

    from harness.models import family_class

    MDLM = family_class("mdlm")
    root = Path(__file__).resolve().parents[3]
    packages = tuple(str(root / p) for p in ("harness", "prime", "baselines"))
    chains = []
    real = MDLM.log_probs

    def spy(self, *args, **kwargs):
        stack = inspect.stack()[1:]
        outer = next(i for i, f in enumerate(stack) if f.function == "run_ppl")
        frames = [f for f in stack[: outer + 1] if "/torch/" not in f.filename]  # torch.no_grad's decorator
        chains.append([(f"{Path(f.filename).stem}.{f.function}", f.filename.startswith(packages)) for f in frames])
        return real(self, *args, **kwargs)

    checkpoint = trained("mdlm")  # trained before the spy goes in
    monkeypatch.setattr(MDLM, "log_probs", spy)
    run_ppl(checkpoint, max_rows=2, batch_size=2, references=False)
    assert chains
    for chain in chains:
        names = [name for name, _ in chain]
        assert len(chain) <= 8, names  # the hop budget (6 today)
        assert all(ours for _, ours in chain), names  # no frame of another package in between
        assert names[-1] == "ppl.run_ppl" and "ppl.evaluate_nll" in names, names
        assert any(n.endswith(".nll") for n in names) and "diffusion.monte_carlo_nelbo" in names, names
