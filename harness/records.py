"""Result records: every evaluation writes one JSON document; tables are views of records.

Schema ``primebench-record/1``::

    {
      "schema": "primebench-record/1",
      "evaluation": "ppl" | "genppl" | "zeroshot" | "precision" | "idle" | "bound" | "fid" | ...,
      "model":  {"name", "family", "checkpoint", "checkpoint_sha256", "config",
                 "hub": {"repo", "revision", "commit", "endpoint", "files": {PATH: sha256}}},  # hub names only
      "metrics": {NAME: {"value", "stderr", "kind", "units"}},   # kind: exact | bound | paper-objective | estimate
      "protocol": {...every setting that moves the number...},
      "provenance": {"seed", "packages", "git_revision", "device", "wall_s", "created", "command", "harness_version"}
    }

``stderr`` is ``null`` when it cannot be estimated (for example one Monte-Carlo sample per
sequence) and ``0`` for exact numbers.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import platform
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from harness.errors import NumericalError, PrimebenchError
from harness.io import create_exclusive, file_sha256, read_json
from harness.models import family_class
from harness.models.hub import hub_provenance
from harness.models.releases import format_of
from harness.nll import KINDS

SCHEMA = "primebench-record/1"
_PACKAGES = ("torch", "transformers", "lm_eval", "tokenizers", "torchmetrics", "torch-fidelity", "numpy", "primebench")


@dataclass(frozen=True)
class Metric:
    """One number with its standard error, what it is, and its units."""

    value: float
    stderr: float | None
    kind: str
    units: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"metric kind must be one of {KINDS}, got {self.kind!r}")

    def to_dict(self) -> dict[str, Any]:
        se = (
            None
            if self.stderr is None or (isinstance(self.stderr, float) and math.isnan(self.stderr))
            else float(self.stderr)
        )
        return {"value": float(self.value), "stderr": se, "kind": self.kind, "units": self.units}


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def git_revision() -> str | None:
    root = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if rev.returncode != 0:
        return None
    return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def device_description(device) -> str:

    dev = torch.device(device)
    if dev.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(dev)}"
    return f"cpu:{platform.machine()}:{torch.get_num_threads()} threads"


def model_block(
    checkpoint: Path | None, cfg=None, *, name: str | None = None, family: str | None = None
) -> dict[str, Any]:
    block: dict[str, Any] = {"name": name, "family": family}
    if checkpoint is not None:
        block["checkpoint"] = str(checkpoint)
        folder = str(checkpoint)

        fmt = format_of(folder)
        hub = hub_provenance(folder)
        if hub is not None:  # a release named on the hub: repository, revision, commit and file hashes
            block["hub"] = {k: v for k, v in hub.items() if k != "local"}
            folder = hub["local"] or folder
        elif fmt is not None:  # published sources: hash their weights file
            folder = folder[len(fmt.prefix) :].partition("#")[0]
        weights = Path(folder) if Path(folder).is_file() else Path(folder) / "model.safetensors"
        block["checkpoint_sha256"] = file_sha256(weights) if weights.is_file() else None
    if cfg is not None:
        block["config"] = cfg.to_dict()
        block["family"] = family or cfg.model.family
        block["name"] = name or cfg.name
        block["label"] = family_class(cfg.model.family).label(cfg.model)  # how tables name it
        block["order"] = family_class(cfg.model.family).table_order
    return block


def make_record(
    evaluation: str,
    *,
    model: dict[str, Any],
    metrics: dict[str, Metric],
    protocol: dict[str, Any],
    seed: int | None,
    device: str = "cpu",
    wall_s: float | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    record = {
        "schema": SCHEMA,
        "evaluation": evaluation,
        "model": model,
        "metrics": {k: v.to_dict() for k, v in metrics.items()},
        "protocol": protocol,
        "provenance": {
            "seed": seed,
            "packages": package_versions(),
            "git_revision": git_revision(),
            "device": device_description(device),
            "wall_s": None if wall_s is None else round(float(wall_s), 3),
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["primebench", *sys.argv[1:]])
            if sys.argv and "primebench" in Path(sys.argv[0]).name
            else None,
            "harness_version": package_versions().get("primebench"),
        },
    }
    if extra:
        record.update(extra)
    bad = {k: v["value"] for k, v in record["metrics"].items() if not math.isfinite(v["value"])}
    if bad:
        raise NumericalError(
            f"{evaluation}: metric{'s' if len(bad) > 1 else ''} "
            + ", ".join(f"{k} = {v}" for k, v in bad.items())
            + f" for {model.get('checkpoint') or model.get('name') or 'the model'}: the model's outputs are not finite "
            "(its weights may hold NaN or inf); no record is written",
            fix="evaluate a checkpoint whose weights are finite (training keeps the last finite one), "
            "or retrain with a lower train.lr",
        )
    return record


def _finite_or_null(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_null(v) for v in value]
    return value


def record_json(record: dict[str, Any], indent: int | None = 2) -> str:
    """The record as strict JSON: a non-finite number outside the metrics (a standard error that
    cannot be estimated, say) becomes ``null``, never a bare ``NaN`` that JSON parsers reject."""
    return json.dumps(_finite_or_null(record), indent=indent, default=str, allow_nan=False)


def training_seed(model: dict[str, Any]) -> int:
    """The training seed of a record's ``model`` block: its config's ``seed`` (0, the preset's own,
    when the block has no config or no seed)."""
    config = model.get("config") if isinstance(model, dict) else None
    seed = config.get("seed") if isinstance(config, dict) else None
    return int(seed) if seed is not None else 0


def record_stem(record: dict[str, Any]) -> str:
    """``EVALUATION-MODEL-HASH``: the hash is over the protocol, so one protocol, one name."""
    name = (record.get("model") or {}).get("name") or "model"
    digest = hashlib.sha256(json.dumps(record["protocol"], sort_keys=True, default=str).encode()).hexdigest()[:8]
    return f"{record['evaluation']}-{name}-{digest}".replace("/", "_")


def record_filename(record: dict[str, Any]) -> str:
    return record_stem(record) + ".json"


def write_record(
    record: dict[str, Any], out_dir: Path, *, attachments: dict[str, tuple[str, bytes]] | None = None
) -> Path:
    """Create the record's file in ``out_dir`` and return its path; never overwrites a file.

    A taken name moves on to ``NAME~1.json``, ``NAME~2.json``, ... (two processes writing the same
    name both keep their record). ``attachments``: ``{record key: (suffix, bytes)}`` files written
    next to the record under the same name (``NAME.samples.jsonl``), whose paths the record then
    holds under those keys, so a record always points at its own files.
    """

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem, attachments, n = record_stem(record), attachments or {}, 0
    while True:
        name = stem if n == 0 else f"{stem}~{n}"
        n += 1
        path = out_dir / f"{name}.json"
        if path.exists() or any((out_dir / f"{name}{suffix}").exists() for suffix, _ in attachments.values()):
            continue
        made: list[Path] = []
        try:
            for key, (suffix, data) in attachments.items():
                made.append(create_exclusive(out_dir / f"{name}{suffix}", data, numbered=False))
                record[key] = str(made[-1])
            return create_exclusive(path, (record_json(record) + "\n").encode("utf-8"), numbered=False)
        except FileExistsError:  # another process took this name between the check and the link
            for file in made:
                file.unlink(missing_ok=True)
        except BaseException:  # e.g. a full disk: no attachment is left without its record
            for file in made:
                file.unlink(missing_ok=True)
            raise


def read_record(path: Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise PrimebenchError(f"record {str(path)!r} does not exist", fix="pass JSON files written with --out")

    record = read_json(path, what="record", fix="re-run the evaluation with --out")
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise PrimebenchError(
            f"{str(path)!r} is not a primebench record (schema "
            f"{record.get('schema') if isinstance(record, dict) else None!r})",
            fix=f'records carry "schema": "{SCHEMA}"',
        )
    for key in ("evaluation", "metrics", "protocol", "provenance"):
        if key not in record:
            raise PrimebenchError(f"record {str(path)!r} lacks {key!r}", fix="re-run the evaluation with --out")
    bad = _bad_metric(record)
    if bad is not None:
        raise PrimebenchError(f"record {str(path)!r}: {bad}", fix="re-run the evaluation with --out")
    return record


#: how deep a record's JSON may nest (the harness writes fewer than 10 levels)
MAX_RECORD_DEPTH = 64


def _bad_metric(node: Any, where: str = "", depth: int = 0) -> str | None:
    """The first metric of a record whose number is not a number (a string, a bool), or a nesting
    deeper than :data:`MAX_RECORD_DEPTH`; None when every metric reads as one."""
    if depth > MAX_RECORD_DEPTH:
        return f"nested more than {MAX_RECORD_DEPTH} levels deep at {where or 'the top'}"
    if isinstance(node, dict):
        if "value" in node and "kind" in node:
            for field in ("value", "stderr"):
                got = node.get(field)
                if got is not None and (isinstance(got, bool) or not isinstance(got, (int, float))):
                    return f"the metric at {where} has {field} {str(got)[:40]!r}, not a number"
        for key, child in node.items():
            found = _bad_metric(child, f"{where}.{key}" if where else str(key), depth + 1)
            if found:
                return found
    elif isinstance(node, list):
        for i, child in enumerate(node):
            found = _bad_metric(child, f"{where}[{i}]", depth + 1)
            if found:
                return found
    return None
