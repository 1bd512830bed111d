"""Faults that used to end in a traceback (or the wrong exit code) get an error: and a fix: line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from click.testing import CliRunner

from harness.cli import main
from tests.fixtures.processes import as_from_a_terminal


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _clean_error(res, *needles):
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    for needle in needles:
        assert needle in res.output, res.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA GPU")
@pytest.mark.parametrize(
    "command",
    [
        ["eval", "ppl", "CKPT"],
        ["eval", "genppl", "CKPT"],
        ["eval", "zeroshot", "CKPT"],
        ["eval", "fid", "CKPT"],
        ["audit", "precision", "CKPT"],
        ["audit", "bound", "CKPT"],
        ["train", "tiny/arm"],
        ["bench"],
    ],
)
def test_device_cuda_without_a_gpu_is_refused_before_anything_loads(tmp_path, command):
    res = _run(
        *[tmp_path / "missing-ckpt" if a == "CKPT" else a for a in command],
        "--device",
        "cuda",
        "--out",
        tmp_path / "out",
    )
    _clean_error(res, "error: --device 'cuda'", "no CUDA GPU", "fix: use --device cpu")
    assert "missing-ckpt" not in res.output and not (tmp_path / "out").exists()


def test_a_device_torch_does_not_know_is_refused(tmp_path):
    res = _run("eval", "ppl", tmp_path / "missing-ckpt", "--device", "gpu")
    _clean_error(res, "--device 'gpu' is not a torch device", "fix:")
    if torch.cuda.is_available():
        res = _run("eval", "ppl", tmp_path / "missing-ckpt", "--device", f"cuda:{torch.cuda.device_count()}")
        _clean_error(res, f"this machine has {torch.cuda.device_count()} GPU")


@pytest.mark.parametrize("out", ["a" * 300, "/".join(["deep"] * 1000)])
def test_an_out_path_too_long_for_the_file_system_is_refused(tmp_path, out):
    res = _run("audit", "bound", "--toy", "4,2,2", "--out", tmp_path / out)
    _clean_error(res, "File name too long", "use a shorter path")
    assert list(tmp_path.iterdir()) == []
    res = _run("train", "tiny/arm", "train.steps=1", "--out", tmp_path / out)
    _clean_error(res, "File name too long")


def test_a_file_system_error_on_any_path_is_an_error_line(tmp_path):
    from harness.records import write_record
    from tests.harness.views.test_tables import _ppl

    write_record(_ppl("a", "arm", kind="exact", se=0.0), tmp_path / "recs")
    res = _run("table", tmp_path / "recs", "--format", "md", "--out", tmp_path / ("b" * 300))
    _clean_error(res, "File name too long", "use a shorter path")  # --out is checked when parsed


@pytest.mark.parametrize(
    ("code", "fix"),
    [
        ("ENAMETOOLONG", "use a shorter path"),
        ("ENOSPC", "free space on that disk"),
        ("EACCES", "use a path you can read and write"),
    ],
)
def test_an_os_error_raised_inside_a_command_is_an_error_line(tmp_path, code, fix):
    """Any OSError with a file name that escapes a command becomes `error: <what>: <path>` + fix, exit 2;
    one without a file name is a bug (traceback, exit 1)."""
    import errno
    import os

    import click

    from harness.cli import _Group

    @click.group(cls=_Group)
    def group():
        pass

    @group.command()
    @click.option("--named/--unnamed", default=True)
    def boom(named):
        number = getattr(errno, code)
        if named:
            raise OSError(number, os.strerror(number), str(tmp_path / "x"))
        raise OSError(number, os.strerror(number))

    res = CliRunner().invoke(group, ["boom"])
    assert res.exit_code == 2, res.output
    assert f"error: {os.strerror(getattr(errno, code))}: '{tmp_path / 'x'}'" in res.output
    assert f"fix: {fix}" in res.output
    res = CliRunner().invoke(group, ["boom", "--unnamed"])
    assert res.exit_code == 1 and "a bug in primebench" in res.output


def test_restart_with_a_tokenizer_folder_that_is_a_link_removes_the_link_only(tmp_path):
    run = tmp_path / "run"
    args = ["train", "tiny/arm", "train.steps=2", "--out", run, "--quiet"]
    assert _run(*args).exit_code == 0
    shared = tmp_path / "shared-tokenizer"
    (run / "tokenizer").rename(shared)
    (run / "tokenizer").symlink_to(shared, target_is_directory=True)
    before = {p.name: p.read_bytes() for p in shared.iterdir()}
    res = _run(*args, "--restart")
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
    assert (run / "tokenizer").is_dir() and not (run / "tokenizer").is_symlink()  # the run wrote its own
    assert {p.name: p.read_bytes() for p in shared.iterdir()} == before  # the link's target is untouched


def test_ctrl_c_during_an_evaluation_exits_130_without_a_traceback(tmp_path, monkeypatch):
    import harness.evaluation.ppl

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(harness.evaluation.ppl, "run_ppl", interrupted)
    res = _run("eval", "ppl", tmp_path / "ckpt", "--out", tmp_path / "rec")
    assert res.exit_code == 130 and "error: interrupted (SIGINT)" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "rec").exists() or not list((tmp_path / "rec").iterdir())


def test_sigint_to_a_running_evaluation_exits_130(trained, tmp_path):
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
        preexec_fn=as_from_a_terminal,
    )
    time.sleep(10)  # past the imports: the evaluation is running
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted (SIGINT)" in err and "Traceback" not in err
    assert not out.exists() or not list(out.iterdir())
