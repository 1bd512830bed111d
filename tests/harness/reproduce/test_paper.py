import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.errors import PrimebenchError
from harness.reproduce.paper import PRESETS, forward_flops_per_token, plan, train_flops


@pytest.mark.parametrize("preset", ["owt", "zeroshot", "genppl", "cifar10-fid"])
def test_every_paper_preset_dry_run_prints_its_plan_offline(preset, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    res = CliRunner().invoke(main, ["reproduce", preset, "--dry-run"])
    assert res.exit_code == 0, res.output
    for text in ("preset " + preset, "steps:", "$ primebench ", "FLOPs in all", "published", "time: not estimated"):
        assert text in res.output, text


def test_precision_paper_dry_run_with_throughput_and_torchrun():
    res = CliRunner().invoke(
        main,
        [
            "reproduce",
            "precision",
            "--paper-scale",
            "--dry-run",
            "--nproc",
            "8",
            "--tflops",
            "400",
            "--gpu",
            "H100",
            "--checkpoint",
            "mdlm=mdlm-ckpt:mdlm.ckpt",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "torchrun --nproc-per-node 8 -m harness audit precision mdlm-ckpt:mdlm.ckpt" in res.output
    assert "TFLOP/s per H100" in res.output and "--draw two-stage" in res.output and "5.59 -> 4.92" in res.output


def test_dry_run_flags_need_paper():
    res = CliRunner().invoke(main, ["reproduce", "precision", "--dry-run"])
    assert res.exit_code != 0 and "--paper-scale" in res.output


def test_imported_checkpoints_replace_training():
    steps = plan("owt", checkpoints={"mdlm": "mdlm-hf:kuleshov-group/mdlm-owt"})
    whats = [s.what for s in steps]
    assert sum(w.startswith("train ") for w in whats) == 3 and any(w.startswith("import mdlm-hf:") for w in whats)
    assert ("import", "mdlm-hf:kuleshov-group/mdlm-owt", "--out", "results/runs/paper-owt/mdlm") in [
        s.argv for s in steps
    ]


def test_plan_errors_name_the_fix():
    with pytest.raises(PrimebenchError, match="did you mean 'owt'"):
        plan("owtt")
    with pytest.raises(PrimebenchError, match="no checkpoint for bogus"):
        plan("owt", checkpoints={"bogus": "x"})
    res = CliRunner().invoke(main, ["reproduce", "owt", "--dry-run", "--checkpoint", "mdlm"])
    assert res.exit_code != 0 and "NAME=SRC" in res.output


def test_zeroshot_plan_covers_the_seven_sets_for_every_model():
    evals = [s for s in plan("zeroshot") if s.argv[:2] == ("eval", "ppl")]
    assert len(evals) == 5 * 7
    assert {s.argv[s.argv.index("--data") + 1] for s in evals} == {
        "lambada",
        "wikitext2",
        "ptb",
        "lm1b",
        "ag_news",
        "pubmed",
        "arxiv",
    }


def test_owt_plans_import_bd3lm_and_score_it_as_its_code_does():
    """BD3-LM's recipe fine-tunes a long MDLM run: the plans import the release (block 4, the row the
    MDM-Prime tables cite) unless another source is named, and score without the first token."""
    from harness.reproduce.paper import BD3LM_RELEASE, PRESETS

    for preset in ("owt", "zeroshot"):
        steps = plan(preset)
        imports = [s for s in steps if s.argv[:1] == ("import",)]
        assert [s.argv[1] for s in imports] == [BD3LM_RELEASE]
        bd3 = [s for s in steps if s.argv[:2] == ("eval", "ppl") and "/bd3lm" in s.argv[2]]
        assert bd3 and all("--ignore-bos" in s.argv for s in bd3)
        others = [s for s in steps if s.argv[:2] == ("eval", "ppl") and "/bd3lm" not in s.argv[2]]
        assert not any("--ignore-bos" in s.argv for s in others)
        assert any(row["model"] == "BD3-LM, block 4" for row in PRESETS[preset].published)
    mine = plan("owt", checkpoints={"bd3lm": "bd3lm-hf:local/b4"})
    assert [s.argv[1] for s in mine if s.argv[:1] == ("import",)] == ["bd3lm-hf:local/b4"]


def test_flop_counts_follow_6n_per_trained_token():
    model = dict(d_model=768, n_layers=12, n_heads=12, vocab=50258, seq_len=1024)
    n = 12 * 12 * 768**2 + 768 * 50258
    assert forward_flops_per_token(model) == pytest.approx(2 * n + 4 * 12 * 1024 * 768)
    assert train_flops(model, 10, 2) == pytest.approx(3 * forward_flops_per_token(model) * 10 * 2 * 1024)
    assert set(PRESETS) == {"owt", "zeroshot", "genppl", "precision", "cifar10-fid"}


def test_paper_configs_load():
    from harness.config import load_config

    for name in ("paper/owt-arm", "paper/owt-mdlm", "paper/owt-prime", "paper/cifar10-prime"):
        cfg = load_config(name)
        assert cfg.model.d_model == 768 and cfg.model.n_layers == 12
    assert load_config("paper/owt-mdlm").data.corpus == "openwebtext"


def test_openwebtext_corpus_is_refused_offline(monkeypatch):
    from harness.data.corpora import get_corpus
    from harness.errors import OfflineError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OfflineError, match="needs the network"):
        get_corpus("openwebtext")


@pytest.mark.parametrize("preset", ["owt", "zeroshot", "genppl", "precision", "cifar10-fid"])
def test_every_planned_command_parses(preset):
    """Each step's argv is a real primebench command line: click parses it (then --help stops it)."""
    for step in plan(preset, checkpoints={"mdlm": "mdlm-ckpt:x.ckpt"} if preset in ("genppl", "precision") else None):
        res = CliRunner().invoke(main, list(step.argv) + ["--help"])
        assert res.exit_code == 0, (step.argv, res.output)


def _rec(evaluation, name, metrics, **protocol):
    return {
        "evaluation": evaluation,
        "model": {"name": name},
        "protocol": protocol,
        "metrics": {k: {"value": v, "stderr": se, "kind": kind} for k, (v, se, kind) in metrics.items()},
    }


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_tables_put_every_published_number_beside_ours(preset):
    from harness.reproduce.report import published_table
    from harness.views import render

    table = published_table(preset, [])
    assert [r[1].text for r in table.rows] == ["published"] * len(PRESETS[preset].published)
    md = render(table, "md")
    assert "published" in md and PRESETS[preset].reproduces in md


def test_owt_and_zeroshot_tables_mark_ours_and_the_papers_kinds(tmp_path):
    import json

    from harness.reproduce.report import published_table, write_preset_report
    from harness.views import render

    records = [
        _rec("ppl", "arm", {"ppl": (18.1, 0.2, "exact")}, dataset="openwebtext"),
        _rec(
            "ppl",
            "prime4",
            {"ppl": (16.0, 0.1, "bound"), "ppl_token_joint": (15.0, 0.1, "paper-objective")},
            dataset="openwebtext",
        ),
    ]
    table = published_table("owt", records)
    ours = [r for r in table.rows if r[1].text == "ours"]
    assert [(r[0].text, r[2].value, r[2].kind, r[3].value) for r in ours] == [
        ("arm", 18.1, "exact", None),
        ("prime4", 16.0, "bound", 15.0),
    ]
    prime = next(r for r in table.rows if r[0].text == "MDM-Prime ell=4")
    assert prime[2].value is None and prime[3].value == 15.62 and prime[3].kind == "paper-objective"
    md = render(table, "md")
    assert "<=16.00 ± 0.10" in md and "| 15.62† |" in md and "| 17.54 |" in md
    zs = published_table("zeroshot", [_rec("ppl", "mdlm", {"ppl": (40.0, 1.0, "bound")}, dataset="ptb")])
    mine = next(r for r in zs.rows if r[1].text == "ours")
    assert mine[0].text == "mdlm" and mine[2 + 2].value == 40.0 and mine[2].value is None  # ptb is the third set
    folder = tmp_path / "paper-owt" / "records"
    folder.mkdir(parents=True)
    for i, r in enumerate(records):
        (folder / f"r{i}.json").write_text(json.dumps(dict(r, schema="primebench-record/1", provenance={})))
    text = write_preset_report("owt", tmp_path / "paper-owt").read_text()
    assert "| prime4 | ours |" in text and "| ARM | published |" in text


def test_a_preset_run_ends_with_its_table(tmp_path, monkeypatch):
    """After the plan's commands (stubbed here: they need a GPU and the hub), the preset writes and prints
    ROOT/tables.md with the published numbers beside whatever records the run left."""
    ran = []
    monkeypatch.setattr("harness.reproduce.paper.run_plan", lambda steps, **kw: ran.append(len(steps)))
    res = CliRunner().invoke(main, ["reproduce", "cifar10-fid", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert (
        ran
        and "| MDM-Prime (NFE 512) | published | 3.26 | 9.67 |"
        in (tmp_path / "paper-cifar10-fid" / "tables.md").read_text()
    )
    assert "published" in res.output
