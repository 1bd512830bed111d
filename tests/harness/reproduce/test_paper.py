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
    res = CliRunner().invoke(main, ["reproduce", "precision", "--paper", "--dry-run", "--nproc", "8", "--tflops", "400",
                                    "--gpu", "H100", "--checkpoint", "mdlm=mdlm-ckpt:mdlm.ckpt"])
    assert res.exit_code == 0, res.output
    assert "torchrun --nproc-per-node 8 -m harness audit precision mdlm-ckpt:mdlm.ckpt" in res.output
    assert "TFLOP/s per H100" in res.output and "--draw two-stage" in res.output and "5.59 -> 4.92" in res.output


def test_dry_run_flags_need_paper():
    res = CliRunner().invoke(main, ["reproduce", "precision", "--dry-run"])
    assert res.exit_code != 0 and "--paper" in res.output


def test_imported_checkpoints_replace_training():
    steps = plan("owt", checkpoints={"mdlm": "mdlm-hf:kuleshov-group/mdlm-owt"})
    whats = [s.what for s in steps]
    assert sum(w.startswith("train ") for w in whats) == 3 and any(w.startswith("import mdlm-hf:") for w in whats)
    assert ("import", "mdlm-hf:kuleshov-group/mdlm-owt", "--out", "results/runs/paper-owt/mdlm") in [s.argv for s in steps]


def test_plan_errors_name_the_fix():
    with pytest.raises(PrimebenchError, match="did you mean 'owt'"):
        plan("owtt")
    with pytest.raises(PrimebenchError, match="no checkpoint for bogus"):
        plan("owt", checkpoints={"bogus": "x"})
    res = CliRunner().invoke(main, ["reproduce", "owt", "--dry-run", "--checkpoint", "mdlm"])
    assert res.exit_code != 0 and "NAME=SRC" in res.output


def test_zeroshot_plan_covers_the_seven_sets_for_every_model():
    evals = [s for s in plan("zeroshot") if s.argv[:2] == ("eval", "ppl")]
    assert len(evals) == 4 * 7
    assert {s.argv[s.argv.index("--data") + 1] for s in evals} == {"lambada", "wikitext2", "ptb", "lm1b", "ag_news",
                                                                     "pubmed", "arxiv"}


def test_flop_counts_follow_6n_per_trained_token():
    model = dict(d_model=768, n_layers=12, n_heads=12, vocab=50258, seq_len=1024)
    n = 12 * 12 * 768 ** 2 + 768 * 50258
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
