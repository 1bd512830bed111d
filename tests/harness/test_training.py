import json
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
    with pytest.raises(CheckpointError, match="inconsistent"):
        train(cfg, tmp_path / "r", quiet=True, resume=True)


def test_ddp_two_cpu_processes_match_one(tmp_path):
    """torchrun with two gloo ranks splits the same global batch and ends at the same weights."""
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    assert torchrun, "torchrun is installed with torch"
    args = ["tiny/arm", "train.steps=4", "train.eval_every=4", "train.save_every=4", "--quiet", "--json"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [torchrun, "--nproc_per_node", "2", "--master_port", "29517", "-m", "harness", "train", *args, "--out", str(tmp_path / "ddp")],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summaries = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(summaries) == 1, "only rank 0 prints the summary"
    train(load_config(args[0], args[1:4]), tmp_path / "one", quiet=True)
    assert _max_diff(_weights(tmp_path / "ddp"), _weights(tmp_path / "one")) < 1e-5
