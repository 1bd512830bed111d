"""The README's "Bad input and failure" table, row by row, through the CLI: each input gets its
message, its exit code, and keeps what was already written."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from harness.cli import main


def _run(*args):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize(
    "command",
    [
        ["eval", "ppl", "CKPT"],
        ["eval", "genppl", "CKPT"],
        ["eval", "zeroshot", "CKPT", "--tasks", "x"],
        ["eval", "fid", "CKPT"],
        ["audit", "idle", "--seq-len", "8", "--steps", "8", "--ell", "1"],
        ["audit", "precision", "CKPT"],
        ["audit", "bound", "--toy", "4,2,2"],
        ["train", "tiny/arm"],
    ],
)
def test_out_that_is_a_file_is_refused_before_any_work(tmp_path, command):
    target = tmp_path / "taken.txt"
    target.write_text("keep me")
    res = _run(*[str(tmp_path / "missing-ckpt") if a == "CKPT" else a for a in command], "--out", str(target))
    assert res.exit_code == 2 and "is a file" in res.output
    assert "missing-ckpt" not in res.output  # refused before the checkpoint was even looked at
    assert target.read_text() == "keep me"


@pytest.mark.parametrize(
    "command",
    [
        ["eval", "ppl", "CKPT"],
        ["eval", "genppl", "CKPT"],
        ["eval", "zeroshot", "CKPT", "--tasks", "x"],
        ["eval", "fid", "CKPT"],
        ["audit", "idle", "--seq-len", "8", "--steps", "8", "--ell", "1"],
        ["audit", "precision", "CKPT"],
        ["audit", "bound", "--toy", "4,2,2"],
        ["train", "tiny/arm"],
        ["audit", "gumbel"],
        ["bench"],
        ["quickstart"],
        ["reproduce", "quickstart"],
        ["reproduce", "small"],
        ["reproduce", "precision"],
        ["export", "CKPT"],
        ["import", "CKPT"],
    ],
)
def test_an_empty_out_is_refused_before_any_work(tmp_path, monkeypatch, command):
    """An empty --out means the current folder: `train --out ''` would spread a checkpoint there."""
    monkeypatch.chdir(tmp_path)
    for out in ("", " "):
        res = _run(*[str(tmp_path / "missing-ckpt") if a == "CKPT" else a for a in command], "--out", out)
        assert res.exit_code == 2 and "empty folder name" in res.output, res.output
        assert "missing-ckpt" not in res.output
    assert list(tmp_path.iterdir()) == []


def test_a_lock_file_that_is_a_symbolic_link_is_refused_and_its_target_kept(tmp_path):
    precious = tmp_path / "notes.txt"
    precious.write_text("keep me")
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").symlink_to(precious)
    res = _run("train", "tiny/arm", "train.steps=2", "--out", str(run))
    assert res.exit_code == 2 and "symbolic link" in res.output and "remove the link" in res.output
    assert precious.read_text() == "keep me" and sorted(p.name for p in run.iterdir()) == [".lock"]


def test_a_full_disk_at_the_record_is_an_error_and_leaves_nothing(tmp_path, monkeypatch):
    from tests.harness.test_io import full_disk

    full_disk(monkeypatch)
    res = _run("audit", "bound", "--toy", "4,2,2", "--out", str(tmp_path / "out"))
    assert res.exit_code == 2 and "No space left on device" in res.output and "free space" in res.output
    assert "Traceback" not in res.output and list((tmp_path / "out").iterdir()) == []


def test_nan_weights_are_an_error_and_no_record_is_written(trained, tmp_path):
    from safetensors.torch import load_file, save_file

    ckpt = tmp_path / "nan"
    shutil.copytree(trained("mdlm"), ckpt)
    tensors = {k: v.clone() for k, v in load_file(str(ckpt / "model.safetensors")).items()}
    for key in tensors:
        if tensors[key].dtype.is_floating_point:
            tensors[key].fill_(float("nan"))
    save_file(tensors, str(ckpt / "model.safetensors"), metadata={"step": "20"})
    res = _run("eval", "ppl", str(ckpt), "--max-rows", "2", "--out", str(tmp_path / "rec"))
    assert res.exit_code == 2 and "not finite" in res.output and "fix:" in res.output
    assert not (tmp_path / "rec").exists() or not list((tmp_path / "rec").iterdir())


def test_train_with_yaml_float_notation_and_range_errors(tmp_path):
    ok = _run("train", "tiny/arm", "train.steps=2", "train.lr=3e-4", "--out", str(tmp_path / "r"), "--quiet", "--json")
    assert ok.exit_code == 0, ok.output
    bad = _run("train", "tiny/arm", "train.ema=2", "--out", str(tmp_path / "s"))
    assert bad.exit_code == 2 and "train.ema" in bad.output and "[0, 1)" in bad.output
    assert not (tmp_path / "s").exists()


def test_restart_flag_and_exit_codes_on_the_cli(tmp_path):
    args = ["train", "tiny/arm", "train.steps=2", "--out", str(tmp_path / "r"), "--quiet"]
    assert _run(*args).exit_code == 0
    again = _run(*args)
    assert again.exit_code == 2 and "--restart" in again.output
    assert _run(*args, "--restart").exit_code == 0
    both = _run(*args, "--restart", "--resume")
    assert both.exit_code == 2 and "exclude" in both.output


def test_offline_hub_data_fails_at_once(monkeypatch):
    import harness.offline

    for flag in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(flag, raising=False)
    monkeypatch.setattr(harness.offline, "hub_reachable", lambda timeout=3.0: False)
    began = time.perf_counter()
    res = _run("data", "info", "hf:wikitext:wikitext-2-raw-v1:validation")
    assert res.exit_code == 2 and "cannot be reached" in res.output and "HF_DATASETS_OFFLINE" in res.output
    assert time.perf_counter() - began < 5


def test_sigterm_during_an_evaluation_leaves_no_partial_record(trained, tmp_path):
    out = tmp_path / "rec"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness",
            "eval",
            "ppl",
            str(trained("mdlm")),
            "--mc-samples",
            "2000",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    time.sleep(6)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert not out.exists() or not [p for p in out.iterdir()]


@pytest.mark.parametrize(
    "args,match",
    [
        (["reproduce", "small", "--seeds", "1000000000"], "not in the range 1<=x<=100"),
        (["audit", "idle", "--steps", "1000000000"], "not in the range 1<=x<=1048576"),
        (["audit", "idle", "--steps", "1000000", "--seq-len", "100000"], "unit-steps"),
        (["audit", "gumbel", "--mdlm-step", "3", "--vocab", "100000000"], "not in the range 2<=x<=10000000"),
    ],
)
def test_a_setting_that_would_run_for_hours_is_refused_at_once(args, match):
    """Values that used to sit silent for minutes: refused before any work, naming the limit."""
    began = time.perf_counter()
    res = _run(*args)
    assert res.exit_code == 2 and match in " ".join(res.output.split()), res.output
    assert time.perf_counter() - began < 10


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: 512 GB"),
        MemoryError(),
    ],
)
def test_a_failed_allocation_is_named_not_a_traceback(tmp_path, monkeypatch, error):
    import harness.training

    def allocate(*args, **kwargs):
        raise error

    monkeypatch.setattr(harness.training, "train", allocate)
    res = _run("train", "tiny/arm", "--out", str(tmp_path / "r"))
    assert res.exit_code == 2 and "error: out of memory" in res.output and "train.batch_size" in res.output
    assert "Traceback" not in res.output and "internal error" not in res.output


@pytest.mark.parametrize("value", ["1e-320", "0", "-1", "1e9", "nan"])
def test_a_temperature_the_sampler_cannot_use_is_refused_at_parse_time(value):
    res = _run("eval", "genppl", "CKPT", "--temperature", value)
    assert res.exit_code == 2 and "--temperature" in res.output
    assert "0.001<=x<=1000" in res.output or "is not a finite number" in res.output


def test_check_temperature_names_the_range():
    from harness.errors import PrimebenchError
    from harness.sampling.categorical import check_temperature

    assert check_temperature(0.7) == 0.7
    for bad in (1e-320, 0.0, float("inf"), float("nan")):
        with pytest.raises(PrimebenchError, match=r"must lie in \[0.001, 1000\]"):
            check_temperature(bad)
