import json

from click.testing import CliRunner

from harness.cli import main


def test_quickstart_smoke_run_and_skip_on_rerun(trained, tmp_path):
    """The whole quickstart pipeline on a few steps and rows, with a project ARM as the judge."""
    out = tmp_path / "qs"
    args = ["quickstart", "--out", str(out), "--steps", "2", "--max-rows", "4", "--samples", "2",
            "--judge", f"arm:{trained('arm')}"]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    records = sorted(p.name for p in (out / "records").glob("*.json"))
    assert len(records) == 5 + 10 + 3 + 4  # ppl x5, genppl x5 x2 dtypes, idle x2, bound, digits bpd x2 + fid x2
    for text in ("Perplexity", "paper objective", "Generative perplexity", "36.77%", "Bound audit", "bpd",
                 "digits-classifier"):
        assert text in first.stdout
    ppl = json.loads((out / "records" / "ppl-prime4.json").read_text())
    assert ppl["protocol"]["ell"] == 4 and ppl["metrics"]["nll_token_joint"]["kind"] == "paper-objective"
    fid = json.loads((out / "records" / "fid-digits-prime.json").read_text())
    assert "fid[digits-classifier]" in fid["metrics"] and (out / "digits-prime" / "samples.png").exists()
    stamp = (out / "records" / "ppl-arm.json").stat().st_mtime_ns
    second = CliRunner().invoke(main, args)
    assert second.exit_code == 0, second.output
    assert (out / "records" / "ppl-arm.json").stat().st_mtime_ns == stamp  # skipped, not recomputed
