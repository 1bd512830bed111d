"""Tests for harness.views (the tables) and ``primebench table``: records built in memory, no training. Fast."""

from __future__ import annotations

import csv
import io
import json

import pytest
from click.testing import CliRunner

from harness import records as records_module
from harness.cli import main
from harness.errors import PrimebenchError
from harness.records import Metric, make_record, write_record
from harness.views import build_table, load_records, render


@pytest.fixture(autouse=True)
def _no_git(monkeypatch):
    monkeypatch.setattr(records_module, "git_revision", lambda: "test")


def _packing(**kw):
    return {"wrap": True, "eos_between_docs": True, "remainder": "drop", "rows": 10, "tokens_out": 640, **kw}


def _ppl(name, family, *, nll=3.0, se=0.1, kind="bound", joint=None, dataset="wiki-embedded", packing=None, **protocol):
    metrics = {"nll": Metric(nll, se, kind, "nats/token"), "ppl": Metric(2.718281828**nll, se, kind, "perplexity")}
    if joint is not None:
        metrics["nll_token_joint"] = Metric(joint, 0.05, "paper-objective", "nats/token")
        metrics["ppl_token_joint"] = Metric(2.718281828**joint, 0.5, "paper-objective", "perplexity")
    proto = {
        "dataset": dataset,
        "data": f"{dataset}:validation",
        "split": "validation",
        "packing": packing or _packing(),
        "tokenizer": "bytes",
        "seq_len": 64,
        "tokens_scored": 640.0,
        "mc_samples": None if family == "arm" else 4,
        "token_convention": "L-1 targets" if family == "arm" else "all L",
        **protocol,
    }
    if family == "prime":
        proto.update(ell=2, base=17, carry_over=True)
    return make_record(
        "ppl",
        model={"name": name, "family": family, "checkpoint": f"/ckpt/{name}"},
        metrics=metrics,
        protocol=proto,
        seed=0,
    )


def _three():
    return [
        _ppl("ar", "arm", nll=3.2, se=0.0, kind="exact"),
        _ppl("md", "mdlm", nll=3.5, se=None),
        _ppl("pr", "prime", nll=3.4, joint=3.1),
    ]


def test_a_model_trained_under_another_seed_is_labelled_by_its_seed():
    records = [_ppl("md", "mdlm", nll=3.5), _ppl("md", "mdlm", nll=3.6), _ppl("md", "mdlm", nll=3.4)]
    records[1]["model"]["config"] = {"seed": 1}
    records[2]["model"]["config"] = {"seed": 0}
    labels = [row[0].text for row in build_table(records, "ppl").rows]
    assert sorted(labels) == ["md", "md (2)", "md (seed 1)"]
    from harness.records import training_seed

    assert [training_seed(r["model"]) for r in records] == [0, 1, 0] and training_seed({}) == 0


def test_marks_for_exact_bound_and_paper_objective():
    table = build_table(_three(), "ppl")
    rows = {r[0].text.split("‡")[0]: r for r in table.rows}
    md = render(table, "md")
    cols = [c.key for c in table.columns]
    ppl = cols.index("ppl")
    assert rows["ar"][ppl].kind == "exact"
    assert f"| {2.718281828**3.2:.2f} |" in md  # exact: plain number, no ± for an exact number
    assert f"<={2.718281828**3.4:.2f} ± 0.10" in md  # bound
    assert f"{2.718281828**3.1:.2f}† ± 0.50" in md  # paper objective, in its own column
    assert any(c.title.startswith("PPL, paper objective") and c.mark == "paper-objective" for c in table.columns)
    assert "† paper objective, not a bound" in md
    assert "<= upper bound" in md


def test_stderr_formatting_and_na():
    md = render(build_table(_three(), "ppl"), "md")
    assert f"<={3.5:.4f} ± n/a" in md  # stderr null -> n/a
    assert "n/a: standard error not estimable" in md
    assert f"{3.2:.4f} ±" not in md  # exact numbers carry no ±


def test_estimates_marked_with_tilde():
    rec = make_record(
        "genppl",
        model={"name": "m", "family": "mdlm"},
        seed=0,
        metrics={
            "gen_ppl": Metric(40.0, 2.0, "estimate", "perplexity under judge"),
            "entropy_model": Metric(5.5, 0.01, "estimate", "nats per sample, model ids"),
        },
        protocol={"sampler": "ancestral", "steps": 64, "dtype": "float64", "judge": "smollm2"},
    )
    text = render(build_table([rec], "genppl"), "rich")
    assert "~40.00 ± 2.00" in text and "~5.5000 ± 0.0100" in text
    assert "judge smollm2" in text  # a protocol value shared by every row goes into the title


def test_protocol_difference_is_flagged_with_key_and_values():
    recs = [_ppl("a", "mdlm"), _ppl("b", "mdlm", packing=_packing(eos_between_docs=False)), _ppl("c", "mdlm")]
    table = build_table(recs, "ppl")
    notes = [n.text for n in table.footnotes]
    diff = [n for n in notes if n.startswith("rows differ in")]
    assert diff == ["rows differ in packing.eos_between_docs: a=True, b=False, c=True"]
    flagged = {r[0].text: r[0].flags for r in table.rows}
    assert flagged == {"a": (), "b": ("a",), "c": ()}  # only the odd row is marked
    assert "b‡a" in render(table, "md")
    assert table.flag_keys(next(r for r in table.rows if r[0].text == "b")) == ["packing.eos_between_docs"]


def test_model_specific_and_family_keys_not_flagged_across_families():
    # different checkpoints, ell/base, token conventions (ARM vs diffusion), mc_samples None for the ARM
    table = build_table(_three(), "ppl")
    assert not [n for n in table.footnotes if n.text.startswith("rows differ")]
    assert any(n.text.startswith("token_convention (by family") for n in table.footnotes)
    # ... but a convention that differs within one family is flagged, and so is K between diffusion rows
    recs = [_ppl("x", "mdlm", token_convention="other"), _ppl("y", "mdlm", mc_samples=1)]
    keys = [n.key for n in build_table(recs, "ppl").footnotes if n.key]
    assert keys == ["mc_samples", "token_convention"]


def test_zeroshot_pivot():
    recs = [
        _ppl("ar", "arm", nll=3.0, se=0.0, kind="exact", dataset="ptb"),
        _ppl("ar", "arm", nll=2.0, se=0.0, kind="exact", dataset="lambada"),
        _ppl("pr", "prime", nll=2.5, joint=2.2, dataset="ptb"),
    ]
    table = build_table(recs, "zeroshot")
    assert [c.key for c in table.columns] == ["model", "family", "lambada", "ptb"]  # paper order
    labels = [r[0].text for r in table.rows]
    assert labels == ["ar", "pr", "pr, paper objective"]
    ar, pr, pr_paper = table.rows
    assert ar[2].value == pytest.approx(2.718281828**2.0) and ar[3].value == pytest.approx(2.718281828**3.0)
    assert pr[2].value is None and pr[3].kind == "bound"  # no lambada record for pr
    assert pr_paper[3].kind == "paper-objective"
    with pytest.raises(PrimebenchError, match="two records for model 'ar' on dataset 'ptb'"):
        build_table(recs + [recs[0]], "zeroshot")


def test_zeroshot_flags_differences_within_a_dataset_column():
    recs = [
        _ppl("a", "mdlm", dataset="ptb"),
        _ppl("b", "mdlm", dataset="ptb", packing=_packing(remainder="pad")),
        _ppl("a", "mdlm", dataset="lambada", seq_len=1024),
    ]  # lambada vs ptb settings are not compared
    table = build_table(recs, "zeroshot")
    diff = [n for n in table.footnotes if n.key]
    assert [n.key for n in diff] == ["ptb:packing.remainder"]
    assert "(ptb)" in diff[0].text


def test_generic_layout_renders_unknown_metrics_and_axes():
    recs = [
        make_record(
            "precision",
            model={"name": "m", "family": "mdlm"},
            seed=0,
            metrics={
                "entropy": Metric(5.0 - 0.1 * i, 0.02, "estimate", "nats"),
                "brand_new_metric": Metric(1.0, None, "exact", "widgets"),
            },
            protocol={"sampler": "ancestral", "steps": steps, "dtype": dtype, "method": "mdlm-legacy"},
        )
        for i, (steps, dtype) in enumerate([(256, "float64"), (64, "float32"), (64, "float64")])
    ]
    table = build_table(recs, "precision")
    assert [c.key for c in table.columns] == [
        "model",
        "family",
        "sampler",
        "steps",
        "dtype",
        "entropy",
        "brand_new_metric",
    ]
    assert [(r[3].text, r[4].text) for r in table.rows] == [("64", "float32"), ("64", "float64"), ("256", "float64")]
    assert not [n for n in table.footnotes if n.key]  # steps and dtype are the table's axes, not differences
    assert "method mdlm-legacy" in table.title
    for fmt in ("rich", "md", "latex", "csv"):
        assert "brand" in render(table, fmt)


def test_wrong_evaluation_for_layout():
    with pytest.raises(PrimebenchError) as err:
        build_table(_three(), "genppl")
    assert "found 3 'ppl'" in err.value.problem and "--layout ppl or zeroshot" in err.value.fix


def test_formats():
    recs = _three() + [_ppl("md2", "mdlm", packing=_packing(eos_between_docs=False))]
    table = build_table(recs, "ppl")
    text = render(table, "csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 4 and "<=" not in text and "±" not in text and "†" not in text
    pr = next(r for r in rows if r["model"] == "pr")
    assert float(pr["ppl"]) == pytest.approx(2.718281828**3.4) and pr["ppl_kind"] == "bound"
    assert pr["ppl_token_joint_kind"] == "paper-objective" and float(pr["nll_stderr"]) == pytest.approx(0.1)
    assert next(r for r in rows if r["model"] == "md")["nll_stderr"] == ""  # null stderr: empty, not 0
    assert next(r for r in rows if r["model"] == "md2")["protocol_differs"] == "packing.eos_between_docs"
    latex = render(table, "latex")
    for piece in (
        r"\toprule",
        r"\midrule",
        r"\bottomrule",
        r"\begin{tabular}",
        r"$\le$",
        r"$^{\dagger}$",
        r"packing.eos\_between\_docs",
        r"$\pm$",
        r"$^{\ddagger a}$",
    ):
        assert piece in latex
    assert "_" not in latex.replace(r"\_", "")
    md = render(table, "md")
    lines = md.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| model"))
    assert set(lines[header + 1]) <= set("|:-") and lines[header + 1].count("|") == len(table.columns) + 1
    rich = render(table, "rich")
    assert "<=" in rich and "4 records" in rich


def test_load_records_recursive_and_errors(tmp_path):
    write_record(_ppl("a", "arm", kind="exact", se=0.0), tmp_path / "x" / "y")
    write_record(_ppl("b", "mdlm"), tmp_path / "x")
    (tmp_path / "x" / "samples.jsonl").write_text("{}\n")  # not a *.json file
    assert sorted(r["model"]["name"] for r in load_records([tmp_path])) == ["a", "b"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(PrimebenchError, match="no records found in '.*empty'"):
        load_records([tmp_path / "empty"])
    (tmp_path / "x" / "bad.json").write_text("{nope")
    with pytest.raises(PrimebenchError, match="not valid JSON"):
        load_records([tmp_path])


def test_cli_table(tmp_path):
    folder = tmp_path / "recs"
    for rec in _three():
        write_record(rec, folder)
    runner = CliRunner()
    res = runner.invoke(main, ["table", str(folder), "--format", "md"])  # layout from the records
    assert res.exit_code == 0, res.output
    assert "| model |" in res.output and "<=" in res.output
    res = runner.invoke(main, ["table", str(folder), "--layout", "ppl"])  # rich to stdout
    assert res.exit_code == 0, res.output
    assert "paper objective" in res.output
    out = tmp_path / "tables" / "ppl.tex"
    files = [str(f) for f in sorted(folder.glob("*.json"))]
    res = runner.invoke(main, ["table", *files, "--layout", "ppl", "--format", "latex", "--out", str(out.parent)])
    assert res.exit_code == 0, res.output
    assert r"\toprule" in out.read_text() and r"\toprule" not in res.stdout


def test_cli_errors_exit_2(tmp_path):
    runner = CliRunner()
    (tmp_path / "empty").mkdir()
    res = runner.invoke(main, ["table", str(tmp_path / "empty")])
    assert res.exit_code == 2 and "no records found" in res.output
    write_record(_ppl("a", "mdlm"), tmp_path / "recs")
    res = runner.invoke(main, ["table", str(tmp_path / "recs"), "--layout", "fid"])
    assert res.exit_code == 2 and "'ppl'" in res.output and "--layout ppl or zeroshot" in res.output
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "other"}))
    res = runner.invoke(main, ["table", str(bad)])
    assert res.exit_code == 2 and "not a primebench record" in res.output


def test_family_column_and_order_come_from_the_record():
    # the record's model block names the family (label) and ranks it (order); tables compare no family names
    recs = [_ppl("a", "prime", nll=3.4), _ppl("b", "arm", nll=3.2, se=0.0, kind="exact"), _ppl("c", "newfam")]
    recs[0]["model"].update(label="prime, ell=2", order=3)
    recs[1]["model"].update(label="arm", order=0)
    recs[2]["model"].update(label="a new family (K=7)", order=1)
    table = build_table(recs, "ppl")
    assert [(r[0].text, r[1].text) for r in table.rows] == [
        ("b", "arm"),
        ("c", "a new family (K=7)"),
        ("a", "prime, ell=2"),
    ]
    gen = [
        make_record(
            "genppl",
            model={"name": n, "family": f, "label": f"{f}!", "order": o},
            seed=0,
            metrics={"gen_ppl": Metric(40.0, 2.0, "estimate", "perplexity under judge")},
            protocol={"sampler": "ancestral", "steps": 64},
        )
        for n, f, o in (("z", "mdlm", 0), ("y", "arm", 1))
    ]
    assert [(r[0].text, r[1].text) for r in build_table(gen, "genppl").rows] == [("z", "mdlm!"), ("y", "arm!")]


def test_records_without_label_show_the_bare_family_after_ranked_rows():
    old = _ppl("aa", "prime", nll=3.4)  # written before records carried label/order: no ell formatting here
    new = _ppl("zz", "mdlm")
    new["model"].update(label="mdlm", order=1)
    table = build_table([old, new], "ppl")
    assert [(r[0].text, r[1].text) for r in table.rows] == [("zz", "mdlm"), ("aa", "prime")]
    zs = build_table([old, new], "zeroshot")
    assert [r[1].text for r in zs.rows] == ["mdlm", "prime"]


def test_cli_table_skips_a_bad_file_with_a_warning_and_renders_the_rest(tmp_path):
    folder = tmp_path / "recs"
    for rec in _three():
        write_record(rec, folder)
    (folder / "broken.json").write_text("{nope")
    (folder / "config.json").write_text('{"model_type": "gpt2"}')  # a JSON file that is not a record
    res = CliRunner().invoke(main, ["table", str(folder), "--format", "md"])
    assert res.exit_code == 0, res.output
    assert all(f"| {name} |" in res.stdout for name in ("ar", "md", "pr")) and "3 records" in res.stdout
    assert f"warning: skipped {str(folder / 'broken.json')!r}: " in res.stderr and "not valid JSON" in res.stderr
    assert f"warning: skipped {str(folder / 'config.json')!r}: " in res.stderr
    assert "warning" not in res.stdout
    only_bad = tmp_path / "bad"
    only_bad.mkdir()
    (only_bad / "broken.json").write_text("{nope")
    res = CliRunner().invoke(main, ["table", str(only_bad)])
    assert (
        res.exit_code == 2
        and "none of the 1 JSON file is a readable record" in res.output
        and "Traceback" not in res.output
    )


def test_a_label_from_a_record_cannot_reshape_a_table_or_reach_the_terminal():
    """Newlines, |, HTML and ANSI escapes in a label are shown, never obeyed; a non-finite number is
    never dressed as a bound, and a non-finite or negative standard error is n/a."""
    from harness.views.table import Cell, Column, Table, render

    evil = "a\nb|c <script>alert(1)</script> \x1b[31mred\x1b[0m &amp;"
    table = Table(
        "t",
        evil,
        (Column("name", evil, numeric=False), Column("nll", "nll")),
        (
            (Cell(text=evil), Cell(value=float("nan"), kind="bound", stderr=0.1)),
            (Cell(text="ok"), Cell(value=1.5, kind="bound", stderr=float("-inf"))),
            (Cell(text="inf"), Cell(value=float("inf"), kind="estimate", stderr=float("inf"))),
        ),
    )
    md = render(table, "md")
    body = [line for line in md.splitlines() if line.startswith("|")]
    assert len(body) == 2 + 3 and all(line.count(" | ") == 1 for line in body if "---" not in line)
    assert "\x1b" not in md and "<script>" not in md and "&lt;script>" in md and "&amp;amp;" in md
    assert "\\n" in md and "\\x1b" in md
    assert "nan (not finite)" in md and "<=nan" not in md and "<=1.5000 ± n/a" in md and "inf (not finite)" in md
    for fmt in ("rich", "latex", "csv"):
        out = render(table, fmt)
        assert "\x1b" not in out and "nan (not finite)" in out or fmt == "csv"
    rows = render(table, "csv").splitlines()
    assert len(rows) == 4  # the header and three rows: no newline inside a field


def test_records_whose_numbers_are_not_numbers_or_that_nest_too_deeply_are_skipped_by_name(tmp_path):
    import json

    folder = tmp_path / "recs"
    for rec in _three():
        write_record(rec, folder)
    good = sorted(folder.glob("*.json"))[0]
    record = json.loads(good.read_text())
    metric = next(iter(record["metrics"]))
    as_text = json.loads(json.dumps(record))
    as_text["metrics"][metric]["value"] = "12.5"
    (folder / "text.json").write_text(json.dumps(as_text))
    flag = json.loads(json.dumps(record))
    flag["metrics"][metric]["stderr"] = True
    (folder / "flag.json").write_text(json.dumps(flag))
    (folder / "deep.json").write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    res = CliRunner().invoke(main, ["table", str(folder), "--format", "md"])
    assert res.exit_code == 0 and "3 records" in res.stdout and "Traceback" not in res.output
    assert f"metrics.{metric} has value '12.5', not a number" in res.stderr
    assert f"metrics.{metric} has stderr 'True', not a number" in res.stderr
    assert "nested too deeply" in res.stderr
