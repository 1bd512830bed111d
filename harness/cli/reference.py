"""``docs/cli.md``, generated from the click commands themselves so that it cannot drift.

``python -m harness.cli.reference --write`` rewrites the file; ``--check`` exits 1 when the committed
file differs (a test runs the same comparison). The file holds the option vocabulary (each shared
option's one meaning, with the commands that take it), the renamed options, and every command's help
exactly as ``--help`` prints it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from harness.cli.parsing import Command
from harness.cli.vocabulary import CHANGED_MEANING, SEVERAL, TYPES, VOCABULARY

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
WIDTH = 100


def commands(group: click.Group | None = None, prefix: tuple[str, ...] = ()):
    """Every leaf command as ``(("eval", "ppl"), command)``, in the order ``--help`` lists them."""
    if group is None:
        from harness.cli import main

        group, prefix = main, ("primebench",)
    for name in sorted(group.commands):
        command = group.commands[name]
        if isinstance(command, click.Group):
            yield from commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


def visible_options(command: click.Command):
    """``(long name, option)`` for each option ``--help`` shows."""
    for param in command.params:
        if isinstance(param, click.Option) and not param.hidden:
            names = [o for o in param.opts if o.startswith("--")]
            yield names[0].split("/")[0], param


def vocabulary_rows() -> list[tuple[str, str, list[str]]]:
    """``(option, meaning, commands)`` for each option in :data:`VOCABULARY`."""
    users: dict[str, list[str]] = {}
    for path, command in commands():
        for name, _ in visible_options(command):
            users.setdefault(name, []).append(" ".join(path[1:]))
    return [(name, meaning, users.get(name, [])) for name, meaning in VOCABULARY.items()]


def _help(path: tuple[str, ...], command: click.Command) -> str:
    """The help text as ``primebench ... --help`` prints it: the contexts chain down from ``main`` so
    its settings (``-h`` beside ``--help``) reach every command."""
    from harness.cli import main

    ctx = click.Context(main, info_name=path[0], terminal_width=WIDTH, max_content_width=WIDTH, **main.context_settings)
    group = main
    for name in path[1:]:
        group = group.commands[name]
        ctx = click.Context(group, info_name=name, parent=ctx)
    return command.get_help(ctx)


def markdown() -> str:
    """The text of ``docs/cli.md``."""
    cell = lambda text: text.replace("|", "\\|")  # noqa: E731
    lines = [
        "# Command-line reference",
        "",
        "Generated from the click commands by `python -m harness.cli.reference --write`; a test fails when",
        "this file differs from what the commands say. Do not edit by hand.",
        "",
        "## One vocabulary",
        "",
        "Each option name means one thing in every command that takes it. A command adds detail to the",
        "meaning (a default, a unit), never a different one, and the value has one type everywhere. A few",
        "options take several values in the commands that compare them (the `values` column); every other",
        "command takes one value of the same type and refuses a list.",
        "",
        "| option | meaning | type | values | commands |",
        "|---|---|---|---|---|",
    ]
    for name, meaning, used in vocabulary_rows():
        several = cell(SEVERAL.get(name, "one"))
        users = ", ".join(f"`{u}`" for u in used) or "–"
        lines.append(f"| `{name}` | {cell(meaning)} | {TYPES[name]} | {several} | {users} |")
    lines += [
        "",
        "## Renamed options",
        "",
        "Old spellings still parse for one release, print a deprecation line on stderr, and are hidden from",
        "`--help`.",
        "",
        "| command | old | new |",
        "|---|---|---|",
    ]
    for path, command in commands():
        for old, new in getattr(command, "aliases", {}).items() if isinstance(command, Command) else ():
            lines.append(f"| `{' '.join(path[1:])}` | `{old}` | `{new}` |")
    lines += ["", "Changed meaning (no alias can keep the old one):", ""]
    lines += [f"- `{where}`: {what}" for where, what in CHANGED_MEANING.items()]
    lines += ["", "## Commands", ""]
    for path, command in commands():
        lines += [f"### `{' '.join(path)}`", "", "```text", _help(path, command).rstrip(), "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    text = markdown()
    if args == ["--write"]:
        DOC.write_text(text)
        return 0
    if args == ["--check"]:
        if DOC.exists() and DOC.read_text() == text:
            return 0
        print(f"{DOC} is out of date: run python -m harness.cli.reference --write", file=sys.stderr)
        return 1
    print(text, end="")
    return 0


__all__ = ["commands", "markdown", "visible_options", "vocabulary_rows"]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
