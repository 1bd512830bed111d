"""The ``primebench`` command line: thin click commands, one module per command or group, options from
one vocabulary (:mod:`harness.cli.options`).

Results go to stdout (``--json`` for machines); progress and logs go to stderr. Heavy imports
happen inside commands so ``primebench --help`` is fast. The harness's own errors
(:class:`harness.errors.PrimebenchError`, raised for anything a user can correct) and click's usage
errors print a message that names the problem and the fix and exit with status 2; so does a file-system
error on a path (a name too long, no permission). SIGINT (Ctrl-C) and SIGTERM stop any command within
seconds (:mod:`harness.stopping`), print one line and exit with 130 / 143.
A failed memory allocation (a batch or a sequence too large for the machine) is named with the
settings that size it, status 2.
Any other exception is a bug: its traceback is shown with a line asking to report it, exit status 1.
"""

from __future__ import annotations

import sys

import click

from harness.errors import Interrupted, PrimebenchError


class _Group(click.Group):
    def invoke(self, ctx):
        from harness.stopping import handling

        with handling():  # SIGINT and SIGTERM stop any command within seconds (harness.stopping)
            return self._invoke(ctx)

    def _invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except PrimebenchError as exc:
            click.echo(f"error: {exc.problem}", err=True)
            if exc.fix:
                click.echo(f"  fix: {exc.fix}", err=True)
            ctx.exit(exc.exit_code if isinstance(exc, Interrupted) else 2)
        except KeyboardInterrupt as exc:  # outside `train` (which saves and raises Interrupted): 128 + signal
            name, code = getattr(exc, "name", "SIGINT"), getattr(exc, "exit_code", 130)
            click.echo(f"\nerror: interrupted ({name}); nothing more was written", err=True)
            click.echo("  fix: run the command again (records and caches are written whole, never in part)", err=True)
            ctx.exit(code)
        except OSError as exc:
            if exc.filename is None:
                _report_bug()
                raise
            click.echo(f"error: {exc.strerror or exc}: {str(exc.filename)!r}", err=True)
            click.echo(f"  fix: {_os_error_fix(exc)}", err=True)
            ctx.exit(2)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except (MemoryError, RuntimeError) as exc:
            if not _out_of_memory(exc):
                _report_bug()
                raise
            click.echo(f"error: out of memory: {_first_line(exc)}", err=True)
            click.echo(
                "  fix: lower the setting that sizes it (train.batch_size, data.seq_len, --batch-size, --samples, "
                "model sizes); records and checkpoints already written are whole",
                err=True,
            )
            ctx.exit(2)
        except Exception:
            _report_bug()
            raise


def _out_of_memory(exc: BaseException) -> bool:
    """True for an allocation that failed (torch's CPU allocator, CUDA's, or Python's own)."""
    if isinstance(exc, MemoryError):
        return True
    text = str(exc)
    return type(exc).__name__ == "OutOfMemoryError" or any(
        marker in text for marker in ("can't allocate memory", "out of memory", "Cannot allocate memory")
    )


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return (lines[-1] if lines else type(exc).__name__)[:300]


def _report_bug() -> None:
    """Say that an exception the harness did not raise on purpose is a bug (its traceback follows)."""
    click.echo(
        "error: an internal error (a bug in primebench, not in your input); please report it with the command "
        "and the traceback below",
        err=True,
    )


def _os_error_fix(exc: OSError) -> str:
    """What to do about a file-system error on a path the user gave (or one built from it)."""
    import errno

    return {
        errno.ENAMETOOLONG: "use a shorter path (names of at most 255 bytes, the whole path under 4096)",
        errno.EACCES: "use a path you can read and write",
        errno.EPERM: "use a path you can read and write",
        errno.EROFS: "write to a folder on a writable file system",
        errno.ENOSPC: "free space on that disk, or write somewhere else",
        errno.ELOOP: "remove the loop of symbolic links, or use another path",
        errno.ENOTDIR: "a part of the path is a file, not a folder: fix the path",
        errno.EISDIR: "pass a file, not a folder",
    }.get(exc.errno, "check the path")


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="primebench")
def main() -> None:
    """primebench: train and evaluate discrete diffusion models (MDM-Prime, MDLM, BD3-LM, UDLM, DUO), an
    autoregressive and a masked model with one protocol (`primebench models` lists the families)."""


def _register() -> None:
    from harness.cli import audit, bench, data, models, prefetch, reproduce, table, train, transfer
    from harness.cli import eval as eval_cmd

    for module in (train, eval_cmd, audit, table, data, models, reproduce, transfer, prefetch, bench):
        for command in module.COMMANDS:
            main.add_command(command)


_register()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
