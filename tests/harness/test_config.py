import dataclasses

import pytest

from harness.config import Config, apply_overrides, config_from_dict, load_config, preset_names
from harness.errors import ConfigError


def test_presets_exist_for_every_family():
    names = preset_names()
    for family in ("arm", "mdlm", "bd3lm", "masked", "prime"):
        assert f"tiny/{family}" in names
        assert load_config(f"tiny/{family}").model.family == family


def test_overrides_are_typed_and_dotted():
    cfg = load_config("tiny/arm", ["train.steps=7", "train.lr=0.01", "model.d_model=32", "seed=3", "data.wrap=false"])
    assert cfg.train.steps == 7 and cfg.train.lr == 0.01 and cfg.model.d_model == 32 and cfg.seed == 3
    assert cfg.data.wrap is False
    assert isinstance(cfg.train.lr, float)


def test_unknown_key_gets_did_you_mean():
    with pytest.raises(ConfigError) as exc:
        load_config("tiny/arm", ["train.step=5"])
    assert "train.step" in str(exc.value) and "steps" in str(exc.value)
    with pytest.raises(ConfigError, match="unknown config key 'modle'"):
        config_from_dict({"modle": {}})


def test_wrong_type_and_choices_rejected():
    with pytest.raises(ConfigError, match="train.steps"):
        load_config("tiny/arm", ["train.steps=many"])
    with pytest.raises(ConfigError, match="precision"):
        load_config("tiny/arm", ["train.precision=fp8"])
    with pytest.raises(ConfigError, match="divisible"):
        load_config("tiny/arm", ["model.d_model=30", "model.n_heads=4"])
    with pytest.raises(ConfigError, match="ell"):
        load_config("tiny/prime", ["model.ell=3"])  # 64 not divisible by 3


def test_unknown_preset_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="tiny/arm"):
        load_config("tiny/amr")
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(str(tmp_path / "nope.yaml"))


def test_yaml_path_round_trip(tmp_path):
    cfg = load_config("tiny/prime", ["train.steps=3"])
    path = tmp_path / "c.yaml"
    path.write_text(cfg.to_yaml())
    assert load_config(str(path)) == cfg
    assert config_from_dict(cfg.to_dict()) == cfg


def test_frozen():
    cfg = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.seed = 1  # type: ignore[misc]


def test_apply_overrides_does_not_mutate():
    data = {"train": {"steps": 1}}
    out = apply_overrides(data, ["train.steps=2"])
    assert data["train"]["steps"] == 1 and out["train"]["steps"] == 2


@pytest.mark.parametrize(
    "key,value,owners",
    [
        ("ell", 2, "prime family"),
        ("carry_over", "false", "prime family"),
        ("schedule", "linear", None),
        ("block_size", 4, "bd3lm family"),
        ("time_conditioning", "true", None),
    ],
)
def test_each_family_accepts_only_its_own_model_keys(key, value, owners):
    if owners is None:  # a key several families share: every registered family whose config has it
        from harness.models import family_class, family_names

        have = [f for f in family_names() if key in {x.name for x in dataclasses.fields(family_class(f).config_class)}]
        assert len(have) > 1
        owners = f"{', '.join(have)} families"
    with pytest.raises(
        ConfigError, match=rf"'model\.{key}' for the arm family \(model\.{key} only applies to the {owners}\)"
    ):
        load_config("tiny/arm", [f"model.{key}={value}"])
    with pytest.raises(ConfigError, match="did you mean 'schedule'"):
        load_config("tiny/mdlm", ["model.shedule=linear"])
    with pytest.raises(ConfigError, match="'model.start_token' for the prime family"):
        load_config("tiny/prime", ["model.start_token=true"])
    with pytest.raises(ConfigError, match="'model.time_conditioning' for the masked family"):
        load_config("tiny/masked", ["model.time_conditioning=false"])  # the masked model has no time input
    with pytest.raises(ConfigError, match="did you mean 'prime'"):
        load_config("tiny/arm", ["model.family=prine"])


def test_saved_configs_round_trip_with_only_the_familys_keys():
    for family in ("arm", "mdlm", "masked", "prime"):
        cfg = load_config(f"tiny/{family}")
        again = config_from_dict(cfg.to_dict())
        assert again == cfg and type(again.model) is type(cfg.model)
    assert "ell" not in load_config("tiny/arm").to_dict()["model"]
    assert load_config("tiny/prime").to_dict()["model"]["ell"] == 2


def test_checkpoint_configs_written_with_every_key_still_load():
    from harness.config import drop_legacy_model_keys

    legacy = {
        "family": "arm",
        "d_model": 64,
        "n_layers": 2,
        "n_heads": 2,
        "mlp_ratio": 4,
        "dropout": 0.0,
        "time_conditioning": False,
        "cond_dim": 64,
        "schedule": "loglinear",
        "ell": 1,
        "carry_over": True,
        "positions": "rope",
        "image_shape": "",
        "start_token": False,
    }
    cfg = config_from_dict(drop_legacy_model_keys({"model": legacy}))
    assert cfg.model.family == "arm" and cfg.model.d_model == 64
    with pytest.raises(ConfigError, match="model.ell"):  # a value that meant something is never dropped
        config_from_dict(drop_legacy_model_keys({"model": dict(legacy, ell=2)}))


@pytest.mark.parametrize("text, value", [("3e-4", 3e-4), ("1e6", 1e6), ("3.0e-4", 3e-4), ("2E-3", 2e-3), (".5", 0.5)])
def test_numbers_in_usual_notations_in_overrides_and_files(tmp_path, text, value):
    from harness.config import load_config

    assert load_config("tiny/arm", [f"train.lr={text}"]).train.lr == pytest.approx(value)
    (tmp_path / "c.yaml").write_text(f"model: {{family: arm}}\ntrain: {{lr: {text}, steps: 1e3}}\n")
    cfg = load_config(str(tmp_path / "c.yaml"))
    assert cfg.train.lr == pytest.approx(value) and cfg.train.steps == 1000 and isinstance(cfg.train.steps, int)


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.ema=2", "train.ema"),
        ("train.ema=-0.1", "train.ema"),
        ("train.lr=0", "train.lr"),
        ("train.lr=-1e-3", "train.lr"),
        ("train.beta2=1", "train.beta2"),
        ("model.dropout=1.5", "model.dropout"),
        ("train.warmup=-1", "train.warmup"),
        ("train.steps=0", "train.steps"),
        ("seed=-1", "seed"),
        ("train.grad_clip=-1", "train.grad_clip"),
        ("train.lr=.inf", "finite"),
        ("train.steps=2.5", "integer"),
    ],
)
def test_numeric_keys_are_range_checked(override, message):
    from harness.config import load_config

    with pytest.raises(ConfigError, match=message) as info:
        load_config("tiny/arm", [override])
    assert info.value.fix


def test_a_wrong_type_names_the_override_or_the_file_and_the_key(tmp_path):
    with pytest.raises(ConfigError) as exc:
        load_config("tiny/arm", ["train.steps=abc"])
    assert exc.value.problem.startswith("override 'train.steps=abc': ") and "must be an integer" in exc.value.problem
    path = tmp_path / "run.yaml"
    path.write_text("name: mine\ntrain:\n  lr: fast\n")
    with pytest.raises(ConfigError) as exc:
        load_config(str(path))
    assert (
        exc.value.problem.startswith(f"config file {str(path)!r}: ")
        and "'train.lr' must be a number" in exc.value.problem
    )
    with pytest.raises(ConfigError, match=r"^override 'train.lr=slow'"):  # the override, not the file, set it last
        load_config(str(path), ["train.lr=slow"])
    path.write_text("train: 5\n")
    with pytest.raises(ConfigError, match=r"config file '.*run.yaml', key train: config section"):
        load_config(str(path))
    path.write_text("model:\n  family: arm\n  d_model: 30\n  n_heads: 4\n")
    with pytest.raises(ConfigError, match=r"config file '.*run.yaml' with the overrides seed=1: .*divisible"):
        load_config(str(path), ["seed=1"])
    with pytest.raises(ConfigError, match=r"^override 'model.famly=x': unknown config key 'model.famly'"):
        load_config("tiny/arm", ["model.famly=x"])


def test_a_wrong_type_on_the_cli_names_the_file_and_the_key(tmp_path):
    from click.testing import CliRunner

    from harness.cli import main

    path = tmp_path / "run.yaml"
    path.write_text("name: mine\ntrain:\n  lr: fast\n")
    res = CliRunner().invoke(main, ["train", str(path), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and str(path) in res.output and "train.lr" in res.output and "fix:" in res.output


@pytest.mark.parametrize(
    "text,match",
    [
        ("model:\n  family: mdlm\ntrain:\n  lr: 1.0e-3\n  steps: 3\n  lr: 5\n", r"gives 'lr' twice \(lines 4 and 6\)"),
        ("model:\n  family: mdlm\ntrain:\n  steps: 3\ntrain:\n  lr: 1\n", r"gives 'train' twice \(lines 3 and 5\)"),
        ("- model\n- train\n", "is a YAML list, not a mapping of sections"),
        ("just words\n", "is a YAML str, not a mapping of sections"),
    ],
)
def test_a_config_file_that_yaml_would_read_wrongly_is_refused(tmp_path, text, match):
    """A repeated key (YAML keeps the last without a word), a list or a scalar: refused, named."""
    path = tmp_path / "run.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_config(str(path))


def test_a_binary_config_file_is_named(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_bytes(b"\xff\xfe\x00\x01binary")
    with pytest.raises(ConfigError, match="is not text"):
        load_config(str(path))


def test_an_alias_bomb_is_named_without_being_expanded(tmp_path):
    """A YAML value built from nested aliases (9^9 leaves when expanded) is refused at once with a short
    message: the error shows the value bounded in depth and length."""
    value = "&a0 [x, x, x, x, x, x, x, x, x]"
    for i in range(1, 9):
        value = f"&a{i} [{value}, " + ", ".join([f"*a{i - 1}"] * 8) + "]"
    path = tmp_path / "bomb.yaml"
    path.write_text("model:\n  family: mdlm\ntrain:\n  lr: " + value + "\n")
    with pytest.raises(ConfigError, match="must be a number") as info:
        load_config(str(path))
    assert len(str(info.value)) < 5000
