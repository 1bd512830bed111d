"""Training loop: AdamW, linear warmup, gradient clipping, EMA, accumulation, DDP, exact resume.

Determinism: the rows of the global batch at step s and every random draw of the loss (diffusion
times, masks) come from generators seeded by ``(seed, step)``, so a run resumed from a checkpoint at
step s continues exactly as the uninterrupted run would (on the same hardware and thread count), and
the global batch is the same whatever the number of DDP ranks.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel

from harness import distributed
from harness.checkpoint import (
    load_trainer_state,
    non_finite,
    read_checkpoint_config,
    recover_interrupted_save,
    save_checkpoint,
)
from harness.config import Config
from harness.errors import CheckpointError, ConfigError, Interrupted, NumericalError
from harness.health import Health
from harness.io import PENDING
from harness.logging import console, progress


@dataclass(frozen=True)
class TrainResult:
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


@dataclass(frozen=True)
class ImageRows:
    """One image per row: ``input_ids`` (N, H*W*ch) pixel levels, ``attention_mask`` all ones."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor


def resolve_image_config(cfg: Config) -> Config:
    """Fill in what an ``image:`` corpus determines and check what it constrains (text: unchanged).

    Sets ``data.tokenizer`` ``pixels`` -> ``pixels:LEVELS`` and ``model.image_shape`` ``HxWxC``;
    requires ``seq_len == H*W*ch``, splits the dataset has, and ``model.start_token`` for the ARM
    (without it the first pixel would go unscored and bits/dim would not cover every dimension).
    """
    from dataclasses import replace

    from harness.data.images import IMAGE_SPLITS, get_image_dataset, is_image_spec, parse_image_spec
    from harness.models import family_class

    if not is_image_spec(cfg.data.corpus):
        return cfg
    d, m = cfg.data, cfg.model
    for key in ("train_split", "valid_split"):
        if getattr(d, key) not in IMAGE_SPLITS:
            raise ConfigError(
                f"data.{key}={getattr(d, key)!r}: image datasets have the splits {', '.join(IMAGE_SPLITS)}",
                fix=f"set data.{key} to one of them (train for training, test for validation)",
            )
    ds = get_image_dataset(parse_image_spec(cfg.data.corpus).with_split(d.train_split))
    if d.seq_len != ds.seq_len:
        raise ConfigError(
            f"data.seq_len={d.seq_len} but {cfg.data.corpus} images are {ds.height}x{ds.width}x{ds.channels} "
            f"= {ds.seq_len} tokens (one image per row)",
            fix=f"set data.seq_len={ds.seq_len}",
        )
    kind, _, levels = d.tokenizer.partition(":")
    if kind != "pixels" or (levels and levels != str(ds.levels)):
        raise ConfigError(
            f"data.tokenizer={d.tokenizer!r} does not fit {cfg.data.corpus} ({ds.levels} levels)",
            fix="set data.tokenizer=pixels (the levels come from the dataset)",
        )
    shape = f"{ds.height}x{ds.width}x{ds.channels}"
    if m.image_shape and m.image_shape != shape:
        raise ConfigError(
            f"model.image_shape={m.image_shape!r} but {cfg.data.corpus} images are {shape}",
            fix="leave model.image_shape empty: training fills it in",
        )
    family_class(m.family).check_image_config(m)
    return replace(cfg, data=replace(d, tokenizer=f"pixels:{ds.levels}"), model=replace(m, image_shape=shape))


def load_text_data(cfg: Config, tokenizer, corpus):
    """Pack the train and validation splits of the configured corpus. Returns (train, valid) Packed."""
    from harness.data import get_packed

    d = cfg.data
    kw = dict(
        tokenizer=tokenizer, seq_len=d.seq_len, wrap=d.wrap, eos_between_docs=d.eos_between_docs, remainder=d.remainder
    )
    return get_packed(corpus, d.train_split, **kw), get_packed(corpus, d.valid_split, **kw)


def load_training_data(cfg: Config, tokenizer, corpus=None):
    """(train, valid) rows with ``.input_ids``/``.attention_mask``: packed text, or one image per row.

    For ``image:`` corpora ``data.train_split``/``data.valid_split`` are the dataset's own splits
    (``train``/``test``); ``cfg`` must have been through :func:`resolve_image_config`.
    """
    from harness.data.images import get_image_dataset, is_image_spec, parse_image_spec

    if not is_image_spec(cfg.data.corpus):
        return load_text_data(cfg, tokenizer, corpus)
    image = parse_image_spec(cfg.data.corpus)

    def rows(split: str) -> ImageRows:
        ds = get_image_dataset(image.with_split(split))
        if ds.levels != tokenizer.vocab_size:
            raise ConfigError(
                f"{ds.spec} has {ds.levels} levels but the tokenizer {tokenizer.spec!r} has {tokenizer.vocab_size}"
            )
        return ImageRows(ds.tokens, torch.ones_like(ds.tokens))

    return rows(cfg.data.train_split), rows(cfg.data.valid_split)


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
        backup = {k: v.detach().clone() for k, v in model.state_dict().items()}
        model.load_state_dict({k: v.to(backup[k].dtype) for k, v in self.shadow.items()})
        try:
            yield model
        finally:
            model.load_state_dict(backup)


def _stop_requested(stop: _StopOnSignal, world: int) -> bool:
    """Whether any rank got a stop signal (every rank then stops after the same step)."""
    flag = torch.tensor([0.0 if stop.signum is None else float(stop.signum)], dtype=torch.float64)
    if world > 1:
        flag = distributed.all_reduce_sum(flag)
        if stop.signum is None and float(flag) > 0:
            stop.signum = signal.SIGTERM
    return float(flag) > 0


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


#: what a run writes into its folder (``--restart`` removes these, and nothing else)
RUN_FILES = (
    "model.safetensors",
    "trainer_state.pt",
    "config.yaml",
    "tokenizer",
    "train_log.jsonl",
    "train_log.stale.jsonl",
    "samples.png",
    PENDING,
)
LOG = "train_log.jsonl"


def clear_run_folder(out: Path) -> None:
    """Remove what a run wrote into ``out`` (for ``--restart``); other files are left alone.

    A symbolic link in their place (a ``tokenizer/`` linked to a shared folder) is removed as a link:
    what it points at is never followed into, and stays as it was."""
    import shutil

    for name in RUN_FILES:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def _prepare_log(out: Path, start_step: int) -> None:
    """Make ``train_log.jsonl`` hold exactly the steps up to ``start_step``.

    A resume drops the lines an interrupted run wrote after its last checkpoint (they are about to be
    run again); a new run in a folder an aborted run left without a checkpoint moves that log aside
    to ``train_log.stale.jsonl`` instead of appending to it."""
    from harness.io import atomic_write_text

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


class _StopOnSignal:
    """Turn the first SIGINT/SIGTERM into a request to stop after the current step.

    The loop checks :attr:`signum` after each step, saves a checkpoint and stops; a second signal
    aborts at once. Handlers are installed only in the main thread and restored on exit."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.signum: int | None = None
        self._previous: dict = {}

    def _handle(self, signum, frame):
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum

    def __enter__(self) -> _StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


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
    """Train ``cfg`` into the checkpoint folder ``out`` (see :mod:`harness.checkpoint`).

    ``resume``: continue the run saved in ``out``; ``restart``: discard what a run left in ``out`` and
    start over. The folder is locked while the run writes into it. SIGINT/SIGTERM save a resumable
    checkpoint at the current step and raise :class:`harness.errors.Interrupted`.
    ``bar``: an existing :func:`harness.logging.progress` display to add this run's task to (so a
    multi-stage job shows one display); by default the run opens its own.
    """
    from harness.io import FolderLock

    out = Path(out)
    if resume and restart:
        raise ConfigError("--resume and --restart exclude each other", fix="pass one of them")
    info = distributed.setup(device)
    lock = FolderLock(out, what="run folder") if info.is_main else contextlib.nullcontext()
    with lock:
        return _train(cfg, out, info=info, resume=resume, restart=restart, stop_after=stop_after, quiet=quiet, bar=bar)


def _train(
    cfg: Config, out: Path, *, info, resume: bool, restart: bool, stop_after: int | None, quiet: bool, bar
) -> TrainResult:
    from harness.data import get_corpus, get_tokenizer
    from harness.data.images import is_image_spec
    from harness.models import model_from_config

    cfg = resolve_image_config(cfg)
    image = is_image_spec(cfg.data.corpus)
    if restart and info.is_main:
        clear_run_folder(out)
    elif info.is_main and (note := recover_interrupted_save(out)):
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

    torch.manual_seed(cfg.seed)
    corpus = None if image else get_corpus(cfg.data.corpus)
    if resume and (out / "tokenizer").is_dir():
        from harness.data import load_tokenizer

        tokenizer = load_tokenizer(out / "tokenizer")
    else:
        tokenizer = get_tokenizer(cfg.data.tokenizer, corpus=corpus)
    train_data, valid_data = load_training_data(cfg, tokenizer, corpus)
    rows, masks = train_data.input_ids, train_data.attention_mask
    model = model_from_config(cfg.model, vocab_size=tokenizer.vocab_size, seq_len=cfg.data.seq_len).to(info.device)
    health = Health.build(
        model,
        train_data,
        valid_data,
        n_rows=cfg.train.eval_batches * cfg.train.batch_size,
        steps=cfg.train.steps,
        seed=step_seed(cfg.seed, 0, 98),
    )
    ema = EMA(model, cfg.train.ema)
    opt = make_optimizer(
        model, lr=cfg.train.lr, betas=(cfg.train.beta1, cfg.train.beta2), weight_decay=cfg.train.weight_decay
    )
    if state is not None:
        from harness.checkpoint import _read_weights

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
    ddp = DistributedDataParallel(model) if info.world > 1 else model
    per_rank = cfg.train.batch_size // info.world
    if per_rank * info.world != cfg.train.batch_size or per_rank % cfg.train.grad_accum:
        raise ConfigError(
            f"train.batch_size={cfg.train.batch_size} must split evenly over {info.world} ranks and "
            f"train.grad_accum={cfg.train.grad_accum} micro-batches",
            fix="choose a batch size divisible by world_size * grad_accum",
        )
    micro = per_rank // cfg.train.grad_accum
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16)
        if cfg.train.precision == "bf16" and info.device.type == "cuda"
        else contextlib.nullcontext()
    )
    log_path = out / LOG
    if info.is_main:
        out.mkdir(parents=True, exist_ok=True)
        _prepare_log(out, start_step)
    last_saved = start_step if resume else None

    def where_finite() -> str:
        if last_saved is None:
            return f"no checkpoint was saved in {out}"
        return f"the last finite checkpoint in {out} is at step {last_saved}"

    def save(step: int) -> None:
        nonlocal last_saved
        if non_finite(model.state_dict(), ema.shadow):
            raise NumericalError(
                f"training diverged: the weights are not finite at step {step}, so they were not saved; "
                f"{where_finite()}",
                fix="lower train.lr or raise train.warmup (and --restart, or --resume from the finite checkpoint)",
            )
        if info.is_main:
            save_checkpoint(
                out,
                model=model,
                ema_state=ema.shadow,
                cfg=cfg,
                tokenizer=tokenizer,
                step=step,
                trainer_state={
                    "optimizer": opt.state_dict(),
                    "torch_rng": torch.get_rng_state(),
                    "tokens_seen": step * cfg.train.batch_size * cfg.data.seq_len,
                },
            )
        last_saved = step
        distributed.barrier()

    last_loss, val_loss = float("nan"), None
    end = cfg.train.steps if stop_after is None else min(cfg.train.steps, start_step + stop_after)
    t0 = time.time()
    tokens_per_step = cfg.train.batch_size * cfg.data.seq_len
    model.train()
    stop = _StopOnSignal()
    with stop, contextlib.nullcontext(bar) if bar is not None else progress(disable=quiet or not info.is_main) as bar:
        task = bar.add_task(
            f"train {cfg.name}", total=cfg.train.steps, completed=start_step, loss=float("nan"), tps=0.0
        )
        for step in range(start_step, end):
            for group in opt.param_groups:
                group["lr"] = lr_at(cfg, step)
            g_batch = torch.Generator().manual_seed(step_seed(cfg.seed, step, 0))
            idx = torch.randint(rows.shape[0], (cfg.train.batch_size,), generator=g_batch)
            idx = idx[info.rank * per_rank : (info.rank + 1) * per_rank]
            g_noise = torch.Generator(device=info.device).manual_seed(step_seed(cfg.seed, step, 1 + info.rank))
            opt.zero_grad(set_to_none=True)
            step_loss = 0.0
            for k in range(cfg.train.grad_accum):
                sel = idx[k * micro : (k + 1) * micro]
                x, m = rows[sel].to(info.device), masks[sel].to(info.device)
                sync = contextlib.nullcontext() if (k == cfg.train.grad_accum - 1 or info.world == 1) else ddp.no_sync()
                with sync, autocast:
                    loss = ddp(x, generator=g_noise, attention_mask=m) / cfg.train.grad_accum
                if not torch.isfinite(loss):
                    raise NumericalError(
                        f"training diverged: the loss is {float(loss.detach())} at step {step + 1}; {where_finite()}",
                        fix="lower train.lr or raise train.warmup (and --restart, or --resume from the finite "
                        "checkpoint)",
                    )
                loss.backward()
                step_loss += float(loss.detach())
            if cfg.train.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip, foreach=True)
            opt.step()
            ema.update(model)
            reduced = distributed.all_reduce_sum(torch.tensor([step_loss], dtype=torch.float64)) / info.world
            last_loss = float(reduced)
            done = step + 1
            record = {"step": done, "loss": last_loss, "lr": lr_at(cfg, step)}
            if done % cfg.train.eval_every == 0 or done == cfg.train.steps:
                with ema.swapped_in(model):
                    val_loss = validation_loss(model, valid_data.input_ids, valid_data.attention_mask, cfg, info.device)
                    model.eval()
                    record.update(
                        val_loss_ema=val_loss, **health.measure(model, step=done, val_loss=val_loss, device=info.device)
                    )
                    model.train()
                if "warning" in record and info.is_main:
                    console().print(f"[yellow]warning:[/] {cfg.name}: {record['warning']}")
            elapsed = time.time() - t0
            tps = (done - start_step) * tokens_per_step / max(elapsed, 1e-9)
            bar.update(task, completed=done, loss=last_loss, tps=tps)
            if info.is_main:
                with open(log_path, "a") as fh:
                    fh.write(json.dumps(record) + "\n")
            if done % cfg.train.save_every == 0 or done == end:
                save(done)
            if _stop_requested(stop, info.world) and done < end:
                if last_saved != done:
                    save(done)
                name = signal.Signals(stop.signum or signal.SIGINT).name
                raise Interrupted(
                    f"{name} received: stopped at step {done} of {cfg.train.steps}; a resumable checkpoint is in {out}",
                    fix=f"continue it with the same command and --resume (primebench train ... --out {out} --resume)",
                    exit_code=128 + int(stop.signum or signal.SIGINT),
                )
    if end == start_step and info.is_main and not (out / "model.safetensors").exists():
        save(end)
    wall = time.time() - t0
    if val_loss is None and end == cfg.train.steps:
        with ema.swapped_in(model):
            val_loss = validation_loss(model, valid_data.input_ids, valid_data.attention_mask, cfg, info.device)
    if image and info.is_main and end == cfg.train.steps and cfg.train.sample_grid > 0:
        from harness.data.images import get_image_dataset, parse_image_spec
        from harness.images import write_sample_grid

        with ema.swapped_in(model):
            layout = get_image_dataset(parse_image_spec(cfg.data.corpus).with_split(cfg.data.train_split))
            write_sample_grid(model, layout, out / "samples.png", num_samples=cfg.train.sample_grid, seed=cfg.seed)
    return TrainResult(
        out=out,
        step=end,
        train_loss=last_loss,
        val_loss=val_loss,
        tokens_seen=end * tokens_per_step,
        wall_s=wall,
        unigram_ref=health.unigram_ref,
    )
