"""The ``primebench`` command line: thin click commands, one module per group.

Results go to stdout (``--json`` for machines); progress and logs go to stderr. Heavy imports
happen inside commands so ``primebench --help`` is fast. User errors print a message that names the
problem and the fix, and exit with status 2.
"""

from __future__ import annotations

import sys

import click

from harness.errors import Interrupted, PrimebenchError


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except PrimebenchError as exc:
            click.echo(f"error: {exc.problem}", err=True)
            if exc.fix:
                click.echo(f"  fix: {exc.fix}", err=True)
            ctx.exit(exc.exit_code if isinstance(exc, Interrupted) else 2)
        except (FileNotFoundError, FloatingPointError, ValueError) as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="primebench")
def main() -> None:
    """primebench: train and evaluate MDM-Prime, MDLM, ARM and masked models with one protocol."""


def _register() -> None:
    from harness.cli import audit, bench, data, eval as eval_cmd, models, reproduce, table, train, transfer

    for module in (train, eval_cmd, audit, table, data, models, reproduce, transfer, bench):
        for command in module.COMMANDS:
            main.add_command(command)


_register()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
