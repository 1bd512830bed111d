"""Training loop: AdamW, linear warmup then a constant or cosine learning rate, gradient clipping, EMA,
gradient accumulation, bf16 autocast on CUDA, DDP, exact resume.

Determinism: the rows of the global batch at step s and every random draw of the loss (diffusion
times, masks) come from generators seeded by ``(seed, step)``, so a run resumed from a checkpoint at
step s continues exactly as the uninterrupted run would (on the same hardware and thread count), and
the global batch is the same whatever the number of DDP ranks.

The run folder's checkpoint and resume plumbing (lock, restart, resume checks, saving, stopping on a
signal) is :mod:`harness.run_folder`; the training rows (packed text or images) are
:mod:`harness.training_data`. The names this module exported before the split (``RUN_FILES``, ``LOG``,
:func:`clear_run_folder`, :class:`ImageRows`, :func:`resolve_image_config`, :func:`load_text_data`,
:func:`load_training_data`) are importable from here as well.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from harness import distributed, stopping
from harness.checkpoint import load_checkpoint
from harness.config import Config
from harness.data import get_corpus, get_tokenizer, load_tokenizer
from harness.data.images import get_image_dataset, is_image_spec, parse_image_spec
from harness.errors import ConfigError, NumericalError
from harness.health import Health
from harness.images import write_sample_grid
from harness.logging import console, progress
from harness.models import model_from_config
from harness.resources import check_fits, estimate_for_config
from harness.run_folder import (
    LOG,
    RUN_FILES,
    Saver,
    StopOnSignal,
    clear_run_folder,
    open_run,
    prepare_log,
    restore_trainer,
    run_lock,
)
from harness.stopping import Stop
from harness.training_data import ImageRows, load_text_data, load_training_data, resolve_image_config


@dataclass(frozen=True)
class TrainResult:
    """What :func:`train` returns: the run folder, the step it reached, the last step's training loss,
    the EMA weights' validation loss (None when the run stopped before any evaluation), tokens seen in
    all and wall-clock seconds of this call's steps."""

    out: Path
    step: int
    train_loss: float
    val_loss: float | None
    tokens_seen: int
    wall_s: float
    #: the unigram reference of the validation loss's tokens (:mod:`harness.health`)
    unigram_ref: float | None = None


def step_seed(seed: int, step: int, stream: int) -> int:
    """A distinct 63-bit seed per (run seed, step, stream) so draws do not depend on history."""
    return (seed * 1_000_003 + step * 7_919 + stream * 104_729) % (2**63 - 1)


#: the floor of the cosine schedule, as a fraction of ``train.lr``
COSINE_FLOOR = 0.1


def lr_at(cfg: Config, step: int) -> float:
    """Linear warmup over ``train.warmup`` steps, then ``train.lr_schedule``: ``constant`` (MDLM's)
    or ``cosine``, a half cosine from ``train.lr`` down to :data:`COSINE_FLOOR` x ``train.lr`` at
    the last step."""
    t = cfg.train
    if t.warmup > 0 and step + 1 < t.warmup:
        return t.lr * (step + 1) / t.warmup
    if t.lr_schedule == "cosine":
        span = max(1, t.steps - max(t.warmup, 1))
        frac = min(1.0, max(0.0, (step + 1 - max(t.warmup, 1)) / span))
        return t.lr * (COSINE_FLOOR + (1 - COSINE_FLOOR) * 0.5 * (1 + math.cos(math.pi * frac)))
    return t.lr


def make_optimizer(model: torch.nn.Module, *, lr: float, weight_decay: float, betas=(0.9, 0.999)):
    """AdamW over the model's parameters with the multi-tensor (foreach) kernels, on CPU as on CUDA
    (the same arithmetic as the per-parameter loop, in fewer, larger operations)."""
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=betas, weight_decay=weight_decay, foreach=True)


class EMA:
    """Exponential moving average of the parameters, kept in float32 (one multi-tensor update per step)."""

    def __init__(self, model: torch.nn.Module, decay: float):
        self.decay = decay
        self.shadow = {k: v.detach().clone().float() for k, v in model.state_dict().items()}

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        state = model.state_dict(keep_vars=True)
        floats = [k for k, v in state.items() if v.dtype.is_floating_point]
        live = [state[k].detach() for k in floats]
        live = [v if v.dtype == torch.float32 else v.float() for v in live]
        shadow = [self.shadow[k] for k in floats]
        torch._foreach_mul_(shadow, self.decay)
        torch._foreach_add_(shadow, live, alpha=1 - self.decay)
        for k, v in state.items():
            if not v.dtype.is_floating_point:
                self.shadow[k].copy_(v)

    @contextlib.contextmanager
    def swapped_in(self, model: torch.nn.Module):
        """The EMA weights in ``model`` for the block; its own weights are back after it, however it
        ends (a signal cannot cut a swap: see :meth:`restore`)."""
        self._backup = {k: v.detach().clone() for k, v in model.state_dict().items()}
        try:
            with stopping.critical():
                model.load_state_dict({k: v.to(self._backup[k].dtype) for k, v in self.shadow.items()})
            yield model
        finally:
            self.restore(model)

    def restore(self, model: torch.nn.Module) -> None:
        """Put the model's own weights back after :meth:`swapped_in` (idempotent: a stop that cut the
        block's exit calls it again before saving)."""
        backup = getattr(self, "_backup", None)
        if backup is not None:
            with stopping.critical():
                model.load_state_dict(backup)
                self._backup = None


@torch.no_grad()
def validation_loss(model, rows: torch.Tensor, mask: torch.Tensor, cfg: Config, device) -> float:
    """Mean training objective on a fixed slice of the validation rows with fixed randomness."""
    model.eval()
    n = min(rows.shape[0], cfg.train.eval_batches * cfg.train.batch_size)
    total, count = 0.0, 0
    g = torch.Generator(device="cpu").manual_seed(step_seed(cfg.seed, 0, 99))
    for start in range(0, n, cfg.train.batch_size):
        x = rows[start : start + cfg.train.batch_size].to(device)
        m = mask[start : start + cfg.train.batch_size].to(device)
        loss = model.loss(x, generator=g, attention_mask=m)
        total += float(loss) * x.shape[0]
        count += x.shape[0]
    model.train()
    return total / max(count, 1)


def train(
    cfg: Config,
    out: Path,
    *,
    resume: bool = False,
    restart: bool = False,
    stop_after: int | None = None,
    device: str | None = None,
    quiet: bool = False,
    bar=None,
) -> TrainResult:
    """Train ``cfg`` into the checkpoint folder ``out`` (see :mod:`harness.checkpoint`) and return a
    :class:`TrainResult`.

    ``resume``: continue the run saved in ``out``; ``restart``: discard what a run left in ``out`` and
    start over (the two exclude each other). ``stop_after``: stop, with a checkpoint, after this many
    steps of this call. ``device``: ``"cpu"`` or ``"cuda"`` (None: CUDA when available); on CUDA
    each rank trains on the GPU of its local rank. ``quiet``: no progress display. ``bar``: an
    existing :func:`harness.logging.progress` display to add this run's task to (so a multi-stage job
    shows one display); by default the run opens its own.

    The folder is locked while the run writes into it (:mod:`harness.run_folder`). A checkpoint is saved
    every ``train.save_every`` steps and at the last step of the call. SIGINT/SIGTERM save a resumable checkpoint at
    the current step and raise :class:`harness.errors.Interrupted`; a loss or weights that are not finite
    raise :class:`harness.errors.NumericalError`.
    """
    out = Path(out)
    if resume and restart:
        raise ConfigError("--resume and --restart exclude each other", fix="pass one of them")
    info = distributed.setup(device)
    with run_lock(out, info.is_main):
        return _train(cfg, out, info=info, resume=resume, restart=restart, stop_after=stop_after, quiet=quiet, bar=bar)


def _to_device(batch: torch.Tensor, device) -> torch.Tensor:
    """A CPU batch on ``device``: on CUDA through page-locked memory, copied without blocking the host
    (the next kernels wait for it on the stream); on a CPU, as it is."""
    if torch.device(device).type == "cuda":
        return batch.pin_memory().to(device, non_blocking=True)
    return batch.to(device)


def _forward_backward(model, ddp, opt, save, cfg, info, rows, masks, step, per_rank, micro, autocast) -> float:
    """One step's forward and backward passes over its micro-batches (gradients accumulated, nothing
    applied): the part of a step a signal may cut. Returns the step's loss."""
    for group in opt.param_groups:
        group["lr"] = lr_at(cfg, step)
    g_batch = torch.Generator().manual_seed(step_seed(cfg.seed, step, 0))
    idx = torch.randint(rows.shape[0], (cfg.train.batch_size,), generator=g_batch)
    idx = idx[info.rank * per_rank : (info.rank + 1) * per_rank]
    g_noise = torch.Generator(device=info.device).manual_seed(step_seed(cfg.seed, step, 1 + info.rank))
    opt.zero_grad(set_to_none=True)
    model.begin_train_step(step, cfg.train.steps)
    step_loss = 0.0
    for k in range(cfg.train.grad_accum):
        sel = idx[k * micro : (k + 1) * micro]
        x, m = _to_device(rows[sel], info.device), _to_device(masks[sel], info.device)
        sync = contextlib.nullcontext() if (k == cfg.train.grad_accum - 1 or info.world == 1) else ddp.no_sync()
        with sync, autocast:
            loss = ddp(x, generator=g_noise, attention_mask=m) / cfg.train.grad_accum
        if not torch.isfinite(loss):
            where = save.where_finite()
            raise NumericalError(
                f"training diverged: the loss is {float(loss.detach())} at step {step + 1}; {where}",
                fix="lower train.lr or raise train.warmup (and --restart, or --resume from the finite checkpoint)",
            )
        loss.backward()
        step_loss += float(loss.detach())
    return step_loss


def init_weights(model: torch.nn.Module, cfg: Config, device) -> None:
    """Copy the EMA weights of the checkpoint ``cfg.train.init_from`` into ``model`` (strictly): the same
    family, network shape and tokenizer, else a ConfigError that names the difference."""

    source = cfg.train.init_from
    if not Path(source).expanduser().is_dir():
        raise ConfigError(
            f"train.init_from={source!r} is not a checkpoint folder", fix="pass the folder a training run wrote"
        )
    src, _, src_cfg = load_checkpoint(Path(source).expanduser(), ema=True, device=str(device))
    if src.family != model.family:
        raise ConfigError(
            f"train.init_from={source!r} holds a {src.family} model; this run trains {model.family}",
            fix="start from a checkpoint of the same family",
        )
    if src_cfg.data.tokenizer != cfg.data.tokenizer:
        raise ConfigError(
            f"train.init_from={source!r} was trained with tokenizer {src_cfg.data.tokenizer!r}, "
            f"this run uses {cfg.data.tokenizer!r}",
            fix="use the checkpoint's tokenizer (data.tokenizer)",
        )
    theirs, ours = src.state_dict(), model.state_dict()
    diff = sorted(set(theirs) ^ set(ours)) or [k for k in ours if theirs[k].shape != ours[k].shape]
    if diff:
        raise ConfigError(
            f"train.init_from={source!r} has another network shape (first difference: {diff[0]!r})",
            fix="match its model.* sizes (d_model, n_layers, n_heads, ...)",
        )
    model.load_state_dict(theirs)


@dataclass
class _Run:
    """Everything a training run holds between its steps (built by :func:`_setup`)."""

    cfg: Config
    out: Path
    info: Any
    tokenizer: Any
    train_data: Any
    valid_data: Any
    model: torch.nn.Module
    ddp: torch.nn.Module
    health: Any
    ema: EMA
    opt: torch.optim.Optimizer
    save: Any
    start_step: int
    per_rank: int
    micro: int
    autocast: Any


def _tokenizer(cfg: Config, out: Path, resume: bool, corpus):

    if resume and (out / "tokenizer").is_dir():
        return load_tokenizer(out / "tokenizer")
    return get_tokenizer(cfg.data.tokenizer, corpus=corpus)


def _split(cfg: Config, info) -> tuple[int, int]:
    """(rows per rank, rows per micro-batch) of a step."""
    per_rank = cfg.train.batch_size // info.world
    if per_rank * info.world != cfg.train.batch_size or per_rank % cfg.train.grad_accum:
        raise ConfigError(
            f"train.batch_size={cfg.train.batch_size} must split evenly over {info.world} ranks and "
            f"train.grad_accum={cfg.train.grad_accum} micro-batches",
            fix="choose a batch size divisible by world_size * grad_accum",
        )
    return per_rank, per_rank // cfg.train.grad_accum


def _setup(cfg: Config, out: Path, info, *, resume: bool, restart: bool) -> _Run:
    """Open the run folder, check the step fits in memory, load the data, build (or restore) the model,
    its EMA and optimiser, in the order that fixes every random draw for a seed."""

    start_step, state = open_run(cfg, out, resume=resume, restart=restart, is_main=info.is_main)
    torch.manual_seed(cfg.seed)
    corpus = None if is_image_spec(cfg.data.corpus) else get_corpus(cfg.data.corpus)
    tokenizer = _tokenizer(cfg, out, resume, corpus)
    check_fits(
        estimate_for_config(cfg, tokenizer.vocab_size, world=info.world, device=str(info.device)),
        what=f"a training step of {cfg.name}",
        sized_by="train.batch_size (or raise train.grad_accum), data.seq_len, model.d_model or model.n_layers",
        device=str(info.device),
    )
    train_data, valid_data = load_training_data(cfg, tokenizer, corpus)
    model = model_from_config(cfg.model, vocab_size=tokenizer.vocab_size, seq_len=cfg.data.seq_len).to(info.device)
    n_rows = cfg.train.eval_batches * cfg.train.batch_size
    health = Health.build(
        model, train_data, valid_data, n_rows=n_rows, steps=cfg.train.steps, seed=step_seed(cfg.seed, 0, 98)
    )
    if cfg.train.init_from and state is None:
        init_weights(model, cfg, info.device)
    ema = EMA(model, cfg.train.ema)
    betas = (cfg.train.beta1, cfg.train.beta2)
    opt = make_optimizer(model, lr=cfg.train.lr, betas=betas, weight_decay=cfg.train.weight_decay)
    if state is not None:
        restore_trainer(out, state, model=model, ema=ema, opt=opt)
    ddp = DistributedDataParallel(model) if info.world > 1 else model
    per_rank, micro = _split(cfg, info)
    bf16 = cfg.train.precision == "bf16" and info.device.type == "cuda"
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    if info.is_main:
        out.mkdir(parents=True, exist_ok=True)
        prepare_log(out, start_step)
    last_saved = start_step if resume else None
    save = Saver(
        out, cfg=cfg, model=model, ema=ema, opt=opt, tokenizer=tokenizer, is_main=info.is_main, last_saved=last_saved
    )
    return _Run(
        cfg,
        out,
        info,
        tokenizer,
        train_data,
        valid_data,
        model,
        ddp,
        health,
        ema,
        opt,
        save,
        start_step,
        per_rank,
        micro,
        autocast,
    )


def _validate(run: _Run, stop, record: dict, done: int) -> tuple[float | None, bool]:
    """The EMA weights' validation loss and health measures into ``record`` after step ``done``:
    ``(val loss or None, cut)``; a signal here skips the validation (``cut``), the step stays applied."""
    cfg, model, info = run.cfg, run.model, run.info
    try:
        with stop.abortable(info.world), run.ema.swapped_in(model):
            val_loss = validation_loss(model, run.valid_data.input_ids, run.valid_data.attention_mask, cfg, info.device)
            model.eval()
            record.update(
                val_loss_ema=val_loss, **run.health.measure(model, step=done, val_loss=val_loss, device=info.device)
            )
            model.train()
    except Stop:
        run.ema.restore(model)
        model.train()
        return None, True
    if "warning" in record and info.is_main:
        console().print(f"[yellow]warning:[/] {cfg.name}: {record['warning']}")
    return val_loss, False


def _step(run: _Run, stop, step: int) -> float:
    """Step ``step``: forward and backward (a signal stops it before anything is applied; the last
    finished step is saved), then the optimiser and the EMA. Returns the loss averaged over ranks."""
    cfg, info, save = run.cfg, run.info, run.save
    rows, masks = run.train_data.input_ids, run.train_data.attention_mask
    try:
        with stop.abortable(info.world):  # nothing is applied before opt.step: a signal stops here at once
            step_loss = _forward_backward(
                run.model, run.ddp, run.opt, save, cfg, info, rows, masks, step, run.per_rank, run.micro, run.autocast
            )
    except Stop:  # the model is as the previous step left it: save that step unless nothing ran yet
        if step == 0 and not (run.out / "model.safetensors").exists():
            raise stop.interrupted(step, cfg.train.steps, run.out, saved=False) from None
        if save.last_saved != step:
            save(step)
        raise stop.interrupted(step, cfg.train.steps, run.out) from None
    if cfg.train.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(run.model.parameters(), cfg.train.grad_clip, foreach=True)
    run.opt.step()
    run.ema.update(run.model)
    return float(distributed.all_reduce_sum(torch.tensor([step_loss], dtype=torch.float64)) / info.world)


def _loop(run: _Run, end: int, bar, stop) -> tuple[float, float | None]:
    """Steps ``run.start_step .. end - 1`` with validation, the log, progress and saves: ``(last loss,
    last validation loss)``. A signal saves the last finished step and raises ``Interrupted``."""
    cfg, info, out = run.cfg, run.info, run.out
    last_loss, val_loss = float("nan"), None
    t0, tokens_per_step = time.time(), cfg.train.batch_size * cfg.data.seq_len
    task = bar.add_task(
        f"train {cfg.name}", total=cfg.train.steps, completed=run.start_step, loss=float("nan"), tps=0.0
    )
    cut = False
    for step in range(run.start_step, end):
        cut = False
        last_loss = _step(run, stop, step)
        done = step + 1
        record = {"step": done, "loss": last_loss, "lr": lr_at(cfg, step)}
        if done % cfg.train.eval_every == 0 or done == cfg.train.steps:
            measured, cut = _validate(run, stop, record, done)
            val_loss = measured if not cut else val_loss
        tps = (done - run.start_step) * tokens_per_step / max(time.time() - t0, 1e-9)
        bar.update(task, completed=done, loss=last_loss, tps=tps)
        if info.is_main:
            with open(out / LOG, "a") as fh:
                fh.write(json.dumps(record) + "\n")
        if done % cfg.train.save_every == 0 or done == end:
            run.save(done)
        if (cut or stop.requested(info.world)) and done < end:
            if run.save.last_saved != done:
                run.save(done)
            raise stop.interrupted(done, cfg.train.steps, out)
    if end > run.start_step and (cut or stop.requested(info.world)):  # a signal during the last step: the run is
        raise stop.interrupted(end, cfg.train.steps, out)  # saved; the caller (a reproduce job) stops too
    return last_loss, val_loss


def _finish(run: _Run, end: int, val_loss: float | None) -> float | None:
    """After the loop: the first checkpoint of an empty call, the final validation loss of a finished
    run that has none yet, and an image model's sample grid. Returns the validation loss."""

    cfg, info, model, out = run.cfg, run.info, run.model, run.out
    if end == run.start_step and info.is_main and not (out / "model.safetensors").exists():
        run.save(end)
    if val_loss is None and end == cfg.train.steps:
        with run.ema.swapped_in(model):
            val_loss = validation_loss(model, run.valid_data.input_ids, run.valid_data.attention_mask, cfg, info.device)
    if is_image_spec(cfg.data.corpus) and info.is_main and end == cfg.train.steps and cfg.train.sample_grid > 0:
        with run.ema.swapped_in(model):
            layout = get_image_dataset(parse_image_spec(cfg.data.corpus).with_split(cfg.data.train_split))
            write_sample_grid(model, layout, out / "samples.png", num_samples=cfg.train.sample_grid, seed=cfg.seed)
    return val_loss


def _train(
    cfg: Config, out: Path, *, info, resume: bool, restart: bool, stop_after: int | None, quiet: bool, bar
) -> TrainResult:
    cfg = resolve_image_config(cfg)
    run = _setup(cfg, out, info, resume=resume, restart=restart)
    end = cfg.train.steps if stop_after is None else min(cfg.train.steps, run.start_step + stop_after)
    t0 = time.time()
    run.model.train()
    stop = StopOnSignal()
    with stop, contextlib.nullcontext(bar) if bar is not None else progress(disable=quiet or not info.is_main) as bar:
        last_loss, val_loss = _loop(run, end, bar, stop)
    wall = time.time() - t0
    val_loss = _finish(run, end, val_loss)
    return TrainResult(
        out=out,
        step=end,
        train_loss=last_loss,
        val_loss=val_loss,
        tokens_seen=end * cfg.train.batch_size * cfg.data.seq_len,
        wall_s=wall,
        unigram_ref=run.health.unigram_ref,
    )


__all__ = [
    "COSINE_FLOOR",
    "EMA",
    "LOG",
    "RUN_FILES",
    "ImageRows",
    "TrainResult",
    "clear_run_folder",
    "load_text_data",
    "load_training_data",
    "lr_at",
    "make_optimizer",
    "resolve_image_config",
    "step_seed",
    "train",
    "validation_loss",
]
