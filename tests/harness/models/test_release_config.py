"""A release's ``config.json`` is read strictly: ``"time_conditioning": "false"`` must not turn time
conditioning on (``bool("false")`` is True), and a size that is not a positive integer is a clear error
naming the file and the key, not a traceback or a truncated number (issue 26)."""

from __future__ import annotations

import json

import pytest

import harness
from harness.errors import CheckpointError
from harness.models.release_config import config_flag, config_size
from tests.fixtures.releases import raw_weights, write_hf_folder


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """An ``mdlm-hf:`` folder; tests copy its weights by linking and write their own config.json."""
    return write_hf_folder(tmp_path_factory.mktemp("release") / "mdlm-owt", raw_weights())


def _with_config(release, folder, **changes):
    folder.mkdir()
    (folder / "model.safetensors").symlink_to(release / "model.safetensors")
    config = json.loads((release / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("value", ["false", "true", "False", "no", 2, -1, 0.5, None, [False]])
def test_a_flag_that_is_not_a_boolean_is_refused(release, tmp_path, value):
    folder = _with_config(release, tmp_path / "r", time_conditioning=value)
    with pytest.raises(CheckpointError, match="'time_conditioning' is .* it must be the JSON boolean") as info:
        harness.load(f"mdlm-hf:{folder}")
    assert str(folder / "config.json") in info.value.problem and "true or false" in info.value.fix


@pytest.mark.parametrize("value, expected", [(False, False), (True, True), (0, False), (1, True)])
def test_booleans_and_zero_or_one_are_flags(release, tmp_path, value, expected):
    model, _, cfg = harness.load(f"mdlm-hf:{_with_config(release, tmp_path / 'r', time_conditioning=value)}")
    assert model.time_conditioning is expected and cfg.model.time_conditioning is expected


@pytest.mark.parametrize(
    "key, value",
    [
        ("model_length", 0),
        ("model_length", -5),
        ("model_length", 2.5),
        ("model_length", "24"),
        ("model_length", True),
        ("n_heads", 0),
        ("vocab_size", 1),
    ],
)
def test_a_size_that_is_not_a_positive_integer_is_refused(release, tmp_path, key, value):
    folder = _with_config(release, tmp_path / "r", **{key: value})
    with pytest.raises(CheckpointError, match=f"'{key}' is .* it must be an integer >= ") as info:
        harness.load(f"mdlm-hf:{folder}")
    assert str(folder / "config.json") in info.value.problem and key in info.value.fix


def test_an_imported_folder_is_read_as_strictly(release, tmp_path):
    from harness.models.transfer import import_checkpoint

    out = import_checkpoint(f"mdlm-hf:{release}", tmp_path / "imported")
    config = json.loads((out / "config.json").read_text())
    assert config["time_conditioning"] is False
    for key, value, message in (
        ("time_conditioning", "false", "JSON boolean"),
        ("model_length", -1, "integer >= 1"),
        ("model_length", None, "integer >= 1"),
    ):
        (out / "config.json").write_text(json.dumps(dict(config, **{key: value})))
        with pytest.raises(CheckpointError, match=f"'{key}' is .*{message}") as info:
            harness.load(out)
        assert str(out / "config.json") in info.value.problem
    (out / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "n_blocks"}))
    with pytest.raises(CheckpointError, match="'n_blocks' is missing"):
        harness.load(out)


def test_the_helpers_name_nested_keys_and_keep_defaults():
    assert config_flag({}, "carry_over", where="f.json", default=True) is True
    with pytest.raises(CheckpointError, match="f.json: 'prime.carry_over' is 'true'"):
        config_flag({"carry_over": "true"}, "carry_over", where="f.json", default=True, label="prime.carry_over")
    assert config_size({"cond_dim": 0}, "cond_dim", where="f.json", minimum=0) == 0
    assert config_size({"ell": 2.0}, "ell", where="f.json", minimum=2) == 2
    with pytest.raises(CheckpointError, match="'prime.ell' is 1"):
        config_size({"ell": 1}, "ell", where="f.json", minimum=2, label="prime.ell")


def test_a_release_ckpt_config_is_read_as_strictly():
    from harness.errors import CheckpointError
    from harness.models.mdlm_import import model_shape

    good = {"model": {"length": 128, "hidden_size": 64, "cond_dim": 32, "n_blocks": 2, "n_heads": 4}}
    assert model_shape(good, "r.ckpt", vocab_size=9) == {
        "model_length": 128,
        "hidden_dim": 64,
        "cond_dim": 32,
        "n_blocks": 2,
        "n_heads": 4,
        "vocab_size": 9,
    }
    with pytest.raises(CheckpointError, match="model.length"):
        model_shape({"model": dict(good["model"], length=0)}, "r.ckpt")
    with pytest.raises(CheckpointError, match="model.n_heads"):
        model_shape({"model": {k: v for k, v in good["model"].items() if k != "n_heads"}}, "r.ckpt")
