"""Gen PPL references: real text, a tiled batch and unigram draws scored under the samples' protocol,
and the collapse flag that per-sample numbers cannot raise."""

from __future__ import annotations

import pytest

from harness.evaluation.genppl_references import COLLAPSE_RATIO, collapse_check


@pytest.fixture(scope="module")
def record(trained):
    from harness.evaluation.genppl import run_genppl
    from harness.judges import load_judge

    judge = load_judge(f"arm:{trained('arm')}")
    rec, _ = run_genppl(trained("mdlm"), steps=8, samples=8, batch_size=8, judge_obj=judge, seed=1)
    return rec


def test_every_reference_is_scored_with_the_samples_metrics(record, trained):
    from harness.config import load_config
    from harness.data import get_packed
    from harness.metrics.entropy import MeanEntropy

    refs = record["references"]
    assert set(refs) == {"data", "tiled", "unigram", "provenance", "check"}
    assert "held_out" in refs["provenance"] and "mauve" in record["metrics"]
    mauve = record["protocol"]["mauve"]
    assert mauve["package"].startswith("mauve-text ") and mauve["samples"] == {"held_out": 8, "generated": 8}
    for name in ("data", "tiled", "unigram"):
        got = refs[name]["metrics"]
        assert set(got) == set(record["metrics"]) - {"nfe", "samples_per_s"}, name
        assert got["gen_ppl"]["units"] == record["metrics"]["gen_ppl"]["units"]  # the same judge
    cfg = load_config("tiny/mdlm")  # the preset the checkpoint was trained from
    L = record["protocol"]["seq_len"]
    held = get_packed(cfg.data.corpus, cfg.data.valid_split, tokenizer=cfg.data.tokenizer, seq_len=L)
    assert refs["provenance"]["data"].startswith(f"{cfg.data.corpus}:{cfg.data.valid_split}, the first 8 packed rows")
    per_sample = MeanEntropy()
    per_sample.update(held.input_ids[:8])
    assert refs["data"]["metrics"]["entropy_model"]["value"] == pytest.approx(per_sample.compute().mean)


def test_a_tiled_batch_keeps_per_sample_numbers_but_is_flagged_collapsed(record):
    """The issue's case: one real row as every sample. Per-sample entropy and Gen PPL stay near real
    text's; the pooled numbers separate them and the check flags it."""
    data, tiled = record["references"]["data"]["metrics"], record["references"]["tiled"]["metrics"]
    value = {name: (data[name]["value"], tiled[name]["value"]) for name in data}
    assert abs(value["entropy_model"][0] - value["entropy_model"][1]) < 0.15  # nats per sample
    assert abs(value["gen_ppl"][1] / value["gen_ppl"][0] - 1) < 0.15
    assert value["pooled_entropy"][1] == pytest.approx(value["entropy_model"][1])  # copies add nothing
    assert value["pooled_entropy"][0] > value["pooled_entropy"][1] + 0.2
    assert value["distinct_4"][1] < 0.5 * value["distinct_4"][0]
    assert value["cross_repeat_4"][1] == 1.0 and value["cross_repeat_4"][0] < 0.5
    assert value["mauve"][0] > 0.5 and value["mauve"][1] < 0.1  # MAUVE against other held-out rows
    assert collapse_check(value["distinct_4"][1], value["distinct_4"][0])["collapsed"]
    assert not collapse_check(value["distinct_4"][0], value["distinct_4"][0])["collapsed"]
    assert not collapse_check(
        record["references"]["unigram"]["metrics"]["distinct_4"]["value"], value["distinct_4"][0]
    )["collapsed"]


def test_the_table_shows_reference_rows_and_marks_a_collapsed_run(record):
    import copy

    from harness.views import build_table

    table = build_table([record], "genppl")
    labels = [(row[0].text, row[1].text) for row in table.rows]
    assert labels[1:] == [("data", "reference"), ("tiled", "reference"), ("unigram", "reference")]
    assert "(collapsed)" not in labels[0][0]
    collapsed = copy.deepcopy(record)  # a run whose samples are the tiled batch
    collapsed["metrics"].update(copy.deepcopy(record["references"]["tiled"]["metrics"]))
    d4, data_d4 = collapsed["metrics"]["distinct_4"]["value"], record["references"]["data"]["metrics"]["distinct_4"]
    collapsed["references"]["check"] = collapse_check(d4, data_d4["value"])
    table = build_table([collapsed], "genppl")
    assert table.rows[0][0].text.endswith("(collapsed)")
    assert any(f"{COLLAPSE_RATIO} x" in note.text for note in table.footnotes)


def test_reference_blocks_equal_to_round_off_are_one_set_of_rows(record):
    """The judge's scores of the same references move by about 1e-7 with batch and thread count: those
    blocks share one set of rows; a real difference gets a set per run, named."""
    import copy

    from harness.views import build_table

    other = copy.deepcopy(record)
    other["model"]["name"] = "other-run"
    other["references"]["data"]["metrics"]["gen_ppl"]["value"] *= 1 + 1e-7
    labels = [row[0].text for row in build_table([record, other], "genppl").rows]
    assert labels[2:] == ["data", "tiled", "unigram"]
    other["references"]["data"]["metrics"]["gen_ppl"]["value"] *= 1.01
    labels = [row[0].text for row in build_table([record, other], "genppl").rows]
    assert len(labels) == 2 + 6 and sum(label.startswith("data (") for label in labels) == 2
    assert any(label.startswith("data (other-run") for label in labels)


def test_no_references_leaves_the_record_without_them(trained):
    from harness.evaluation.genppl import run_genppl

    rec, _ = run_genppl(trained("mdlm"), steps=4, samples=2, batch_size=2, judge=None, references=False)
    assert "references" not in rec and "distinct_4" in rec["metrics"] and "mauve" not in rec["metrics"]


def test_mauve_needs_two_samples_a_side_and_a_judge_with_features():
    import torch

    from harness.errors import InputError, PrimebenchError
    from harness.judges import ProjectARMJudge
    from harness.metrics.mauve_score import mauve_between

    with pytest.raises(InputError, match="at least 2 samples"):
        mauve_between(torch.zeros(1, 4), torch.zeros(3, 4), seed=0)
    from types import SimpleNamespace

    judge = ProjectARMJudge("arm:x", "x", SimpleNamespace(vocab_size=10), torch.nn.Linear(2, 2), eos_id=0, context=8)
    with pytest.raises(PrimebenchError, match="no output layer onto its vocabulary"):
        judge.features([[1, 2]], max_length=8)


def test_too_few_samples_give_no_mauve_number_and_say_why(trained):
    """Three samples a side: MAUVE's two clusters would score a tiled batch like held-out text, so
    the record holds no MAUVE number for the samples or any reference, and its protocol says why."""
    from harness.evaluation.genppl import run_genppl
    from harness.judges import load_judge
    from harness.metrics.mauve_score import MIN_SAMPLES, too_few_for_mauve

    judge = load_judge(f"arm:{trained('arm')}")
    rec, _ = run_genppl(trained("mdlm"), steps=4, samples=3, batch_size=3, judge_obj=judge, seed=1)
    assert "mauve" not in rec["metrics"]
    assert all("mauve" not in rec["references"][n]["metrics"] for n in ("data", "tiled", "unigram"))
    assert "at least 8 samples on each side" in rec["protocol"]["mauve"]["skipped"]
    assert too_few_for_mauve(MIN_SAMPLES, MIN_SAMPLES) is None and too_few_for_mauve(100, MIN_SAMPLES - 1)
