"""Run configuration: YAML files validated into frozen dataclasses.

A config has four parts, ``model``, ``data``, ``train`` and the top-level ``seed``/``name``. Unknown
keys are rejected with a did-you-mean hint; values are type-checked. Presets ship as package data
under ``harness/configs/`` and are addressed by name without the extension (``tiny/arm``); a path
to a YAML file works too. Command-line overrides use dotted keys (``train.steps=200``).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import reprlib
import typing
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from harness.errors import ConfigError
from harness.models import MODELS, family_class, family_names
from harness.models.base import ModelConfig


@dataclass(frozen=True)
class DataConfig:
    """Where training text comes from and how it is packed into rows of ``seq_len`` tokens.

    Images: ``corpus: image:NAME`` (``image:digits``, ``image:mnist5k``, ``image:cifar10:PATH``)
    with ``tokenizer: pixels``; one image is one row, so ``seq_len`` must be H*W*channels, and
    ``train_split``/``valid_split`` name the dataset's own splits (``train``, ``test``, ``all``).
    Packing keys (``wrap``, ``eos_between_docs``, ``remainder``) do not apply to images.
    """

    corpus: str = "wiki-embedded"
    tokenizer: str = "bytes"
    seq_len: int = 128
    wrap: bool = True
    eos_between_docs: bool = True
    remainder: str = "drop"
    train_split: str = "train"
    valid_split: str = "validation"


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation. ``batch_size`` is the global batch (split across DDP ranks and accumulation).
    ``lr_schedule``: after the linear warmup, ``constant`` (MDLM) or ``cosine`` (down to a tenth of
    ``lr`` at the last step; :func:`harness.training.lr_at`).

    ``sample_grid``: how many samples an image run draws into ``samples.png`` at the end (0: none).

    ``init_from``: a checkpoint folder of the same family, network shape and tokenizer whose (EMA)
    weights the run starts from instead of a random initialisation (fine-tuning; DUO's distillation
    starts from a trained DUO). The optimizer and the EMA start afresh; "" (default): random.
    """

    steps: int = 100
    batch_size: int = 16
    grad_accum: int = 1
    lr: float = 3e-4
    warmup: int = 10
    lr_schedule: str = "constant"
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    grad_clip: float = 1.0
    ema: float = 0.999
    eval_every: int = 50
    eval_batches: int = 4
    save_every: int = 100
    precision: str = "fp32"
    sample_grid: int = 64
    init_from: str = ""


@dataclass(frozen=True)
class Config:
    model: ModelConfig = field(default_factory=lambda: _family_config("arm")())
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    seed: int = 0
    name: str = "run"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


_SECTIONS = {"data": DataConfig, "train": TrainConfig}


def _family_config(family: str) -> type[ModelConfig]:

    return family_class(family).config_class


def _model_section(data: dict[str, Any]) -> ModelConfig:
    """Build ``model.*`` with the config class of its family: each family accepts only its own keys."""

    if not isinstance(data, dict):
        raise ConfigError(f"config section 'model' must be a mapping, got {_shown(data)}")
    family = data.get("family", "arm")
    if not isinstance(family, str) or family not in family_names():
        names = family_names()
        exc = ConfigError(
            f"unknown model family {family!r} (config key 'model.family')",
            fix=f"{_did_you_mean(str(family), names)}families: {', '.join(names)}",
        )
        exc.key = "model.family"
        raise exc
    cls = _family_config(family)
    known = {f.name for f in fields(cls)}
    for key in data:
        if key not in known:
            owners = [n for n in family_names() if key in {f.name for f in fields(MODELS.get(n).config_class)}]
            where = (
                f" (model.{key} only applies to the {', '.join(owners)} famil{'y' if len(owners) == 1 else 'ies'})"
                if owners
                else ""
            )
            exc = ConfigError(
                f"unknown config key 'model.{key}' for the {family} family{where}",
                fix=f"{_did_you_mean(key, sorted(known))}known keys under model.: {', '.join(sorted(known))}",
            )
            exc.key = f"model.{key}"
            raise exc
    return _build(cls, data, "model.")


#: values that versions writing every model key stored for the keys a family ignores
_LEGACY_MODEL_DEFAULTS = {
    "time_conditioning": False,
    "cond_dim": 64,
    "schedule": "loglinear",
    "ell": 1,
    "carry_over": True,
    "start_token": False,
}


def drop_legacy_model_keys(data: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint config written with every model key: drop the other families' keys that hold
    the values that meant "not used", so the family's own validation accepts the rest."""
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict):
        return data
    try:
        known = {f.name for f in fields(_family_config(model.get("family", "arm")))}
    except Exception:
        return data  # an unknown family gets its clear error from config_from_dict
    kept = {
        k: v
        for k, v in model.items()
        if k in known or k not in _LEGACY_MODEL_DEFAULTS or v != _LEGACY_MODEL_DEFAULTS[k]
    }
    return dict(data, model=kept)


_CHOICES = {
    ("train", "precision"): ("fp32", "bf16"),
    ("train", "lr_schedule"): ("constant", "cosine"),
    ("data", "remainder"): ("drop", "pad"),
    ("model", "positions"): ("rope", "image"),
    ("model", "mixer_placement"): ("input", "blocks"),
}


def _did_you_mean(key: str, options: list[str]) -> str:
    close = difflib.get_close_matches(key, options, n=1, cutoff=0.5)
    return f"did you mean {close[0]!r}? " if close else ""


_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def _as_number(value: Any) -> int | float | None:
    """``value`` as a number if it is one in a usual notation (YAML 1.1 reads ``3e-4`` and ``1e6``
    as strings, so they arrive here as text); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        text = value.strip()
        return int(text) if text.lstrip("+-").isdigit() else float(text)
    return None


def _coerce(path: str, value: Any, annotation: Any) -> Any:
    kind = (
        annotation
        if isinstance(annotation, type)
        else {"int": int, "float": float, "bool": bool, "str": str}.get(str(annotation), None)
    )
    number = _as_number(value)
    if kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is int:
        if isinstance(number, int):
            return number
        if isinstance(number, float) and math.isfinite(number) and number.is_integer():
            return int(number)  # 1e6 steps
    elif kind is float:
        if number is not None:
            if not math.isfinite(float(number)):
                raise ConfigError(
                    f"config key {path!r} must be a finite number, got {_shown(value)}",
                    fix=f"set {path} to a finite value",
                )
            return float(number)
    elif kind is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    wanted = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(kind, str(kind))
    raise ConfigError(f"config key {path!r} must be {wanted}, got {_shown(value)}", fix=f"set {path} to {wanted}")


#: allowed ranges of the numeric keys: (low, high, low included, high included); None: unbounded. The
#: upper bounds are far beyond any run and keep absurd values (``seed=1e30``, ``train.steps=1e30``) from
#: reaching torch as an overflow or a run that never ends
_RANGES: dict[str, tuple[float | None, float | None, bool, bool]] = {
    "seed": (0, 2**32, True, False),
    "model.d_model": (1, 65536, True, True),
    "model.n_layers": (1, 1024, True, True),
    "model.n_heads": (1, 1024, True, True),
    "model.mlp_ratio": (1, 64, True, True),
    "model.dropout": (0, 1, True, False),
    "model.mixer_width": (0, 1024, True, True),
    "model.cond_dim": (1, 65536, True, True),
    "model.ell": (1, 64, True, True),
    "data.seq_len": (3, 2**20, True, True),
    "train.steps": (1, 10**9, True, True),
    "train.batch_size": (1, 2**20, True, True),
    "train.grad_accum": (1, 65536, True, True),
    "train.lr": (0, None, False, False),
    "train.warmup": (0, 10**9, True, True),
    "train.weight_decay": (0, None, True, False),
    "train.beta1": (0, 1, True, False),
    "train.beta2": (0, 1, True, False),
    "train.grad_clip": (0, None, True, False),
    "train.ema": (0, 1, True, False),
    "train.eval_every": (1, 10**9, True, True),
    "train.eval_batches": (1, 10**6, True, True),
    "train.save_every": (1, 10**9, True, True),
    "train.sample_grid": (0, 10**4, True, True),
}


def _bound(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _check_range(path: str, value: Any) -> None:
    bounds = _RANGES.get(path)
    if bounds is None:
        return
    low, high, low_in, high_in = bounds
    below = low is not None and (value < low if low_in else value <= low)
    above = high is not None and (value > high if high_in else value >= high)
    if below or above:
        left = "(-inf" if low is None else ("[" if low_in else "(") + _bound(low)
        right = "inf)" if high is None else _bound(high) + ("]" if high_in else ")")
        raise ConfigError(
            f"config key {path!r} must lie in {left}, {right}, got {_shown(value)}",
            fix=f"set {path} to a value in {left}, {right}",
        )


def _build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"config section {prefix or 'top level'!r} must be a mapping, got {_shown(data)}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        try:
            kwargs[key] = _build_key(cls, key, value, prefix, known, hints)
        except ConfigError as exc:
            exc.key = getattr(exc, "key", None) or path  # where it went wrong, for load_config's message
            raise
    return cls(**kwargs)


def _build_key(cls: type, key: str, value: Any, prefix: str, known: set[str], hints: dict[str, Any]) -> Any:
    """The validated value of ``prefix + key`` in section ``cls``."""
    path = f"{prefix}{key}"
    if key not in known:
        raise ConfigError(
            f"unknown config key {path!r}",
            fix=f"{_did_you_mean(key, sorted(known))}known keys under {prefix or 'top level'}: "
            f"{', '.join(sorted(known))}",
        )
    if cls is Config and key == "model":
        return _model_section(value or {})
    if cls is Config and key in _SECTIONS:
        return _build(_SECTIONS[key], value or {}, f"{key}.")
    out = _coerce(path, value, hints[key])
    _check_range(path, out)
    choices = _CHOICES.get((prefix.rstrip("."), key))
    if choices and out not in choices:
        raise ConfigError(f"config key {path!r} must be one of {choices}, got {_shown(out)}")
    return out


def config_from_dict(data: dict[str, Any]) -> Config:
    """Validate a plain mapping into a :class:`Config` (unknown keys and wrong types are errors)."""
    cfg = _build(Config, data or {}, "")
    validate(cfg)
    return cfg


def validate(cfg: Config) -> None:
    """Checks that span several keys."""
    m = cfg.model
    if m.d_model % m.n_heads:
        raise ConfigError(
            f"model.d_model={m.d_model} is not divisible by model.n_heads={m.n_heads}",
            fix="choose n_heads that divides d_model",
        )
    if (m.d_model // m.n_heads) % 2:
        raise ConfigError(
            f"head dimension {m.d_model // m.n_heads} must be even for rotary embeddings",
            fix="choose d_model / n_heads even",
        )
    m.check()
    t = cfg.train
    if t.batch_size % t.grad_accum:
        raise ConfigError(
            f"train.batch_size={t.batch_size} is not divisible by train.grad_accum={t.grad_accum}",
            fix="make the global batch a multiple of the accumulation steps",
        )


def preset_names() -> list[str]:
    """Names of the presets shipped with the package (``tiny/arm``, ...)."""
    root = resources.files("harness") / "configs"
    names: list[str] = []

    def walk(node, prefix: str) -> None:
        for child in node.iterdir():
            if child.is_dir():
                walk(child, f"{prefix}{child.name}/")
            elif child.name.endswith(".yaml"):
                names.append(prefix + child.name[: -len(".yaml")])

    walk(root, "")
    return sorted(names)


def _shown(value: Any) -> str:
    """A config value as an error shows it: bounded in depth, length and count, so that a YAML
    alias bomb (a value that expands to gigabytes) is never expanded into a message."""

    short = reprlib.Repr()
    short.maxlevel, short.maxlist, short.maxdict, short.maxstring, short.maxother = 3, 6, 6, 80, 80
    return short.repr(value)


def read_config_source(name_or_path: str) -> tuple[dict[str, Any], str]:
    """Read a preset name or a YAML path into a raw mapping; return it with a description of the source."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ConfigError(
                f"config file {str(path)!r} does not exist", fix="pass an existing YAML file or a preset name"
            )
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ConfigError(
                f"config file {str(path)!r} is not text (not UTF-8)", fix="pass a YAML config file"
            ) from None
        except OSError as exc:
            raise ConfigError(f"config file {str(path)!r} cannot be read ({exc.strerror})") from None
        source = str(path)
    else:
        node = resources.files("harness") / "configs" / f"{name_or_path}.yaml"
        if not node.is_file():
            names = preset_names()
            raise ConfigError(
                f"unknown config preset {name_or_path!r}",
                fix=f"{_did_you_mean(name_or_path, names)}presets: {', '.join(names)}; or pass a YAML path",
            )
        text = node.read_text()
        source = f"preset:{name_or_path}"
    try:
        data = yaml.load(text, Loader=StrictLoader) or {}  # noqa: S506 (a SafeLoader that refuses repeated keys)
    except RepeatedKey as exc:
        raise ConfigError(
            f"config {source!r} gives {exc.key!r} twice (lines {exc.first} and {exc.second}); YAML would keep "
            "only the second without a word",
            fix="keep one of them",
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {source!r} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(
            f"config {source!r} is a YAML {type(data).__name__}, not a mapping of sections",
            fix="write it as sections: model:, data:, train: (see the presets in harness/configs)",
        )
    return data, source


class RepeatedKey(yaml.YAMLError):
    """A mapping that names one key twice (the YAML loader would silently keep the last)."""

    def __init__(self, key: Any, first: int, second: int):
        super().__init__(f"{key!r} repeated")
        self.key, self.first, self.second = key, first, second


class StrictLoader(yaml.SafeLoader):
    """yaml's SafeLoader, except that a mapping naming a key twice is a :class:`RepeatedKey` error."""


def _construct_strict_mapping(loader: StrictLoader, node, deep: bool = False):
    loader.flatten_mapping(node)
    lines: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            continue  # the base constructor names an unhashable key itself
        line = key_node.start_mark.line + 1
        if key in lines:
            raise RepeatedKey(key, lines[key], line)
        lines[key] = line
    return loader.construct_mapping(node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_strict_mapping)


def apply_overrides(data: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Apply ``a.b=value`` overrides (values parsed as YAML scalars) to a raw mapping."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value", fix="e.g. train.steps=200")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        parts = key.strip().split(".")
        node = out
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = {}
            elif not isinstance(child, dict):
                raise ConfigError(f"override {key!r}: {part!r} is not a section")
            node[part] = dict(child)
            node = node[part]
        node[parts[-1]] = value
    return out


def load_config(name_or_path: str, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Load a preset or YAML file, apply dotted overrides, validate.

    An error names where the bad value came from: the override (``train.steps=abc``) or the file and
    its key (``config file 'run.yaml', key train.lr: ...``)."""
    data, source = read_config_source(name_or_path)
    try:
        return config_from_dict(apply_overrides(data, overrides))
    except ConfigError as exc:
        raise _located(exc, source, overrides) from None


def _located(exc: ConfigError, source: str, overrides: list[str] | tuple[str, ...]) -> ConfigError:
    """``exc`` with its origin named: the override that set its key, else the config file."""
    key = getattr(exc, "key", None)
    given = [item for item in overrides if "=" in item and item.split("=", 1)[0].strip() == key]
    where = f"config {source!r}" if source.startswith("preset:") else f"config file {source!r}"
    if given:
        origin = f"override {given[-1]!r}"
    elif key is not None:
        origin = where if f"'{key}'" in exc.problem else f"{where}, key {key}"
    else:  # a check across keys (d_model and n_heads): the file and the overrides together
        origin = where + (f" with the overrides {' '.join(overrides)}" if overrides else "")
    located = ConfigError(f"{origin}: {exc.problem}", fix=exc.fix)
    located.key = key
    return located


def with_overrides(cfg: Config, overrides: list[str] | tuple[str, ...]) -> Config:
    return config_from_dict(apply_overrides(cfg.to_dict(), overrides))


__all__ = [
    "Config",
    "ModelConfig",
    "DataConfig",
    "TrainConfig",
    "load_config",
    "config_from_dict",
    "apply_overrides",
    "with_overrides",
    "preset_names",
    "replace",
]
