"""Model families and the registry that builds them.

A model family wraps a :class:`~harness.backbone.Backbone` and owns its forward process, training
loss, likelihood estimators and the facts the rest of the harness asks (:mod:`harness.models.base`).
Families register themselves by name in their own modules (found by :func:`family_names`, which
imports the modules of :data:`FAMILY_PACKAGES` and the ``primebench.families`` entry points) and are
built with :func:`build_model`::

    from harness.models import build_model
    m = build_model("arm", vocab_size=257, seq_len=64, d_model=64, n_layers=2, n_heads=2)
    m.loss(x0)            # scalar training objective
    m.nll(x0)             # typed NLL: per-sequence nats, token count, kind, standard error

Every family implements ``log_probs(z_t, t)`` -> (B, L, C) log p_theta(x_0^i = c | z_t),
``loss(x0, *, generator, attention_mask)`` -> scalar and ``nll(x0, *, estimators, num_samples,
generator, attention_mask, corruptible, time_sampler)`` -> :class:`harness.nll.NLL` (one per name
of ``estimators``, a list, when they are given), and says its time sampler (``time_sampler()``).
Code outside the families reaches a family's own pieces through its class (``family_class(name)``),
never by importing the family's package.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from importlib.metadata import entry_points
from typing import Any

from harness.errors import PrimebenchError
from harness.models.base import Estimator, ModelConfig, ModelFamily
from harness.registry import Registry

MODELS: Registry[type[ModelFamily]] = Registry("model family")

#: the packages whose modules may define families: every module in them is imported once, and a
#: family registers itself in its own module (``MODELS.register(NAME, Class)``); nothing here names one
FAMILY_PACKAGES = ("baselines", "prime")
#: the entry-point group through which an installed distribution adds its own families
ENTRY_POINT_GROUP = "primebench.families"
_discovered = False


def _ensure_registered() -> None:
    """Import every module of :data:`FAMILY_PACKAGES` and load the :data:`ENTRY_POINT_GROUP` entry
    points, so that every family has registered itself (once per process)."""
    global _discovered
    if _discovered:
        return

    for package in FAMILY_PACKAGES:
        root = importlib.import_module(package)
        for info in sorted(pkgutil.iter_modules(root.__path__), key=lambda i: i.name):
            importlib.import_module(f"{package}.{info.name}")
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name not in MODELS:
            point.load()
    _discovered = True


def family_class(name: str) -> type[ModelFamily]:
    """The registered family ``name`` (did-you-mean error for a typo)."""
    _ensure_registered()
    return MODELS.get(name)


def build_model(family: str, *, vocab_size: int, seq_len: int, **kwargs: Any) -> ModelFamily:
    """Build a registered family. Keyword arguments are the family's ``model.*`` config keys."""
    return family_class(family)(vocab_size=vocab_size, seq_len=seq_len, **kwargs)


def model_from_config(model_cfg: ModelConfig, *, vocab_size: int, seq_len: int) -> ModelFamily:
    """Build from a family's config dataclass (``cfg.model``)."""
    kwargs = dataclasses.asdict(model_cfg)
    family = kwargs.pop("family")
    return build_model(family, vocab_size=vocab_size, seq_len=seq_len, **kwargs)


def family_names() -> list[str]:
    _ensure_registered()
    return MODELS.names()


def families_offering(estimator: str) -> list[str]:
    """Names of the families that offer the estimator ``estimator``."""
    return [n for n in family_names() if any(e.name == estimator for e in MODELS.get(n).estimators)]


def family_of_kind(kind: str) -> type[ModelFamily]:
    """The one registered family that offers an estimator of ``kind`` beside its others (the
    ``paper-objective`` kind: MDM-Prime, whose enumerations the bound audit runs); an error naming
    the families when none or several do."""

    found = [n for n in family_names() if any(e.kind == kind for e in MODELS.get(n).estimators)]
    if len(found) != 1:
        raise PrimebenchError(
            f"{len(found)} registered families offer a {kind!r} estimator ({', '.join(found) or 'none'}); "
            "this audit needs exactly one",
            fix="register one family with that estimator kind",
        )
    return MODELS.get(found[0])


def estimator_names() -> list[str]:
    """Every estimator name some family offers, in registry order (``eval ppl --estimator`` choices)."""
    names: list[str] = []
    for family in family_names():
        names += [e.name for e in MODELS.get(family).estimators if e.name not in names]
    return names


def label_of(model_cfg: ModelConfig) -> str:
    """How tables name a model with this config (e.g. ``prime, ell=2``)."""
    return family_class(model_cfg.family).label(model_cfg)


__all__ = [
    "ENTRY_POINT_GROUP",
    "FAMILY_PACKAGES",
    "MODELS",
    "Estimator",
    "ModelConfig",
    "ModelFamily",
    "build_model",
    "estimator_names",
    "families_offering",
    "family_of_kind",
    "family_class",
    "family_names",
    "label_of",
    "model_from_config",
]
