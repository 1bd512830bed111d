"""``eval genppl --samples-file``: samples made elsewhere scored under our protocol; a run's own
samples round-trip to the same metrics; every malformed line is named."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from harness.cli import main


def _genppl(*args):
    res = CliRunner().invoke(main, ["eval", "genppl", *map(str, args), "--json"])
    return res


def test_the_samples_that_out_writes_round_trip_to_the_same_metrics(trained, tmp_path):
    ckpt, judge = trained("mdlm"), f"arm:{trained('arm')}"
    first = _genppl(ckpt, "--samples", 4, "--batch-size", 2, "--steps", 4, "--judge", judge, "--out", tmp_path / "a")
    assert first.exit_code == 0, first.output
    drawn = json.loads(first.stdout)
    (samples_file,) = (tmp_path / "a").glob("*.samples.jsonl")
    again = _genppl(ckpt, "--samples-file", samples_file, "--batch-size", 2, "--judge", judge)
    assert again.exit_code == 0, again.output
    scored = json.loads(again.stdout)
    assert set(scored["metrics"]) == set(drawn["metrics"]) - {"nfe", "samples_per_s"}
    for name, m in scored["metrics"].items():
        assert m["value"] == pytest.approx(drawn["metrics"][name]["value"], rel=1e-9, abs=1e-12), name
    assert scored["references"]["data"] == drawn["references"]["data"]
    given = scored["protocol"]["samples_file"]
    assert given["samples"] == 4 and given["given_as"] == ["tokens"] and len(given["sha256"]) == 64
    assert scored["protocol"]["sampler"].startswith("external")

    # text is encoded with the checkpoint's tokenizer: the same samples as its ids score the same
    from harness.data.tokenizers import get_tokenizer

    tokenizer = get_tokenizer(drawn["protocol"]["tokenizer"])
    plain = ["the cat sat on the mat and looked at the door", "a river runs through the old town at night"]
    texts, ids = tmp_path / "texts.jsonl", tmp_path / "ids.jsonl"
    texts.write_text("".join(json.dumps({"text": t}) + "\n" for t in plain))
    ids.write_text("".join(json.dumps({"tokens": tokenizer.encode(t)}) + "\n" for t in plain))
    by_text, by_ids = (
        json.loads(_genppl(ckpt, "--samples-file", f, "--judge", judge, "--no-mauve").stdout) for f in (texts, ids)
    )
    assert by_text["protocol"]["samples_file"]["given_as"] == ["text"]
    assert by_text["metrics"] == by_ids["metrics"]


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ('{"tokens": [1, 2]}\nnot json\n', "line 2 is not JSON"),
        ("[1, 2, 3]\n", "line 1 is a JSON list, not an object"),
        ('{"tokens": [1, 2]}\n{"ids": [1]}\n', 'line 2 has neither "tokens" nor "text"'),
        ('{"tokens": [1, 99999]}\n', "line 1: id 99999 is outside the tokenizer"),
        ('{"tokens": [1, "a"]}\n', 'line 1: "tokens" must be a list of integer ids'),
        ('{"tokens": [1], "tokenizer": "gpt2"}\n', "line 1 was tokenized with 'gpt2'"),
        ('{"tokens": []}\n', "line 1 is an empty sample"),
        ("\n\n", "has no samples"),
        ('{"text": "fine"}\n{"text": "a \\ud800 b"}\n', "line 2: \"text\" holds '\\ud800' at character 2"),
    ],
)
def test_a_malformed_samples_file_names_the_line(trained, tmp_path, content, says):
    path = tmp_path / "s.jsonl"
    path.write_text(content)
    res = _genppl(trained("mdlm"), "--samples-file", path, "--judge", f"arm:{trained('arm')}")
    assert res.exit_code == 2, res.output
    assert says in res.output and "fix:" in res.output and "Traceback" not in res.output


def test_a_missing_samples_file_is_an_error(trained, tmp_path):
    res = _genppl(trained("mdlm"), "--samples-file", tmp_path / "nope.jsonl", "--judge", f"arm:{trained('arm')}")
    assert res.exit_code == 2 and "nope.jsonl" in res.output
