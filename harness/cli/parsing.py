"""Parsing of option values: comma lists, per-model numbers and choices read from the registries when
first needed. Declarations of the options are in :mod:`harness.cli.options`."""

from __future__ import annotations

import click


def int_list(value: str, *, example: str = "64,256,1024", minimum: int = 1) -> list[int]:
    """ "1,2,3" -> [1, 2, 3]; every entry an integer >= ``minimum``, else click.BadParameter."""
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of integers (e.g. {example})") from None
    if not out or min(out) < minimum:
        raise click.BadParameter(f"{value!r}: every entry must be an integer >= {minimum}, e.g. {example}")
    return out


def per_name_ints(value: str, names, *, example: str = "mdlm=48,prime=8") -> dict[str, int]:
    """ "N" -> {name: N for every name}; "a=N,b=M" -> {a: N, b: M} for those names only. Every N is an
    integer >= 1 and every name one of ``names``, else click.BadParameter."""
    names = tuple(names)
    pairs = [item.strip() for item in value.split(",") if item.strip()]
    if len(pairs) == 1 and "=" not in pairs[0]:
        if not pairs[0].isdigit() or int(pairs[0]) < 1:
            raise click.BadParameter(f"{value!r}: N must be an integer >= 1 (e.g. 16, or {example})")
        return dict.fromkeys(names, int(pairs[0]))
    out = {}
    for item in pairs:
        name, sep, number = item.partition("=")
        if not sep or name.strip() not in names:
            raise click.BadParameter(
                f"{item!r}: expected N, or NAME=N pairs with NAME one of {', '.join(names)} (e.g. {example})"
            )
        if not number.strip().isdigit() or int(number) < 1:
            raise click.BadParameter(f"{item!r}: N must be an integer >= 1 (e.g. {example})")
        out[name.strip()] = int(number)
    if not out:
        raise click.BadParameter(f"{value!r} is empty (e.g. {example})")
    return out


class PerNameInts(click.ParamType):
    """``N`` (an integer >= 1, returned as an int) or ``NAME=N,...`` pairs (returned as a dict) with
    every NAME one of ``names()``; its element type ``item`` is an integer >= 1, as for ``--samples``
    everywhere else."""

    name = "integer per model"

    def __init__(self, names, example: str):
        self.names = names
        self.example = example
        self.item = click.IntRange(min=1)

    def convert(self, value, param, ctx):
        if isinstance(value, (int, dict)):
            return value
        text = str(value).strip()
        if "=" not in text and "," not in text:
            if not text.isdigit() or int(text) < 1:
                self.fail(f"{value!r}: N must be an integer >= 1 (e.g. 16, or {self.example})", param, ctx)
            return int(text)
        try:
            return per_name_ints(text, self.names(), example=self.example)
        except click.BadParameter as error:
            self.fail(error.message, param, ctx)


class FiniteFloat(click.FloatRange):
    """click's FloatRange that also refuses nan and inf (FloatRange lets nan through: every comparison
    with it is false)."""

    def convert(self, value, param, ctx):
        import math

        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)


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
    """``--estimator`` values: default (the family's first), both (all it offers), an estimator name,
    or DUEL's policy likelihood for the masked families."""
    from harness.evaluation.duel import DUEL
    from harness.models import estimator_names

    return ["default", "both", *estimator_names(), DUEL.name]


def policy_choices() -> list[str]:
    """``--policy`` values: DUEL's unmasking policies, and the refused ones (refused with their reason)."""
    from harness.evaluation.duel import POLICIES, REFUSED

    return [*POLICIES, *REFUSED]


class CommaList(click.ParamType):
    """A comma-separated list of values of one element type ``item`` (a click type, which converts
    and checks every entry): the one way an option takes several values, so an option name that
    takes one value in one command and a list in another has the same element type in both."""

    def __init__(self, item: click.ParamType, example: str, what: str | None = None):
        self.item = item
        self.example = example
        self.what = what  # names an entry in the error ("unknown dtype 'x'; choose from ...")
        self.name = f"{item.name} list"

    def get_metavar(self, param, ctx=None) -> str:
        return "V1,V2,..."

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        items = [v.strip() for v in str(value).split(",") if v.strip()]
        if not items:
            self.fail(f"{value!r} is empty: give comma-separated values, e.g. {self.example}", param, ctx)
        choices = getattr(self.item, "choices", None)
        if self.what and choices is not None:
            for item in items:
                if item not in choices:
                    self.fail(f"unknown {self.what} {item!r}; choose from {', '.join(choices)}", param, ctx)
        return [self.item.convert(item, param, ctx) for item in items]


def comma_list(names, what: str) -> CommaList:
    """A comma list of ``what`` names, each one of ``names()`` (a registry's names, read when first
    needed)."""
    return CommaList(LazyChoice(names), example=f"{what}1,{what}2", what=what)


def int_list_type(example: str, minimum: int = 1) -> CommaList:
    """A comma list of integers >= ``minimum``."""
    return CommaList(click.IntRange(min=minimum), example=example)


class Command(click.Command):
    """A click command whose renamed options still parse under their old spelling for one release.

    ``aliases`` maps an old spelling (``--runs``, ``-R``) to the new one (``--samples``); an old
    spelling is rewritten before parsing, with a deprecation line on stderr, and is hidden from help.
    """

    def __init__(self, *args, aliases: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.aliases = dict(aliases or {})

    def format_help_text(self, ctx, formatter):
        """The help text with ``{release_prefixes}`` filled from the release registry when shown, so a
        new release format appears in every command's help without an edit here."""
        original = self.help
        if original and "{release_prefixes}" in original:
            from harness.models.releases import release_prefixes

            self.help = original.replace("{release_prefixes}", ", ".join(release_prefixes()))
        try:
            super().format_help_text(ctx, formatter)
        finally:
            self.help = original

    def parse_args(self, ctx, args):
        out, rest = [], list(args)
        while rest:
            arg = rest.pop(0)
            if arg == "--":
                out += [arg, *rest]
                break
            out.append(self._rename(arg))
        return super().parse_args(ctx, out)

    def _rename(self, arg: str) -> str:
        for old, new in self.aliases.items():
            short = len(old) == 2 and not arg.startswith("--") and arg.startswith(old)
            if arg == old or arg.startswith(old + "=") or short:
                click.echo(
                    f"warning: {old} is deprecated; use {new} (the old spelling goes in the next release)", err=True
                )
                value = arg[len(old) :].removeprefix("=")
                return new + (f"={value}" if value else "")
        return arg
