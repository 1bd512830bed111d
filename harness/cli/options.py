"""Shared click option parsing."""

from __future__ import annotations

import click


def int_list(value: str, *, example: str = "64,256,1024", minimum: int = 1) -> list[int]:
    """"1,2,3" -> [1, 2, 3]; every entry an integer >= ``minimum``, else click.BadParameter."""
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of integers (e.g. {example})") from None
    if not out or min(out) < minimum:
        raise click.BadParameter(f"{value!r}: every entry must be an integer >= {minimum}, e.g. {example}")
    return out


class LazyChoice(click.Choice):
    """A click.Choice whose values come from a function called when first needed (e.g. the model
    registry), so that defining the CLI imports no model code."""

    def __init__(self, values, case_sensitive: bool = True):
        self._values = values
        self._cached = None
        super().__init__((), case_sensitive=case_sensitive)

    @property
    def choices(self):
        if self._cached is None:
            self._cached = tuple(self._values())
        return self._cached

    @choices.setter
    def choices(self, value):
        pass


def estimator_choices() -> list[str]:
    """``--estimator`` values: default (the family's first), both (all it offers), or an estimator name."""
    from harness.models import estimator_names

    return ["default", "both", *estimator_names()]
