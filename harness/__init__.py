"""primebench harness: everything shared by the model families (CLI, config, data, backbone, ...)."""

from __future__ import annotations

__version__ = "0.1.0"


def load(path, *, ema: bool = True, device: str = "cpu", tokenizer: str | None = None):
    """Load ``(model, tokenizer, config)`` from a checkpoint folder written by ``primebench train``,
    from ``hf:NAME_OR_PATH`` (an HF causal LM, evaluated as the ARM family), or from
    ``mdlm-hf:PATH`` / ``mdlm-ckpt:FILE`` (a published MDLM checkpoint in the HF layout or as
    Lightning ``.ckpt``, evaluated as MDLM; ``ema`` picks the EMA weights of a ``.ckpt``), or from
    ``prime-ckpt:FILE`` (an MDM-Prime release checkpoint, evaluated as Prime), or from
    ``ar-ckpt:FILE`` (the releases' autoregressive baseline, evaluated as the ARM), or from
    ``bd3lm-hf:PATH`` / ``bd3lm-ckpt:FILE`` (a published BD3-LM, evaluated as bd3lm), or from
    ``udlm-hf:PATH`` / ``duo-hf:PATH`` (a published UDLM or DUO), or any other prefix in the registry
    of release formats (:mod:`harness.models.releases`). ``tokenizer`` names the tokenizer of a
    release checkpoint that has no tokenizer files beside it."""
    # deferred: the CLI imports this package at start-up, which must not load torch
    from harness.checkpoint import load_checkpoint
    from harness.models.hf_causal import is_hf_source
    from harness.models.hub import localize
    from harness.models.releases import format_of
    from harness.models.sources import check_source
    from harness.models.transfer import is_transfer_folder, load_transfer_folder

    source = localize(str(path))  # a release named on the hub (PREFIX ORG/NAME[@REV]): its cached files
    check_source(source)  # a prefix that does not fit the file or folder is named, with the right one
    fmt = format_of(source)  # the registry of release formats (harness.models.releases)
    if fmt is not None and is_hf_source(source):
        return fmt.loader(source, ema=ema, device=device, tokenizer=tokenizer)
    if is_transfer_folder(source):  # written by `primebench import` / `primebench export`
        return load_transfer_folder(source, ema=ema, device=device)
    if fmt is not None:
        return fmt.loader(source, ema=ema, device=device, tokenizer=tokenizer)
    return load_checkpoint(path, ema=ema, device=device)
