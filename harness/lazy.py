"""Lazy re-exports for package ``__init__`` modules (PEP 562): a name is imported from its module
the first time it is used, so importing the package stays cheap."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str], namespace: dict[str, Any], names: list[str]):
    """``(__getattr__, __dir__)`` for ``package``: ``exports`` maps a public name to the submodule
    (relative to ``package``) that defines it; ``namespace`` is the package's ``globals()``, where a
    resolved name is cached; ``names`` its ``__all__``."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(list(namespace) + names)

    getter: Callable[[str], Any] = __getattr__
    return getter, __dir__


__all__ = ["lazy_exports"]
