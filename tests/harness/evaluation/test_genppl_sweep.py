"""Gen PPL at matched entropy: the sweep's parsing, the interpolation's closed form, and the command
end to end (point records, the matched record, its plot and table)."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.errors import InputError
from harness.evaluation.genppl_sweep import matched_gen_ppl, parse_sweep


def test_parse_sweep():
    assert parse_sweep("temperature=1.0,0.8, 0.9") == ("temperature", [0.8, 0.9, 1.0])
    assert parse_sweep("nucleus-p=0.9,1") == ("nucleus-p", [0.9, 1.0])
    assert parse_sweep("nucleus=0.9,1") == ("nucleus-p", [0.9, 1.0])  # the old knob name, deprecated
    for bad, says in [
        ("top_k=1,2", "knob must be one of"),
        ("temperature=0.8", "at least two distinct"),
        ("temperature=0.8,0.8", "at least two distinct"),
        ("nucleus-p=0.5,1.5", "1.5 is not"),
        ("temperature=a,b", "must be numbers"),
        ("temperature", "knob must be one of"),
    ]:
        with pytest.raises(InputError, match=says):
            parse_sweep(bad)


def test_the_interpolation_is_log_linear_in_entropy_and_never_extrapolates():
    # log G = 1 + 2 H exactly: the interpolation recovers it anywhere between the points
    points = [
        {"value": v, "entropy": h, "gen_ppl": math.exp(1 + 2 * h), "gen_ppl_se": 0.0}
        for v, h in [(1, 3.0), (2, 4.0), (3, 5.0)]
    ]
    got = matched_gen_ppl(points, 4.25)
    assert got["value"] == pytest.approx(math.exp(1 + 2 * 4.25)) and got["between"] == [2, 3]
    assert matched_gen_ppl(points, 5.5) is None and matched_gen_ppl(points, 2.9) is None
    # the standard error from the bracketing points' errors, weights w and 1 - w
    two = [
        {"value": 1, "entropy": 0.0, "gen_ppl": 10.0, "gen_ppl_se": 1.0},
        {"value": 2, "entropy": 1.0, "gen_ppl": 10.0, "gen_ppl_se": 2.0},
    ]
    got = matched_gen_ppl(two, 0.25)  # w = 0.75 on the first point
    assert got["value"] == pytest.approx(10.0)
    assert got["stderr"] == pytest.approx(10.0 * math.sqrt((0.75 * 0.1) ** 2 + (0.25 * 0.2) ** 2))


def test_the_sweep_writes_its_points_and_the_matched_record(trained, tmp_path):
    ckpt, judge = trained("mdlm"), f"arm:{trained('arm')}"
    args = ["eval", "genppl", str(ckpt), "--sweep", "temperature=0.05,0.5", "--samples", "8", "--steps", "8"]
    res = CliRunner().invoke(main, [*args, "--judge", judge, "--no-mauve", "--out", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    matched = json.loads(res.stdout)
    assert matched["evaluation"] == "genppl-matched" and len(matched["curve"]) == 2
    points = [json.loads(p.read_text()) for p in tmp_path.glob("genppl-tiny-*.json")]
    assert sorted(p["protocol"]["temperature"] for p in points) == [0.05, 0.5]
    assert len(list(tmp_path.glob("*.samples.jsonl"))) == 2 and len(list(tmp_path.glob("genppl-matched-*.png"))) == 1
    low, high = sorted(matched["curve"], key=lambda p: p["entropy"])
    target = matched["references"]["data"]["metrics"]["entropy_model"]["value"]
    assert low["entropy"] < target < high["entropy"]  # these two temperatures bracket held-out text
    got = matched["metrics"]["gen_ppl_at_data_entropy"]["value"]
    assert min(low["gen_ppl"], high["gen_ppl"]) <= got <= max(low["gen_ppl"], high["gen_ppl"])
    table = CliRunner().invoke(main, ["table", *map(str, tmp_path.glob("genppl-matched-*.json")), "--format", "md"])
    assert table.exit_code == 0 and "Gen PPL at the data entropy" in table.output


def test_a_sweep_without_references_or_judge_is_refused(trained):
    res = CliRunner().invoke(
        main, ["eval", "genppl", str(trained("mdlm")), "--sweep", "temperature=0.5,1", "--no-references"]
    )
    assert res.exit_code == 2 and "drop --no-references" in res.output
