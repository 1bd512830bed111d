"""The stages of a reproduce job: hashed configs, atomic outputs, finished stages skipped.

A job (``primebench reproduce ...``) is a list of stages. Each stage has a name, a JSON config (what
it computes: model config, evaluation settings, seed) and a maker. :class:`Stages` keeps one
manifest per stage under ``OUT/stages/NAME.json`` with the config, its hash and the stage's status:

* ``done`` with the same hash and its output present: the stage is skipped (its record is read back);
* ``running`` with the same hash (an interrupted training run): training resumes from its last save;
* a different hash (the preset or an option changed): the stage is redone, and a half-trained
  checkpoint from the old config is discarded (its run files only), never resumed;
* a checkpoint folder that no manifest of the job names (a user's own folder under ``OUT``) is
  refused, never deleted;
* ``force``: every stage is redone.

Records are written atomically (a crash never leaves half a file), and the manifest is written
after the output, so a stage counts as done only when its output is complete.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import InputError
from harness.io import atomic_write_text
from harness.records import record_json
from harness.training import train

STAGE_SCHEMA = "primebench-stage/1"


def config_hash(config: dict[str, Any]) -> str:
    """16 hex digits of the SHA-256 of the canonical JSON of ``config`` (sorted keys)."""
    text = json.dumps(config, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class Stages:
    """The stages of one job under ``out``; ``bar`` is a :func:`harness.logging.progress` display
    whose task ``task`` advances once per stage (run or skipped)."""

    out: Path
    force: bool = False
    bar: Any = None
    task: Any = None
    log: Callable[[str], None] = field(default=lambda message: None)
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        (self.out / "records").mkdir(parents=True, exist_ok=True)
        (self.out / "stages").mkdir(parents=True, exist_ok=True)

    def _manifest_path(self, name: str) -> Path:
        return self.out / "stages" / f"{name}.json"

    def manifest(self, name: str) -> dict[str, Any] | None:
        """The stage's manifest, or None when it has none (or an unreadable one: then it is redone)."""
        path = self._manifest_path(name)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and data.get("schema") == STAGE_SCHEMA else None

    def _write_manifest(self, name: str, config: dict[str, Any], status: str, **extra: Any) -> None:

        data = {
            "schema": STAGE_SCHEMA,
            "stage": name,
            "status": status,
            "hash": config_hash(config),
            "config": config,
            **extra,
        }
        atomic_write_text(self._manifest_path(name), json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")

    def matches(self, name: str, config: dict[str, Any], status: str = "done") -> bool:
        """True when stage ``name`` has ``status`` with this config (and ``force`` is off)."""
        found = self.manifest(name)
        return (
            not self.force
            and found is not None
            and found.get("status") == status
            and found.get("hash") == config_hash(config)
        )

    def _advance(self) -> None:
        if self.bar is not None and self.task is not None:
            self.bar.advance(self.task)

    def record(self, name: str, config: dict[str, Any], make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The record of stage ``name`` (``OUT/records/NAME.json``): read back when the stage is done
        with this config, otherwise computed by ``make()`` and written."""

        path = self.out / "records" / f"{name}.json"
        if path.exists() and self.matches(name, config, "done"):
            try:
                record = json.loads(path.read_text())
            except ValueError:
                record = None  # a damaged record is recomputed
            if record is not None:
                self.skipped.append(name)
                self._advance()
                return record
        began = time.perf_counter()
        record = make()
        atomic_write_text(path, record_json(record) + "\n")
        self._write_manifest(
            name, config, "done", output=str(path.relative_to(self.out)), wall_s=round(time.perf_counter() - began, 3)
        )
        self.ran.append(name)
        self._advance()
        return record

    def train(self, name: str, cfg) -> Path:
        """Train ``cfg`` into ``OUT/NAME`` unless that checkpoint is finished with this config;
        resume an interrupted run of the same config; discard one of another config."""

        ckpt = self.out / name
        config = {"train": cfg.to_dict()}
        if self.matches(name, config, "done") and finished_checkpoint(ckpt, cfg.train.steps):
            self.log(f"{name}: trained checkpoint in {ckpt}, skipped")
            self.skipped.append(name)
            self._advance()
            return ckpt
        resume = self.matches(name, config, "running") and (ckpt / "trainer_state.pt").exists()
        restart = False
        if ckpt.exists() and not resume:  # another config or a forced redo: only a folder this job wrote
            self._check_owned(name, ckpt)
            restart = True  # the run's own files are removed (harness.run_folder.clear_run_folder), nothing else
        if resume:
            self.log(f"{name}: resuming the interrupted run in {ckpt}")
        self._write_manifest(name, config, "running", output=name)
        began = time.perf_counter()
        train(cfg, ckpt, resume=resume, restart=restart, bar=self.bar)
        self._write_manifest(name, config, "done", output=name, wall_s=round(time.perf_counter() - began, 3))
        self.ran.append(name)
        self._advance()
        return ckpt

    def _check_owned(self, name: str, ckpt: Path) -> None:
        """Refuse to redo stage ``name`` over a non-empty folder that no manifest of this job says it
        wrote (a user's own checkpoint or notes under ``--out``): nothing of it is touched."""
        if not ckpt.is_dir() or not any(ckpt.iterdir()):
            if ckpt.exists() and not ckpt.is_dir():
                raise InputError(
                    f"{ckpt} is a file where stage {name!r} writes its checkpoint folder",
                    fix="move the file away or pass another --out",
                )
            return
        found = self.manifest(name)
        if found is None or found.get("output") != name:
            raise InputError(
                f"{ckpt} holds files this job did not write (no stage manifest {self._manifest_path(name)} names it); "
                "nothing in it was touched",
                fix="move the folder away or pass another --out",
            )


def finished_checkpoint(ckpt: Path, steps: int) -> bool:
    """True when ``ckpt`` has weights and a training log whose last line reached ``steps``."""
    log = Path(ckpt) / "train_log.jsonl"
    if not (Path(ckpt) / "model.safetensors").exists() or not log.exists():
        return False
    lines = log.read_text().splitlines()
    try:
        return bool(lines) and json.loads(lines[-1])["step"] >= steps
    except (ValueError, KeyError, TypeError):
        return False


__all__ = ["STAGE_SCHEMA", "Stages", "config_hash", "finished_checkpoint"]
