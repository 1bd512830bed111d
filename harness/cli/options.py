"""The option vocabulary. Every option name has one meaning in every command (:data:`VOCABULARY`);
shared options are declared here once and commands build theirs with :func:`option`, adding detail to
the meaning, never a different one. Renamed spellings parse for one release as hidden aliases
(:class:`Command`) that print a deprecation line. ``docs/cli.md`` is generated from these.
"""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli.parsing import Command, LazyChoice, comma_list
from harness.cli.vocabulary import VOCABULARY

__all__ = ["VOCABULARY", "Command", "command", "option"]

_DECLS = {
    "--ema": ("--ema/--no-ema",),
    "--carry-over": ("--carry-over/--no-carry-over",),
    "--references": ("--references/--no-references",),
}
_SHORT = {"--steps": "-T", "--samples": "-n", "--mc-samples": "-K"}
_DEST = {"--json": "as_json", "--checkpoint": "checkpoints"}


class VocabularyOption(click.Option):
    """A click option declared through :func:`option`: ``vocabulary`` is its entry in :data:`VOCABULARY`."""

    def __init__(self, *args, vocabulary: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.vocabulary = vocabulary


def option(name: str, detail: str | None = None, **kwargs):
    """The shared option ``name`` with its one meaning, ``detail`` appended to the help text. ``kwargs``
    go to :func:`click.option` (type, default, callback, ...)."""
    decls = _DECLS.get(name, (name,)) + ((_SHORT[name],) if name in _SHORT else ())
    dest = kwargs.pop("dest", _DEST.get(name))
    help_text = VOCABULARY[name] + (f" {detail}" if detail else "")
    decls = decls + ((dest,) if dest else ())
    return click.option(*decls, cls=VocabularyOption, vocabulary=name, help=help_text, **kwargs)


def command(name: str, aliases: dict[str, str] | None = None, **kwargs):
    """``@click.command(name)`` with the hidden ``aliases`` of :class:`harness.cli.parsing.Command`."""
    return click.command(name, cls=Command, aliases=aliases, **kwargs)


def _out_callback(ctx, param, value):
    from harness.checks import check_out_folder
    from harness.errors import PrimebenchError

    if value is None:
        return None
    try:
        check_out_folder(value)
    except PrimebenchError as exc:
        raise click.BadParameter(exc.problem.removeprefix(f"--out {str(value)!r} ").strip() + f"; {exc.fix}") from None
    return Path(value)


def out_option(detail: str = "The JSON record is written into it.", **kwargs):
    """``--out DIR``: checked (not a file, writable) when parsed, before any work starts."""
    return option("--out", detail, type=click.Path(), callback=_out_callback, **kwargs)


def json_option():
    return option("--json", is_flag=True)


def device_option(default: str | None = "cpu", detail: str | None = None):
    """``--device``: checked (:func:`harness.checks.check_device`) when parsed, before anything loads."""

    def check(ctx, param, value):
        from harness.checks import check_device

        return None if value is None else check_device(value)

    return option("--device", detail, default=default, show_default=default is not None, callback=check)


def draw_option(default: str = "two-stage"):
    return option("--draw", type=click.Choice(["two-stage", "joint"]), default=default, show_default=True)


def _dtype_names() -> list[str]:
    from harness.sampling import categorical

    return list(categorical.DTYPE_NAMES)


def _method_names() -> list[str]:
    from harness.sampling.categorical import METHODS

    return list(METHODS)


def dtype_option(default: str, many: bool = False, detail: str | None = None):
    """``--dtype``: one precision, or (``many``) a comma list of those the command compares."""
    if not many:
        return option("--dtype", detail, type=LazyChoice(_dtype_names), default=default, show_default=True)
    more = "Comma-separated; each is run." + (f" {detail}" if detail else "")
    return option(
        "--dtype", more, dest="dtypes", default=default, show_default=True, type=comma_list(_dtype_names, "dtype")
    )


def method_option(default: str, many: bool = False, detail: str | None = None):
    """``--method``: one categorical draw method, or (``many``) a comma list the command compares."""
    if not many:
        return option("--method", detail, type=LazyChoice(_method_names), default=default, show_default=True)
    more = "Comma-separated; each is run." + (f" {detail}" if detail else "")
    return option(
        "--method",
        more,
        dest="methods",
        default=default,
        show_default=True,
        type=comma_list(_method_names, "method"),
    )


def ema_option(detail: str | None = None):
    return option("--ema", detail, default=True, show_default=True)


def carry_over_option(detail: str | None = None):
    return option("--carry-over", detail, default=None)


def seed_option(detail: str | None = None, default: int = 0):
    return option("--seed", detail, type=click.IntRange(min=0), default=default, show_default=True)


def _time_sampler_names() -> list[str]:
    from harness.diffusion import TIME_SAMPLERS

    return list(TIME_SAMPLERS)


def time_sampler_option():
    return option("--time-sampler", type=LazyChoice(_time_sampler_names), default=None)
