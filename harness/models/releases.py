"""The registry of release formats: how a published checkpoint is named (its load prefix), recognised
and loaded.

Each import adapter registers its formats in its own module (``register_release(ReleaseFormat(...))``),
and every place that dispatches on a prefix asks this registry: :func:`harness.load`, the prefix
check of :mod:`harness.models.sources`, ``primebench import --source-format`` and the records' weight
hashes. Adding a release format therefore touches only its adapter. The adapters are found as the
modules of :data:`ADAPTER_PACKAGES` whose names end in ``_import``; the ``hf:`` format (any
transformers causal LM, evaluated as the ARM) is registered here.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

from harness.models.hf_causal import hf_arm
from harness.registry import Registry


@dataclass(frozen=True)
class ReleaseFormat:
    """One release layout.

    ``name``: the ``--source-format`` value (``udlm-hf``); ``prefix``: the load prefix
    (``udlm-hf:``); ``what``: what a file or folder of this layout is, for errors that name it;
    ``loader(source, *, ema, device, tokenizer)`` -> ``(model, tokenizer, config)``;
    ``model_type``: the ``model_type`` of the layout's ``config.json`` (how a folder is recognised);
    ``config_keys``: the ``config.json`` keys that recognise a folder without a known ``model_type``
    (the format with the most matching keys wins); ``checkpoint_file``: a Lightning ``.ckpt`` file,
    whose loader checks its kind itself."""

    name: str
    prefix: str
    what: str
    loader: Callable
    model_type: str | None = None
    config_keys: tuple[str, ...] = ()
    checkpoint_file: bool = False


RELEASES: Registry[ReleaseFormat] = Registry("release format")
#: packages whose ``*_import`` modules are import adapters (each registers its formats)
ADAPTER_PACKAGES = ("harness.models",)
_discovered = False


def register_release(fmt: ReleaseFormat) -> ReleaseFormat:
    """Add a release format (called at import time by its adapter module)."""
    if not fmt.prefix.endswith(":") or fmt.prefix != f"{fmt.name}:" and fmt.name != "hf-causal":
        raise ValueError(f"release format {fmt.name!r}: its prefix must be '{fmt.name}:', got {fmt.prefix!r}")
    return RELEASES.register(fmt.name, fmt)


def _hf_loader(source, *, ema: bool = True, device: str = "cpu", tokenizer: str | None = None):

    return hf_arm(source, device=device)


register_release(
    ReleaseFormat(
        name="hf-causal",
        prefix="hf:",
        what="a transformers model folder (config.json with model_type), which loads with hf:",
        loader=_hf_loader,
    )
)


def _discover() -> None:
    global _discovered
    if _discovered:
        return

    for package in ADAPTER_PACKAGES:
        root = importlib.import_module(package)
        for info in sorted(pkgutil.iter_modules(root.__path__), key=lambda i: i.name):
            if info.name.endswith("_import"):
                importlib.import_module(f"{package}.{info.name}")
    _discovered = True


def release_formats() -> list[ReleaseFormat]:
    """Every registered format, sorted by name."""
    _discover()
    return [RELEASES.get(name) for name in RELEASES.names()]


def release_prefixes() -> tuple[str, ...]:
    """Every load prefix (``hf:``, ``mdlm-hf:``, ...)."""
    return tuple(f.prefix for f in release_formats())


def release_format_names() -> list[str]:
    """The ``--source-format`` values."""
    return [f.name for f in release_formats()]


def format_of(source: str) -> ReleaseFormat | None:
    """The format whose prefix ``source`` starts with (the longest match), or None for a plain path."""
    hits = [f for f in release_formats() if str(source).startswith(f.prefix)]
    return max(hits, key=lambda f: len(f.prefix)) if hits else None


__all__ = [
    "ADAPTER_PACKAGES",
    "RELEASES",
    "ReleaseFormat",
    "format_of",
    "register_release",
    "release_format_names",
    "release_formats",
    "release_prefixes",
]
