"""``primebench import`` / ``export``: converted folders give the same log-probabilities as their
sources, hold no pickle, and load as plain paths."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

import harness
from harness.cli import main
from harness.errors import CheckpointError
from tests.harness.models import test_mdlm_import as releases
from tests.harness.models.test_hf_causal import gpt2_folder  # noqa: F401  (the tiny GPT-2 fixture)


def _same_log_probs(a, b, z):
    with torch.no_grad():
        la, lb = a.log_probs(z, None), b.log_probs(z, None)
    finite = torch.isfinite(la)
    return torch.equal(finite, torch.isfinite(lb)) and torch.equal(la[finite], lb[finite])


def _no_pickles(folder):
    return not [p for p in folder.rglob("*") if p.suffix in (".pt", ".pth", ".bin", ".ckpt", ".pkl")]


def test_import_of_a_lightning_mdlm_ckpt_round_trips(release_files, tmp_path):
    ckpt = release_files / "mdlm.ckpt"
    res = CliRunner().invoke(
        main, ["import", "--source-format", "mdlm-ckpt", str(ckpt), "--out", str(tmp_path / "imp")]
    )
    assert res.exit_code == 0, res.output
    assert _no_pickles(tmp_path / "imp")
    z = torch.randint(0, releases.V, (2, releases.L), generator=torch.Generator().manual_seed(0))
    imported, tok, _ = harness.load(tmp_path / "imp")
    original, _, _ = harness.load(f"mdlm-ckpt:{ckpt}")
    assert imported.family == "mdlm" and tok.spec == "gpt2" and _same_log_probs(imported, original, z)
    again = CliRunner().invoke(main, ["import", f"mdlm-ckpt:{ckpt}", "--out", str(tmp_path / "imp")])
    assert again.exit_code == 2 and "not empty" in again.output
    res = CliRunner().invoke(main, ["eval", "ppl", str(tmp_path / "imp"), "--max-rows", "1"])
    assert res.exit_code == 0, res.output


def test_import_of_prime_round_trips(release_files, tmp_path):
    from harness.models.transfer import import_checkpoint

    ckpt = release_files / "prime-l2.ckpt"
    out = import_checkpoint(f"prime-ckpt:{ckpt}", tmp_path / "prime", ema=False)
    imported, _, icfg = harness.load(out)
    original, _, _ = harness.load(f"prime-ckpt:{ckpt}", ema=False)
    g = torch.Generator().manual_seed(5)
    y = original.encode(torch.randint(0, releases.V - 1, (2, releases.L), generator=g))
    y[torch.rand(y.shape, generator=g) < 0.5] = original.base
    assert imported.family == "prime" and icfg.model.ell == 2 and _same_log_probs(imported, original, y)
    assert json.loads((out / "config.json").read_text())["primebench_import"]["weights"] == "raw"


def test_hf_causal_import_round_trips(gpt2_folder, tmp_path):  # noqa: F811
    from harness.models.transfer import import_checkpoint

    out = import_checkpoint(f"hf:{gpt2_folder}", tmp_path / "gpt2")
    assert _no_pickles(out)
    imported, tok, _ = harness.load(out)
    original, _, _ = harness.load(f"hf:{gpt2_folder}")
    x = torch.tensor([tok.encode("An imported model scores text exactly as its source does.")])
    assert imported.family == "arm" and torch.equal(imported.nll(x).nats, original.nll(x).nats)


def test_our_export_round_trips(trained, tmp_path):
    from harness.models.transfer import export_checkpoint

    # export one of our own checkpoints and load it back
    out = export_checkpoint(trained("prime"), tmp_path / "exported")
    assert (out / "model.safetensors").exists() and (out / "config.json").exists() and _no_pickles(out)
    back, tok, cfg = harness.load(out)
    ours, _, _ = harness.load(trained("prime"))
    y = ours.encode(torch.randint(0, ours.vocab_size, (2, ours.seq_len), generator=torch.Generator().manual_seed(1)))
    y[:, ::3] = ours.base
    assert _same_log_probs(back, ours, y) and cfg.model.family == "prime" and tok is not None
    res = CliRunner().invoke(main, ["export", str(trained("arm")), "--out", str(tmp_path / "arm-export")])
    assert res.exit_code == 0, res.output
    with pytest.raises(CheckpointError, match="not empty"):
        export_checkpoint(trained("arm"), tmp_path / "arm-export")
    with pytest.raises(Exception, match="trained by primebench"):
        export_checkpoint(f"mdlm-hf:{releases._write(tmp_path / 'm', releases._raw_weights())}", tmp_path / "x")


def test_every_release_fixture_loads_and_imports(release_files, tmp_path):
    """The README walkthrough's files: each release layout loads by its prefix and imports to the
    same log-probabilities."""
    from tests.fixtures.releases import L

    sources = {
        "mdlm-owt": ("mdlm-hf:", "mdlm"),
        "mdlm.ckpt": ("mdlm-ckpt:", "mdlm"),
        "ar.ckpt": ("ar-ckpt:", "arm"),
        "prime-l2.ckpt": ("prime-ckpt:", "prime"),
        "prime-l2-no-carry-over.ckpt": ("prime-ckpt:", "prime"),
    }
    z = torch.randint(0, 225, (2, L), generator=torch.Generator().manual_seed(0))
    for name, (prefix, family) in sources.items():
        source = f"{prefix}{release_files / name}"
        model, tok, _ = harness.load(source)
        assert model.family == family and tok.spec == "gpt2", name
        res = CliRunner().invoke(main, ["import", source, "--out", str(tmp_path / "imp" / name)])
        assert res.exit_code == 0, res.output
        imported, _, _ = harness.load(tmp_path / "imp" / name)
        zz = model.encode(z) if family == "prime" else z
        assert _same_log_probs(imported, model, zz), name


def test_release_prime_and_ar_through_genppl_zeroshot_and_precision(release_files, tmp_path):
    """prime-ckpt: and ar-ckpt: sources through the other commands; the AR baseline as a judge."""
    import json

    prime, ar = f"prime-ckpt:{release_files / 'prime-l2.ckpt'}", f"ar-ckpt:{release_files / 'ar.ckpt'}"
    runner = CliRunner()
    res = runner.invoke(
        main, ["eval", "genppl", prime, "--samples", "2", "--steps", "4", "--batch-size", "2", "--judge", ar, "--json"]
    )
    assert res.exit_code == 0, res.output
    record = json.loads(res.stdout[res.stdout.index("{") :])
    assert record["protocol"]["judge"] == f"arm:{ar}" and record["model"]["checkpoint"] == prime
    res = runner.invoke(main, ["eval", "zeroshot", ar, "--tasks", "wiki_lastword", "--max-rows", "2", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout[res.stdout.index("{") :])["protocol"]["model_source"] == ar
    res = runner.invoke(
        main,
        [
            "audit",
            "precision",
            prime,
            "--steps",
            "4",
            "--samples",
            "2",
            "--batch-size",
            "2",
            "--no-controls",
            "--no-ema",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout[res.stdout.index("{") :])["protocol"]["weights"] == "raw"
    runner.invoke(main, ["import", ar, "--out", str(tmp_path / "imp-ar")])
    res = runner.invoke(
        main,
        [
            "eval",
            "genppl",
            prime,
            "--samples",
            "2",
            "--steps",
            "4",
            "--batch-size",
            "2",
            "--judge",
            f"arm:{tmp_path / 'imp-ar'}",
        ],
    )
    assert res.exit_code == 0, res.output
