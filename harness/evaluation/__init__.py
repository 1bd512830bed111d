"""Evaluations of checkpoints: perplexity and bounds, Gen PPL with entropy (zero-shot and FID live
in :mod:`harness.lmeval` and :mod:`harness.fid`)."""

from __future__ import annotations

from harness import distributed, load
from harness.checkpoint import rebuild_tokenizer


def load_for_evaluation(
    checkpoint, device: str = "cpu", *, corpus=None, carry_over: bool | None = None, ema: bool = True
):
    """Join torchrun's process group when launched by it, then load the checkpoint on this rank's device.

    Returns ``(info, model, tokenizer, cfg)``; a checkpoint without a tokenizer folder gets the
    tokenizer its config names (``corpus``: the text a ``bpe:V`` tokenizer is trained on, if needed),
    refused unless it is the one training recorded (:func:`harness.checkpoint.rebuild_tokenizer`).
    Every evaluation and audit loads its checkpoint here. ``carry_over``: override Prime's
    carry-over (None: as trained); recorded through the model's protocol. ``ema``: the EMA weights
    (default, as MDLM evaluates) or the raw ones.
    """

    info = distributed.setup(device)
    device = str(info.device) if info.world > 1 else device
    model, tokenizer, cfg = load(checkpoint, device=device, ema=ema)
    if carry_over is not None:
        model.set_carry_over(carry_over)
    if tokenizer is None:
        tokenizer = rebuild_tokenizer(checkpoint, cfg.data.tokenizer, corpus=corpus)
    return info, model, tokenizer, cfg
