"""One generic registry with did-you-mean errors (in the spirit of lm-eval's ``Registry``)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from harness.errors import PrimebenchError

T = TypeVar("T")


class Registry(Generic[T]):
    """A name -> object mapping for one kind of thing (models, samplers, corpora, ...).

    ``get`` of an unknown name raises a :class:`PrimebenchError` that lists close matches and
    every registered name, so a typo on the command line is fixed in one step.
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str, obj: T | None = None) -> Callable[[T], T] | T:
        """Register ``obj`` under ``name``; used bare or as a decorator."""

        def add(item: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._items[name] = item
            return item

        return add if obj is None else add(obj)

    def get(self, name: str) -> T:
        if name in self._items:
            return self._items[name]
        close = difflib.get_close_matches(name, list(self._items), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
        raise PrimebenchError(
            f"unknown {self.kind} {name!r}",
            fix=f"{hint}registered {self.kind}s: {', '.join(sorted(self._items)) or '(none)'}",
        )

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)
