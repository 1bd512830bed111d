"""Releases by hub name (``mdlm-hf:ORG/NAME[@REV]``) and ``primebench prefetch``, against the real
``huggingface_hub`` client talking to a local stand-in for the hub's file routes
(:mod:`tests.fixtures.hub_server`): downloads into the standard cache, revisions, offline use of the
cache (in this process and in another one), and every failure named: a missing file, an unknown
revision or repository, a connection that drops midway, a gated repository without a token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch
from click.testing import CliRunner

import harness
from harness.cli import main
from harness.errors import CheckpointError, OfflineError, PrimebenchError
from harness.models.hub import fetch, hub_provenance, parse_hub_name
from tests.fixtures.hub_server import HubServer
from tests.fixtures.releases import L, V, raw_weights, write_hf_folder
from tests.harness.models.test_mdlm_import import _reference_logits

MDLM = "kuleshov-group/mdlm-owt"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The stand-in hub: MDLM's layout at two commits (``v1`` = seed 0, ``main`` = seed 1), a gated
    copy, one whose weights drop midway, one without weights, and a Lightning checkpoint in a folder."""
    from tests.fixtures.lightning_releases import write_release

    root = tmp_path_factory.mktemp("hub-src")
    server = HubServer()
    mdlm = server.repo(MDLM)
    mdlm.commit_folder(write_hf_folder(root / "v1", raw_weights(0)), tags=("v1",))
    mdlm.commit_folder(write_hf_folder(root / "v2", raw_weights(1)))
    gated = server.repo("org/gated")
    gated.commit_folder(root / "v1")
    gated.token = "hf_secret"
    flaky = server.repo("org/flaky")
    flaky.commit_folder(root / "v1")
    flaky.drop = {"model.safetensors"}
    server.repo("org/no-weights").commit({"config.json": (root / "v1" / "config.json").read_bytes()})
    ckpt = write_release(root / "prime-l2.ckpt", "prime", seed=2)
    server.repo("org/prime-releases").commit({"checkpoints/prime-l2.ckpt": ckpt.read_bytes(), "README.md": b"x"})
    with server.running():
        yield server


@pytest.fixture
def online(hub, tmp_path, monkeypatch):
    """A fresh cache, the hub's address, and the client switched online (the suite runs offline)."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    go_offline(monkeypatch, False)
    return hub


def go_offline(monkeypatch, flag: bool = True):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1" if flag else "0")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", flag)


def _log_probs(model):
    z = torch.randint(0, V - 1, (2, L), generator=torch.Generator().manual_seed(0))
    z[:, ::2] = V - 1
    with torch.no_grad():
        return model.log_probs(z, torch.tensor([0.3, 0.7])), z


def _matches_seed(model, seed: int) -> bool:
    ours, z = _log_probs(model)
    ref = torch.log_softmax(_reference_logits(raw_weights(seed), z, torch.zeros(2))[..., : V - 1], -1)
    masked = z == V - 1
    return bool(torch.allclose(ours[masked], ref[masked], atol=2e-5))


def test_names_and_local_paths_are_told_apart(tmp_path, monkeypatch):
    name = parse_hub_name("mdlm-hf:kuleshov-group/mdlm-owt@v1")
    assert (name.repo, name.path, name.revision, name.layout) == (MDLM, "", "v1", "folder")
    assert str(name) == "mdlm-hf:kuleshov-group/mdlm-owt@v1"
    ckpt = parse_hub_name("prime-ckpt:org/rel/checkpoints/last.ckpt")
    assert (ckpt.repo, ckpt.path, ckpt.revision, ckpt.layout) == ("org/rel", "checkpoints/last.ckpt", "main", "file")
    assert parse_hub_name("hf:gpt2-large").layout == "transformers"
    assert parse_hub_name("hf:gpt2-large#q.gguf") is None  # GGUF files are transformers' business
    local = tmp_path / "org" / "name"
    local.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert parse_hub_name("mdlm-hf:org/name") is None  # an existing path is always local
    for source in ("mdlm-hf:./a/b", "mdlm-hf:/abs/path", "mdlm-hf:~/x", "prime-ckpt:org/file.ckpt", "gpt2"):
        assert parse_hub_name(source) is None


def test_a_release_by_name_downloads_once_and_records_its_commit(online):
    model, _, _ = harness.load(f"mdlm-hf:{MDLM}")
    assert model.family == "mdlm" and _matches_seed(model, 1)  # main: the second commit
    gets = online.downloads()
    model, _, _ = harness.load(f"mdlm-hf:{MDLM}")
    assert online.downloads() == gets  # the second load asks the hub, finds the cache current
    prov = hub_provenance(f"mdlm-hf:{MDLM}")
    assert prov["commit"] == online.repos[MDLM].refs["main"] and prov["revision"] == "main"
    weights = Path(prov["local"]) / "model.safetensors"
    assert prov["files"]["model.safetensors"] == harness.io.file_sha256(weights)
    assert set(prov["files"]) == {"config.json", "model.safetensors"}  # the repo has no tokenizer files


def test_a_revision_pins_the_commit(online):
    old, _, _ = harness.load(f"mdlm-hf:{MDLM}@v1")
    assert _matches_seed(old, 0)
    sha = online.repos[MDLM].refs["v1"]
    again, _, _ = harness.load(f"mdlm-hf:{MDLM}@{sha}")
    assert _matches_seed(again, 0) and hub_provenance(f"mdlm-hf:{MDLM}@{sha}")["commit"] == sha


def test_offline_the_cache_serves_names_it_holds_and_refuses_the_others(online, monkeypatch):
    harness.load(f"mdlm-hf:{MDLM}@v1")
    go_offline(monkeypatch)
    model, _, _ = harness.load(f"mdlm-hf:{MDLM}@v1")
    assert _matches_seed(model, 0)
    for source in (f"mdlm-hf:{MDLM}", "mdlm-hf:org/unknown"):  # main was never fetched into this cache
        with pytest.raises(OfflineError, match=f"prefetch {source}"):
            harness.load(source)


def test_failures_are_named(online, monkeypatch):
    with pytest.raises(CheckpointError, match="has no revision 'nope'"):
        harness.load(f"mdlm-hf:{MDLM}@nope")
    with pytest.raises(CheckpointError, match="no repository 'org/unknown'"):
        harness.load("mdlm-hf:org/unknown")
    with pytest.raises(CheckpointError, match="has no model.safetensors or pytorch_model.bin"):
        harness.load("mdlm-hf:org/no-weights")
    with pytest.raises(CheckpointError, match="has no checkpoints/other.ckpt"):
        harness.load("prime-ckpt:org/prime-releases/checkpoints/other.ckpt")
    with pytest.raises(CheckpointError, match="(?s)is gated .* set HF_TOKEN"):
        harness.load("mdlm-hf:org/gated")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    model, _, _ = harness.load("mdlm-hf:org/gated")
    assert _matches_seed(model, 0)


def test_a_dropped_connection_leaves_nothing_half_written(online, monkeypatch):
    with pytest.raises(PrimebenchError):
        harness.load("mdlm-hf:org/flaky")
    cache = Path(os.environ["HF_HUB_CACHE"])
    blobs = [p for p in cache.rglob("blobs/*") if not p.name.endswith(".incomplete")]
    config = (cache / "models--org--flaky" / "snapshots").rglob("config.json")
    assert len(blobs) == len(list(config)) == 1  # only the config arrived whole
    go_offline(monkeypatch)
    with pytest.raises(OfflineError, match="not in the Hugging Face cache"):
        harness.load("mdlm-hf:org/flaky")  # the partial weights are never used


def test_a_checkpoint_file_by_name(online):
    model, _, _ = harness.load("prime-ckpt:org/prime-releases/checkpoints/prime-l2.ckpt")
    assert model.family == "prime"
    assert online.requests[("GET", "org/prime-releases", "README.md")] == 0  # only the file the loader reads


def test_prefetch_then_an_offline_run_in_another_process(online, tmp_path):
    runner = CliRunner()
    res = runner.invoke(main, ["prefetch", f"mdlm-hf:{MDLM}@v1"])
    assert res.exit_code == 0, res.output
    assert (
        "fetched 2 file(s)" in res.output and "2 hash(es) checked" in res.output and "model.safetensors" in res.output
    )
    gets = online.downloads()
    res = runner.invoke(main, ["prefetch", f"mdlm-hf:{MDLM}@v1", "--json"])
    assert res.exit_code == 0 and json.loads(res.output)[0]["bytes"] == 0 and online.downloads() == gets
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9")  # nothing answers there
    out = subprocess.run(
        [sys.executable, "-m", "harness", "prefetch", "--check", f"mdlm-hf:{MDLM}@v1", f"mdlm-hf:{MDLM}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1, out.stderr
    assert f"mdlm-hf:{MDLM}@v1: cached" in out.stdout and f"mdlm-hf:{MDLM}: missing" in out.stdout
    out = subprocess.run(
        [sys.executable, "-m", "harness", "eval", "ppl", f"mdlm-hf:{MDLM}@v1", "--max-rows", "2", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout[out.stdout.index("{") :])
    hub = record["model"]["hub"]
    assert hub["repo"] == MDLM and hub["revision"] == "v1" and hub["commit"] == online.repos[MDLM].refs["v1"]
    assert set(hub["files"]) == {"config.json", "model.safetensors"}
    assert record["model"]["checkpoint_sha256"] == hub["files"]["model.safetensors"]


def test_prefetch_verifies_the_cache(online):
    got = fetch(parse_hub_name(f"mdlm-hf:{MDLM}@v1"))
    blob = Path(os.path.realpath(got.files["config.json"]))
    blob.chmod(0o644)
    blob.write_bytes(blob.read_bytes() + b" ")
    res = CliRunner().invoke(main, ["prefetch", f"mdlm-hf:{MDLM}@v1"])
    assert res.exit_code == 2 and "does not match its hash" in res.output and "delete" in res.output


def test_prefetch_refuses_unknown_targets_and_offline_mode(online, monkeypatch):
    res = CliRunner().invoke(main, ["prefetch", "no-such-thing"])
    assert res.exit_code == 2 and "not a preset, a hub name" in res.output
    go_offline(monkeypatch)
    res = CliRunner().invoke(main, ["prefetch", f"mdlm-hf:{MDLM}"])
    assert res.exit_code == 2 and "HF_HUB_OFFLINE" in res.output


def test_an_hf_model_prefetched_runs_offline_as_a_model_and_as_a_judge(online, monkeypatch, tmp_path):
    from tests.harness.models.test_hf_causal import write_tiny_gpt2

    folder = write_tiny_gpt2(tmp_path / "tiny-gpt2")
    online.repo("org/tiny-gpt2").commit_folder(folder)
    res = CliRunner().invoke(main, ["prefetch", "hf:org/tiny-gpt2"])
    assert res.exit_code == 0, res.output
    assert "config.json" in res.output and "model.safetensors" in res.output and "tokenizer.json" in res.output
    go_offline(monkeypatch)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    model, tok, _ = harness.load("hf:org/tiny-gpt2")
    assert model.family == "arm" and tok.encode("Hello world") == [15496, 995]
    from harness.judges import check_judge_spec

    assert check_judge_spec("hf:org/tiny-gpt2") == "folder"  # served from the cache's snapshot folder
    with pytest.raises(OfflineError, match="prefetch hf:org/other"):
        harness.load("hf:org/other")


def test_prefetch_a_preset_then_its_offline_dry_run_reports_nothing_missing(online, monkeypatch, tmp_path):
    """A preset's targets (here the precision preset's release and judge, served by the local hub under
    their names' shape) are fetched by `prefetch PRESET`; the preset's dry run, offline, finds them all."""
    import dataclasses

    from harness.reproduce import paper
    from tests.harness.models.test_hf_causal import write_tiny_gpt2

    online.repo("org/tiny-gpt2").commit_folder(write_tiny_gpt2(tmp_path / "tiny-gpt2"))
    targets = (f"mdlm-hf:{MDLM}", "hf:org/tiny-gpt2")
    monkeypatch.setitem(paper.PRESETS, "precision", dataclasses.replace(paper.PRESETS["precision"], prefetch=targets))
    runner = CliRunner()
    res = runner.invoke(main, ["reproduce", "precision", "--paper-scale", "--dry-run"])
    assert res.exit_code == 0 and res.output.count("MISSING") == 2, res.output
    res = runner.invoke(main, ["prefetch", "precision"])
    assert res.exit_code == 0 and res.output.count("hash(es) checked") == 2, res.output
    go_offline(monkeypatch)
    res = runner.invoke(main, ["reproduce", "precision", "--paper-scale", "--dry-run"])
    assert res.exit_code == 0 and "MISSING" not in res.output and res.output.count(": cached") == 2, res.output
    res = runner.invoke(main, ["prefetch", "--check", "precision"])
    assert res.exit_code == 0, res.output


def test_a_dataset_prefetched_loads_offline_in_another_process(hub, tmp_path):
    """`prefetch hf:ORG/NAME:SPLIT` runs `datasets.load_dataset` against the local hub (its info, tree and
    file routes); then, in other processes with HF_HUB_OFFLINE=1, `--check` finds it and the corpus loads
    from the cache."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table({"text": ["the first document", "a second one", "and a third"]}), buf)
    hub.repo("datasets/org/tinytext").commit({"data/train-00000-of-00001.parquet": buf.getvalue(), "README.md": b""})
    env = dict(
        os.environ,
        HF_HOME=str(tmp_path / "hf"),
        HF_HUB_CACHE=str(tmp_path / "hf" / "hub"),
        HF_DATASETS_CACHE=str(tmp_path / "hf" / "datasets"),
        HF_ENDPOINT=hub.endpoint,
        NO_PROXY="127.0.0.1,localhost",
    )
    for flag in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        env.pop(flag)

    def cli(*args, offline: bool):
        run_env = dict(env, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1") if offline else env
        return subprocess.run(
            [sys.executable, "-m", "harness", *args], env=run_env, capture_output=True, text=True, timeout=300
        )

    spec = "hf:org/tinytext:train"
    missing = cli("prefetch", "--check", spec, offline=True)
    assert missing.returncode == 1 and f"{spec}: missing" in missing.stdout, missing.stderr
    got = cli("prefetch", spec, offline=False)
    assert got.returncode == 0 and f"{spec} (dataset)" in got.stdout, got.stderr
    assert hub.requests[("GET", "datasets/org/tinytext", "data/train-00000-of-00001.parquet")] == 1
    assert cli("prefetch", "--check", spec, offline=True).returncode == 0
    info = cli("data", "info", spec, "--json", offline=True)
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["splits"]["train"]["documents"] == 3
