import json

from click.testing import CliRunner

from harness.cli import main
from harness.reproduce.quickstart import stage_count


def test_quickstart_smoke_run_and_skip_on_rerun(trained, tmp_path):
    """The whole quickstart pipeline on a few steps and rows, with a project ARM as the judge."""
    out = tmp_path / "qs"
    args = [
        "reproduce",
        "quickstart",
        "--out",
        str(out),
        "--train-steps",
        "2",
        "--max-rows",
        "4",
        "--samples",
        "2",
        "--judge",
        f"arm:{trained('arm')}",
    ]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    records = sorted(p.name for p in (out / "records").glob("*.json"))
    # ppl x6, genppl x6 x2 dtypes, zeroshot x6, idle x2, bound, precision, gumbel, digits bpd x2 + fid x2
    assert len(records) == 6 + 12 + 6 + 2 + 1 + 1 + 1 + 4
    assert len(list((out / "stages").glob("*.json"))) == stage_count() == len(records) + 8
    for text in (
        "Perplexity",
        "paper objective",
        "Generative perplexity",
        "wiki_lastword/acc",
        "36.77%",
        "Bound audit",
        "precision audit",
        "Gumbel",
        "bpd",
        "digits-classifier",
    ):
        assert text in first.stdout, text
    ppl = json.loads((out / "records" / "ppl-prime4.json").read_text())
    assert ppl["protocol"]["ell"] == 4 and ppl["metrics"]["nll_token_joint"]["kind"] == "paper-objective"
    fid = json.loads((out / "records" / "fid-digits-prime.json").read_text())
    assert "fid[digits-classifier]" in fid["metrics"] and (out / "digits-prime" / "samples.png").exists()
    prec = json.loads((out / "records" / "precision-mdlm.json").read_text())
    assert prec["protocol"]["draw"] == "joint" and prec["protocol"]["dtypes"] == ["float32", "float64"]
    tables = (out / "tables.md").read_text()
    for heading in ("## Perplexity", "## Zero-shot", "## Precision audit", "## Gumbel audit", "| quickstart-prime4"):
        assert heading in tables, heading
    for png in ("ppl.png", "genppl.png", "precision.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    stamp = (out / "records" / "ppl-arm.json").stat().st_mtime_ns
    ckpt_stamp = (out / "arm" / "model.safetensors").stat().st_mtime_ns
    second = CliRunner().invoke(main, args)
    assert second.exit_code == 0, second.output
    assert (out / "records" / "ppl-arm.json").stat().st_mtime_ns == stamp  # skipped, not recomputed
    assert (out / "arm" / "model.safetensors").stat().st_mtime_ns == ckpt_stamp
    # another setting of one stage redoes that stage only; the alias `primebench quickstart` is the same job
    third = CliRunner().invoke(
        main, ["quickstart"] + args[2:-2] + ["--max-rows", "3", "--judge", f"arm:{trained('arm')}"]
    )
    assert third.exit_code == 0, third.output
    assert (out / "records" / "ppl-arm.json").stat().st_mtime_ns != stamp
    assert (out / "arm" / "model.safetensors").stat().st_mtime_ns == ckpt_stamp
