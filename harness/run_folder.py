"""The checkpoint and resume plumbing of a training run's folder: the lock, what a run writes there,
starting over, recovering an interrupted save, checking and restoring a resume, saving, and stopping
on a signal with a resumable checkpoint.

:func:`harness.training.train` uses them in this order: :func:`run_lock` around the whole run;
:func:`open_run` before the model is built (it returns the step to start from and the trainer state);
:func:`restore_trainer` once the model, EMA and optimizer exist; :func:`prepare_log`; a :class:`Saver`
for every checkpoint; :class:`StopOnSignal` around the steps. The files themselves are written and read
by :mod:`harness.checkpoint`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import torch

from harness import distributed, stopping
from harness.checkpoint import (
    _read_weights,
    load_trainer_state,
    non_finite,
    read_checkpoint_config,
    recover_interrupted_save,
    save_checkpoint,
)
from harness.config import Config
from harness.errors import CheckpointError, ConfigError, Interrupted, NumericalError
from harness.io import PENDING, FolderLock, atomic_write_text
from harness.logging import console

#: what a run writes into its folder (``--restart`` removes these, and nothing else)
RUN_FILES = (
    "model.safetensors",
    "trainer_state.pt",
    "trainer_state.sha256",
    "config.yaml",
    "tokenizer",
    "train_log.jsonl",
    "train_log.stale.jsonl",
    "samples.png",
    PENDING,
)
LOG = "train_log.jsonl"


def run_lock(out: Path, is_main: bool):
    """A context holding the lock on the run folder ``out`` (:class:`harness.io.FolderLock`) while the
    run writes into it, on the main rank (``is_main``); on the other ranks a context that does nothing."""

    return FolderLock(out, what="run folder") if is_main else contextlib.nullcontext()


def clear_run_folder(out: Path) -> None:
    """Remove what a run wrote into ``out`` (for ``--restart``); other files are left alone.

    A symbolic link in their place (a ``tokenizer/`` linked to a shared folder) is removed as a link:
    what it points at is never followed into, and stays as it was."""

    for name in RUN_FILES:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def open_run(
    cfg: Config, out: Path, *, resume: bool, restart: bool, is_main: bool
) -> tuple[int, dict[str, Any] | None]:
    """Get the folder ``out`` ready for a run of ``cfg``; every rank calls it, ``is_main`` on the one that
    writes. Returns ``(start_step, trainer_state)``: ``(0, None)`` for a new run, the saved step and
    :func:`harness.checkpoint.load_trainer_state` for a ``resume``.

    ``restart`` first clears what a run wrote (:func:`clear_run_folder`); otherwise a save an interrupted
    run left half done is completed or discarded. Raises :class:`harness.errors.CheckpointError` for a new
    run in a folder that holds a checkpoint, or a resume without a checkpoint or its trainer state, and
    :class:`harness.errors.ConfigError` for a resume whose model, data or seed differ from the saved
    config, or whose ``train.steps`` is below the saved step."""
    if restart and is_main:
        clear_run_folder(out)
    elif is_main and (note := recover_interrupted_save(out)):
        console().print(f"[yellow]note:[/] {note}")
    distributed.barrier()
    if out.exists() and (out / "model.safetensors").exists() and not resume:
        raise CheckpointError(
            f"output folder {str(out)!r} already holds a checkpoint",
            fix="pass --resume to continue it, --restart to discard it and start over, or choose another --out",
        )
    start_step, state = 0, None
    if resume:
        if not (out / "model.safetensors").exists():
            raise CheckpointError(
                f"--resume: {str(out)!r} holds no checkpoint to resume", fix="drop --resume to start a new run"
            )
        saved_cfg, _ = read_checkpoint_config(out)
        if saved_cfg.model != cfg.model or saved_cfg.data != cfg.data or saved_cfg.seed != cfg.seed:
            raise ConfigError(
                f"--resume: the config differs from the one saved in {str(out)!r} (model, data or seed)",
                fix="resume with the same config; only train.* keys such as train.steps may change",
            )
        state = load_trainer_state(out)
        if state is None:
            raise CheckpointError(
                f"--resume: {str(out)!r} has no trainer_state.pt, so it cannot be resumed exactly",
                fix="pass --restart to start the run over in this folder (its checkpoint is discarded)",
            )
        start_step = int(state["step"])
        if cfg.train.steps < start_step:
            raise ConfigError(
                f"--resume: train.steps={cfg.train.steps} is below the step the checkpoint in {str(out)!r} "
                f"has reached ({start_step})",
                fix=f"resume with train.steps >= {start_step}, or --restart to train from scratch",
            )
    return start_step, state


def restore_trainer(out: Path, state: dict[str, Any], *, model: torch.nn.Module, ema, opt) -> None:
    """Load what the checkpoint in ``out`` saved into ``model`` (weights), ``ema`` (a
    :class:`harness.training.EMA`: its shadow) and ``opt`` (the optimizer state), and set the torch RNG
    state when it was saved, so the run continues as the uninterrupted one would. ``state``: the trainer
    state :func:`open_run` returned. Raises :class:`harness.errors.CheckpointError` when the weights and
    the trainer state are of different steps."""

    start_step = int(state["step"])
    tensors, meta = _read_weights(out)
    if int(meta.get("step", -1)) != start_step:
        raise CheckpointError(
            f"checkpoint {str(out)!r} is inconsistent: weights at step {meta.get('step')} but trainer state "
            f"at step {start_step}",
            fix="restore model.safetensors and trainer_state.pt from a copy of one save, or pass --restart "
            "to start the run over in this folder (its checkpoint is discarded)",
        )
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    ema.shadow = {k[4:]: v.float().clone() for k, v in tensors.items() if k.startswith("ema.")}
    opt.load_state_dict(state["optimizer"])
    if "torch_rng" in state:
        torch.set_rng_state(state["torch_rng"])


def prepare_log(out: Path, start_step: int) -> None:
    """Make ``train_log.jsonl`` hold exactly the steps up to ``start_step``.

    A resume drops the lines an interrupted run wrote after its last checkpoint (they are about to be
    run again); a new run in a folder an aborted run left without a checkpoint moves that log aside
    to ``train_log.stale.jsonl`` instead of appending to it."""

    log = out / LOG
    if not log.exists():
        return
    if start_step == 0:
        os.replace(log, out / "train_log.stale.jsonl")
        return
    kept = []
    for line in log.read_text().splitlines():
        try:
            if int(json.loads(line)["step"]) <= start_step:
                kept.append(line)
        except (ValueError, KeyError, TypeError):
            continue  # a torn last line
    atomic_write_text(log, "".join(f"{line}\n" for line in kept))


class Saver:
    """Saves the run's checkpoints into ``out`` (``saver(step)``) and remembers the last step saved.

    ``last_saved``: the step of the checkpoint already in ``out`` (a resume), or None. Every rank calls
    it; only the main one (``is_main``) writes, and the ranks meet at a barrier after each save."""

    def __init__(self, out: Path, *, cfg: Config, model, ema, opt, tokenizer, is_main: bool, last_saved: int | None):
        self.out, self.cfg, self.model, self.ema, self.opt = out, cfg, model, ema, opt
        self.tokenizer, self.is_main, self.last_saved = tokenizer, is_main, last_saved

    def where_finite(self) -> str:
        """Where the last finite weights are, for the message of a diverged run."""
        if self.last_saved is None:
            return f"no checkpoint was saved in {self.out}"
        return f"the last finite checkpoint in {self.out} is at step {self.last_saved}"

    def __call__(self, step: int) -> None:
        """Save the weights, EMA, optimizer and RNG state at ``step``. Raises
        :class:`harness.errors.NumericalError` (saving nothing) when a weight is not finite."""
        model, ema, opt, cfg = self.model, self.ema, self.opt, self.cfg
        if non_finite(model.state_dict(), ema.shadow):
            raise NumericalError(
                f"training diverged: the weights are not finite at step {step}, so they were not saved; "
                f"{self.where_finite()}",
                fix="lower train.lr or raise train.warmup (and --restart, or --resume from the finite checkpoint)",
            )
        if self.is_main:
            save_checkpoint(
                self.out,
                model=model,
                ema_state=ema.shadow,
                cfg=cfg,
                tokenizer=self.tokenizer,
                step=step,
                trainer_state={
                    "optimizer": opt.state_dict(),
                    "torch_rng": torch.get_rng_state(),
                    "tokens_seen": step * cfg.train.batch_size * cfg.data.seq_len,
                },
            )
        self.last_saved = step
        distributed.barrier()


class StopOnSignal:
    """A training loop's view of :mod:`harness.stopping`: inside it the first SIGINT/SIGTERM is a
    request to stop after the current step, except in the parts of a step wrapped in
    :meth:`abortable` (the forward and backward pass, the validation), where it stops at once.

    The loop checks :meth:`requested` after each step, saves a checkpoint and raises
    :meth:`interrupted`; a second signal stops at once. Handlers are installed only in the main thread
    and restored on exit."""

    def __init__(self):
        self._remote: int | None = None
        self._stack: contextlib.ExitStack | None = None

    @property
    def signum(self) -> int | None:
        return stopping.requested() or self._remote

    def __enter__(self) -> StopOnSignal:
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(stopping.handling())
        self._stack.enter_context(stopping.deferred())
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def abortable(self, world: int):
        """A part of a step that a signal may cut (one process only: ranks must stop after the same
        step, so a distributed run only ever stops between steps)."""
        return stopping.abortable() if world == 1 else contextlib.nullcontext()

    def requested(self, world: int) -> bool:
        """Whether any of the ``world`` ranks got a stop signal (every rank then stops after the same step;
        a collective, so every rank calls it after every step)."""
        flag = torch.tensor([0.0 if self.signum is None else float(self.signum)], dtype=torch.float64)
        if world > 1:
            flag = distributed.all_reduce_sum(flag)
            if self.signum is None and float(flag) > 0:
                self._remote = signal.SIGTERM
        return float(flag) > 0

    def interrupted(self, done: int, steps: int, out: Path, *, saved: bool = True) -> Interrupted:
        """The error to raise once the run stopped at step ``done`` of ``steps`` with a resumable
        checkpoint in ``out`` (exit code 128 + the signal's number); ``saved=False``: it stopped in its
        first step, before anything was saved, so there is nothing to resume."""
        name = signal.Signals(self.signum or signal.SIGINT).name
        if not saved:
            return Interrupted(
                f"{name} received: stopped in step {done + 1} of {steps}, before any checkpoint was saved",
                fix="run the same command again (it starts afresh)",
                exit_code=128 + int(self.signum or signal.SIGINT),
            )
        return Interrupted(
            f"{name} received: stopped at step {done} of {steps}; a resumable checkpoint is in {out}",
            fix=f"continue it with the same command and --resume (primebench train ... --out {out} --resume)",
            exit_code=128 + int(self.signum or signal.SIGINT),
        )
