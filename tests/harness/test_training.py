import json
import math
import os
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from harness.config import load_config
from harness.errors import CheckpointError, ConfigError
from harness.training import train
from tests.fixtures.processes import as_from_a_terminal

FAST = ["train.steps=8", "train.eval_every=4", "train.save_every=4"]


def _weights(path):
    return load_file(str(path / "model.safetensors"))


def _max_diff(a, b):
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def test_deterministic_for_a_fixed_seed(tmp_path):
    cfg = load_config("tiny/arm", FAST)
    train(cfg, tmp_path / "a", quiet=True)
    train(cfg, tmp_path / "b", quiet=True)
    assert _max_diff(_weights(tmp_path / "a"), _weights(tmp_path / "b")) == 0.0


@pytest.mark.parametrize("preset", ["tiny/arm", "tiny/mdlm", "tiny-digits/prime"])
def test_interrupted_and_resumed_run_matches_uninterrupted(tmp_path, preset):
    cfg = load_config(preset, FAST + (["train.sample_grid=4"] if "digits" in preset else []))
    full = train(cfg, tmp_path / "full", quiet=True)
    part = train(cfg, tmp_path / "part", quiet=True, stop_after=3)
    assert part.step == 3
    resumed = train(cfg, tmp_path / "part", quiet=True, resume=True)
    assert resumed.step == 8
    assert _max_diff(_weights(tmp_path / "full"), _weights(tmp_path / "part")) == 0.0
    assert resumed.train_loss == full.train_loss


def test_training_lowers_validation_loss(tmp_path):
    cfg = load_config("tiny/arm", ["train.steps=30", "train.eval_every=10"])
    train(cfg, tmp_path / "r", quiet=True)
    log = [json.loads(line) for line in (tmp_path / "r" / "train_log.jsonl").read_text().splitlines()]
    vals = [r["val_loss_ema"] for r in log if "val_loss_ema" in r]
    assert len(vals) == 3 and vals[-1] < vals[0] - 0.3


def test_refuses_to_overwrite_and_bad_resume(tmp_path):
    cfg = load_config("tiny/arm", ["train.steps=2"])
    train(cfg, tmp_path / "r", quiet=True)
    with pytest.raises(CheckpointError, match="--resume"):
        train(cfg, tmp_path / "r", quiet=True)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        train(cfg, tmp_path / "empty", quiet=True, resume=True)
    other = load_config("tiny/arm", ["train.steps=4", "model.d_model=32"])
    with pytest.raises(ConfigError, match="differs"):
        train(other, tmp_path / "r", quiet=True, resume=True)


def test_torn_checkpoint_detected(tmp_path):
    cfg = load_config("tiny/arm", ["train.steps=4", "train.save_every=2"])
    train(cfg, tmp_path / "r", quiet=True, stop_after=2)
    state = torch.load(tmp_path / "r" / "trainer_state.pt", weights_only=True)
    state["step"] = 1
    torch.save(state, tmp_path / "r" / "trainer_state.pt")
    with pytest.raises(CheckpointError, match="not the one saved with this checkpoint"):
        train(cfg, tmp_path / "r", quiet=True, resume=True)  # its SHA-256 is not the recorded one
    (tmp_path / "r" / "trainer_state.sha256").unlink()  # a checkpoint saved before the hash was recorded
    with pytest.raises(CheckpointError, match="inconsistent"):
        train(cfg, tmp_path / "r", quiet=True, resume=True)


class _Killed(BaseException):
    """A SIGKILL stand-in: not an Exception, so no `except Exception` tidies up after it."""


def test_a_save_killed_between_the_weights_and_the_state_is_completed_on_resume(tmp_path, monkeypatch, capsys):
    """A kill after the save's weights are in place but before its trainer state is: resume finds the
    whole save (nothing is lost) and continues to the same bytes as an uninterrupted run."""
    import harness.io

    cfg = load_config("tiny/arm", ["train.steps=6", "train.save_every=2", "train.eval_every=2"])
    train(cfg, tmp_path / "full", quiet=True)
    real_replace, saves = os.replace, []

    def killed_at_the_second_state(src, dst):
        if os.path.basename(dst) == "trainer_state.pt":
            saves.append(dst)
            if len(saves) == 2:  # the save at step 4
                raise _Killed
        real_replace(src, dst)

    monkeypatch.setattr(harness.io.os, "replace", killed_at_the_second_state)
    with pytest.raises(_Killed):
        train(cfg, tmp_path / "r", quiet=True)
    monkeypatch.undo()
    capsys.readouterr()
    resumed = train(cfg, tmp_path / "r", quiet=True, resume=True)
    assert "completed the save (step 4)" in " ".join(capsys.readouterr().err.split())  # the user is told
    assert resumed.step == 6 and _log_steps(tmp_path / "r") == [1, 2, 3, 4, 5, 6]
    for name in ("model.safetensors", "config.yaml"):
        assert (tmp_path / "r" / name).read_bytes() == (tmp_path / "full" / name).read_bytes(), name
    # the trainer state's values (its pickle's bytes differ after any resume, interrupted or not)
    got, want = (torch.load(tmp_path / run / "trainer_state.pt", weights_only=True) for run in ("r", "full"))
    assert got["step"] == want["step"] == 6 and torch.equal(got["torch_rng"], want["torch_rng"])
    assert all(
        torch.equal(got["optimizer"]["state"][i][k], v)
        for i, s in want["optimizer"]["state"].items()
        for k, v in s.items()
    )
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == sorted(p.name for p in (tmp_path / "full").iterdir())


def test_a_full_disk_during_a_save_keeps_the_previous_save_whole(tmp_path, monkeypatch):
    """ENOSPC while the trainer state of the save at step 4 is written: a clear error, the save at
    step 2 intact (weights and state), and resume from it reaches the uninterrupted run's bytes."""
    from safetensors import safe_open

    from harness.errors import PrimebenchError
    from tests.harness.test_io import full_disk

    cfg = load_config("tiny/arm", ["train.steps=6", "train.save_every=2", "train.eval_every=2"])
    train(cfg, tmp_path / "full", quiet=True)
    states = []

    def second_state(name):
        if "trainer_state.pt" in name:
            states.append(name)
        return "trainer_state.pt" in name and len(states) == 2

    full_disk(monkeypatch, when=second_state)
    with pytest.raises(PrimebenchError, match="No space left") as info:
        train(cfg, tmp_path / "r", quiet=True)
    monkeypatch.undo()
    assert "trainer_state.pt" in info.value.problem and "free space" in info.value.fix
    with safe_open(str(tmp_path / "r" / "model.safetensors"), framework="pt") as fh:
        assert fh.metadata()["step"] == "2"
    assert int(torch.load(tmp_path / "r" / "trainer_state.pt", weights_only=True)["step"]) == 2
    assert not any(p.name.endswith(".tmp") or p.name == ".pending" for p in (tmp_path / "r").iterdir())
    resumed = train(cfg, tmp_path / "r", quiet=True, resume=True)
    assert resumed.step == 6
    assert (tmp_path / "r" / "model.safetensors").read_bytes() == (tmp_path / "full" / "model.safetensors").read_bytes()


def test_ddp_two_cpu_processes_match_one(tmp_path):
    """torchrun with two gloo ranks splits the same global batch and ends at the same weights."""
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    assert torchrun, "torchrun is installed with torch"
    args = ["tiny/arm", "train.steps=4", "train.eval_every=4", "train.save_every=4", "--quiet", "--json"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [
            torchrun,
            "--nproc_per_node",
            "2",
            "--master_port",
            "29517",
            "-m",
            "harness",
            "train",
            *args,
            "--out",
            str(tmp_path / "ddp"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summaries = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(summaries) == 1, "only rank 0 prints the summary"
    train(load_config(args[0], args[1:4]), tmp_path / "one", quiet=True)
    assert _max_diff(_weights(tmp_path / "ddp"), _weights(tmp_path / "one")) < 1e-5


# --- hardening: interruption, locks, logs, divergence -------------------------------------------------


def _cli(*args, **kwargs):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "harness", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=as_from_a_terminal,
        **kwargs,
    )


def _log_steps(run):
    return [json.loads(line)["step"] for line in (run / "train_log.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("signum, code", [(15, 143), (2, 130)])
def test_signal_saves_a_resumable_checkpoint_and_resume_is_bit_identical(tmp_path, signum, code):
    import signal as _signal
    import time

    run = tmp_path / "run"
    overrides = ["train.steps=100000", "train.eval_every=100000", "train.save_every=100000"]
    proc = _cli("train", "tiny/arm", *overrides, "--out", str(run), "--quiet")
    deadline = time.time() + 120
    while time.time() < deadline:
        log = run / "train_log.jsonl"
        if log.exists() and len(log.read_text().splitlines()) >= 3:
            break
        time.sleep(0.1)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert _signal.Signals(signum).name in err and "--resume" in err
    stopped = int(torch.load(run / "trainer_state.pt", weights_only=True)["step"])
    assert stopped >= 3 and _log_steps(run) == list(range(1, stopped + 1))
    if signum != 15:
        return
    # resume to a few steps beyond, and compare with an uninterrupted run: same bytes
    target = [f"train.steps={stopped + 2}", "train.eval_every=100000", "train.save_every=100000"]
    train(load_config("tiny/arm", target), run, quiet=True, resume=True)
    train(load_config("tiny/arm", target), tmp_path / "full", quiet=True)
    assert (run / "model.safetensors").read_bytes() == (tmp_path / "full" / "model.safetensors").read_bytes()
    assert _log_steps(run) == list(range(1, stopped + 3))


def test_a_locked_run_folder_refuses_a_second_writer(tmp_path):
    from harness.errors import PrimebenchError
    from harness.io import FolderLock

    cfg = load_config("tiny/arm", ["train.steps=2"])
    with FolderLock(tmp_path / "r", what="run folder"):
        with pytest.raises(PrimebenchError, match="in use by another process"):
            train(cfg, tmp_path / "r", quiet=True)
    assert not (tmp_path / "r" / "model.safetensors").exists()
    train(cfg, tmp_path / "r", quiet=True)  # released: the run goes ahead
    assert (tmp_path / "r" / "model.safetensors").exists()


def test_two_concurrent_runs_in_one_folder_one_is_refused(tmp_path):
    import time

    run = tmp_path / "r"
    overrides = ["train.steps=100000", "train.eval_every=100000", "train.save_every=100000"]
    first = _cli("train", "tiny/arm", *overrides, "--out", str(run), "--quiet")
    deadline = time.time() + 120
    while not (run / "train_log.jsonl").exists() and time.time() < deadline:
        time.sleep(0.05)
    second = subprocess.run(
        [sys.executable, "-m", "harness", "train", "tiny/arm", *overrides, "--out", str(run), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    first.send_signal(15)
    first.communicate(timeout=120)
    assert second.returncode == 2 and "in use by another process" in second.stderr
    assert first.returncode == 143
    stopped = int(torch.load(run / "trainer_state.pt", weights_only=True)["step"])
    assert _log_steps(run) == list(range(1, stopped + 1))  # one run's steps, once each


def test_stale_log_is_not_appended_and_resume_drops_unsaved_steps(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    (run / "train_log.jsonl").write_text('{"step": 1, "loss": 9.0}\n{"step": 2, "loss": 9.0}\n')  # an aborted run
    cfg = load_config("tiny/arm", ["train.steps=4", "train.save_every=4", "train.eval_every=4"])
    train(cfg, run, quiet=True)
    assert _log_steps(run) == [1, 2, 3, 4] and (run / "train_log.stale.jsonl").exists()
    with open(run / "train_log.jsonl", "a") as fh:  # steps an interrupted run logged after its last save
        fh.write('{"step": 5, "loss": 1.0}\n{"step": 6, "loss": 1.0}\n{"step": 7, "lo')
    train(
        load_config("tiny/arm", ["train.steps=6", "train.save_every=4", "train.eval_every=4"]),
        run,
        quiet=True,
        resume=True,
    )
    assert _log_steps(run) == [1, 2, 3, 4, 5, 6]


def test_corrupt_state_points_to_restart_and_restart_starts_over(tmp_path):
    cfg = load_config("tiny/arm", ["train.steps=4", "train.save_every=2"])
    train(cfg, tmp_path / "r", quiet=True, stop_after=2)
    (tmp_path / "r" / "trainer_state.pt").write_bytes(b"not a torch file")
    with pytest.raises(CheckpointError, match="corrupt") as info:
        train(cfg, tmp_path / "r", quiet=True, resume=True)
    assert "--restart" in info.value.fix
    (tmp_path / "r" / "trainer_state.pt").unlink()
    with pytest.raises(CheckpointError) as info:
        train(cfg, tmp_path / "r", quiet=True, resume=True)
    assert "--restart" in info.value.fix
    with pytest.raises(CheckpointError, match="already holds a checkpoint") as info:
        train(cfg, tmp_path / "r", quiet=True)
    assert "--restart" in info.value.fix
    result = train(cfg, tmp_path / "r", quiet=True, restart=True)
    assert result.step == 4 and _log_steps(tmp_path / "r") == [1, 2, 3, 4]
    train(cfg, tmp_path / "fresh", quiet=True)
    assert (tmp_path / "r" / "model.safetensors").read_bytes() == (
        tmp_path / "fresh" / "model.safetensors"
    ).read_bytes()
    with pytest.raises(ConfigError, match="exclude"):
        train(cfg, tmp_path / "r", quiet=True, resume=True, restart=True)


def test_resume_with_fewer_steps_than_saved_is_an_error(tmp_path):
    train(load_config("tiny/arm", ["train.steps=4", "train.save_every=4"]), tmp_path / "r", quiet=True)
    with pytest.raises(ConfigError, match="below the step"):
        train(load_config("tiny/arm", ["train.steps=2"]), tmp_path / "r", quiet=True, resume=True)


def test_divergence_never_saves_non_finite_weights(tmp_path):
    from harness.errors import NumericalError

    cfg = load_config(
        "tiny/arm", ["train.steps=6", "train.lr=1e6", "train.warmup=0", "train.save_every=1", "train.grad_clip=0"]
    )
    with pytest.raises(NumericalError) as info:
        train(cfg, tmp_path / "r", quiet=True)
    saved = (
        int(torch.load(tmp_path / "r" / "trainer_state.pt", weights_only=True)["step"])
        if (tmp_path / "r" / "trainer_state.pt").exists()
        else None
    )
    message = info.value.problem
    if saved is None:
        assert "no checkpoint was saved" in message
    else:
        assert f"last finite checkpoint in {tmp_path / 'r'} is at step {saved}" in message
        weights = _weights(tmp_path / "r")
        assert all(bool(torch.isfinite(v).all()) for v in weights.values() if v.dtype.is_floating_point)


def test_same_run_gives_the_same_checkpoint_bytes(tmp_path):
    cfg = load_config("tiny/mdlm", ["train.steps=3", "train.save_every=3"])
    train(cfg, tmp_path / "a", quiet=True)
    train(cfg, tmp_path / "b", quiet=True)
    for name in ("model.safetensors", "trainer_state.pt", "config.yaml"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_training_health_logs_the_references_and_warns_on_the_plateau(trained):
    """Every evaluation line carries the unigram reference; masked families add the context gain;
    a diffusion model still at the unigram reference at half of its steps is warned about once."""
    from harness.health import PLATEAU_MARGIN

    for family in ("arm", "mdlm", "prime"):
        lines = [json.loads(line) for line in (trained(family) / "train_log.jsonl").read_text().splitlines()]
        evals = [r for r in lines if "val_loss_ema" in r]
        assert evals and all(math.isfinite(r["unigram_ref"]) for r in evals), family
        last = evals[-1]
        if family == "arm":
            assert "context_gain" not in last and "warning" not in last
            continue
        assert last["context_gain"] == pytest.approx(last["ce_all_masked"] - last["ce_masked_15"])
        plateau = last["val_loss_ema"] > last["unigram_ref"] - PLATEAU_MARGIN
        assert plateau and "has not learned to use context" in last["warning"]  # 20 tiny steps learn nothing


@pytest.mark.parametrize("family", ["mdlm", "prime"])
def test_masked_cross_entropy_by_rate(trained, family):
    """Rate 1 is the cross-entropy of the all-masked marginal; tokens are masked whole (every
    sub-token of a Prime token), so a rate-0.15 draw equals a hand-made corruption of those tokens."""
    import harness

    model, _, _ = harness.load(trained(family))
    x = torch.randint(0, model.vocab_size, (4, model.seq_len), generator=torch.Generator().manual_seed(0))

    def by_hand(masked):
        with torch.no_grad():
            z = model.units(x).masked_fill(model.unit_mask(masked), model.mask_id)
            return float(-model.log_probs(z, None).gather(-1, x[..., None]).squeeze(-1)[masked].double().mean())

    assert model.masked_cross_entropy(x, rate=1.0) == pytest.approx(
        by_hand(torch.ones_like(x, dtype=torch.bool)), rel=1e-6
    )
    few = model.masked_cross_entropy(x, rate=0.15, generator=torch.Generator().manual_seed(1))
    drawn = torch.rand(x.shape, generator=torch.Generator().manual_seed(1)) < 0.15
    assert few == pytest.approx(by_hand(drawn), rel=1e-6)


def test_lr_schedules():
    from harness.training import COSINE_FLOOR, lr_at

    const = load_config("tiny/mdlm", ["train.steps=100", "train.warmup=10", "train.lr=0.01"])
    assert [lr_at(const, s) for s in (0, 4, 9, 50, 99)] == pytest.approx([0.001, 0.005, 0.01, 0.01, 0.01])
    cos = load_config("tiny/mdlm", ["train.steps=100", "train.warmup=10", "train.lr=0.01", "train.lr_schedule=cosine"])
    lrs = [lr_at(cos, s) for s in range(100)]
    assert lrs[:10] == pytest.approx([0.001 * (s + 1) for s in range(10)])  # the same warmup
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))  # then never rises
    assert lrs[99] == pytest.approx(COSINE_FLOOR * 0.01) and lrs[54] == pytest.approx(
        0.01 * (1 + COSINE_FLOOR) / 2, rel=0.02
    )
    with pytest.raises(ConfigError, match="lr_schedule"):
        load_config("tiny/mdlm", ["train.lr_schedule=linear"])


@pytest.mark.parametrize(
    ("val_loss", "says"),
    [(3.20, "is within 0.05 nats of the unigram reference 3.1833"), (5.414, "is 2.2307 nats above the unigram")],
)
def test_plateau_warning_says_where_the_loss_is(val_loss, says):
    """A loss near the reference is "within" it; a loss far above it is said to be above, not within."""
    import torch

    from harness.health import Health
    from tests.toys import tiny

    model = tiny("arm", C=4, L=4)  # masks nothing: the warning alone is measured
    health = Health(3.1833, torch.zeros(1, 4, dtype=torch.long), torch.ones(1, 4), half_step=1, diffusion=True, seed=0)
    out = health.measure(model, step=1, val_loss=val_loss, device="cpu")
    assert says in out["warning"]
    assert "warning" not in health.measure(model, step=2, val_loss=val_loss, device="cpu")  # warned once
    below = Health(3.1833, torch.zeros(1, 4, dtype=torch.long), torch.ones(1, 4), half_step=1, diffusion=True, seed=0)
    assert "warning" not in below.measure(model, step=1, val_loss=3.0, device="cpu")


def test_a_pending_file_in_the_run_folder_stops_the_run_before_it_trains(tmp_path):
    """A plain file named .pending would make every save fail after all the steps: refused at the start."""
    from harness.errors import PrimebenchError

    (tmp_path / "r").mkdir()
    (tmp_path / "r" / ".pending").write_text("x")
    with pytest.raises(PrimebenchError, match=r"\.pending is not a folder"):
        train(load_config("tiny/arm", ["train.steps=2"]), tmp_path / "r", quiet=True)
    assert not (tmp_path / "r" / "train_log.jsonl").exists()


@pytest.mark.parametrize("call,stopped", [(1, 2), (2, 3)])
def test_a_signal_during_the_last_step_stops_the_caller_too(tmp_path, monkeypatch, call, stopped):
    """SIGTERM while the last step runs raises Interrupted (143) instead of returning, so a reproduce
    job stops rather than swallowing the signal. The trainer reads the rate twice a step: the first
    read is in the forward part, which the signal cuts at once (the step is dropped, step 2 is saved);
    the second comes after the update, which is kept: the run saves step 3 and stops."""
    import signal as _signal

    import harness.training as training
    from harness.errors import Interrupted

    real_lr_at, calls = training.lr_at, []

    def signal_at_the_last_step(cfg, step):
        if step == cfg.train.steps - 1:
            calls.append(step)
            if len(calls) == call:
                os.kill(os.getpid(), _signal.SIGTERM)
        return real_lr_at(cfg, step)

    monkeypatch.setattr(training, "lr_at", signal_at_the_last_step)
    with pytest.raises(Interrupted, match=f"SIGTERM received: stopped at step {stopped} of 3") as info:
        train(load_config("tiny/arm", ["train.steps=3", "train.eval_every=3"]), tmp_path / "r", quiet=True)
    assert info.value.exit_code == 143
    assert int(torch.load(tmp_path / "r" / "trainer_state.pt", weights_only=True)["step"]) == stopped
    assert _log_steps(tmp_path / "r") == list(range(1, stopped + 1))
    assert _signal.getsignal(_signal.SIGTERM) is _signal.SIG_DFL  # the handler is restored
