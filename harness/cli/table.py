"""``primebench table RECORDS...``: paper-style tables rendered from result records (logic in
:mod:`harness.views`)."""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli.options import option

# Kept here so that `primebench --help` imports no views; tests check them against harness.views.
_LAYOUTS = ("ppl", "zeroshot", "genppl", "genppl-matched", "precision", "idle", "fid", "bound")
_FORMATS = ("rich", "md", "latex", "csv")
_SUFFIX = {"rich": ".txt", "md": ".md", "latex": ".tex", "csv": ".csv"}


@click.command("table")
@click.argument("records", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option(
    "--layout",
    type=click.Choice(_LAYOUTS),
    default=None,
    help="Table layout [default: the one named after the records' evaluation].",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(_FORMATS),
    default="rich",
    show_default=True,
    help="rich (terminal), md (Markdown), latex (booktabs tabular), csv (plain values).",
)
@option(
    "--out",
    "The table is written into it as TABLE.EXT (ppl.md, zeroshot.tex, ...).",
    default=None,
    type=click.Path(),
    callback=lambda ctx, param, value: _check_out(ctx, param, value),
)
def table_cmd(records, layout, fmt, out):
    """Render a paper-style table from RECORDS (JSON record files or folders of them).

    A file that is not a readable record is skipped with a warning on stderr naming it; the table is
    built from the rest (exit 0), and only when no file is readable is it an error (exit 2).

    Bounds are marked <=, paper objectives †, estimates ~, exact numbers plain; ± is one standard
    error. Protocol settings that differ between rows are flagged (‡) and listed in footnotes.
    """
    from pathlib import Path

    from harness.errors import PrimebenchError
    from harness.views import render, to_rich
    from harness.views.records_io import load_record_files

    def warn(path, exc) -> None:  # one bad file in a results folder must not hide the rest
        click.echo(f"warning: skipped {str(path)!r}: {exc.problem}", err=True)

    files = load_record_files(records, skip=warn)
    loaded = [record for _, record in files]
    if layout is None:
        found = sorted({str(r.get("evaluation")) for r in loaded})
        if len(found) != 1 or found[0] not in _LAYOUTS:
            raise PrimebenchError(
                f"cannot choose a layout for records of evaluations {', '.join(found)}",
                fix=f"pass --layout ({', '.join(_LAYOUTS)}) and records of one evaluation",
            )
        layout = found[0]
    table = _build(files, layout, warn)
    if out is not None:
        from harness.io import atomic_write_text
        from harness.logging import console

        path = _table_path(Path(out), layout, fmt)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, render(table, fmt))
        console().log(f"wrote {path} ({layout} table, {fmt}, {table.records} records)")
    elif fmt == "rich":
        from harness.logging import stdout_console

        stdout_console().print(to_rich(table))
    else:
        click.echo(render(table, fmt), nl=False)


#: what a view raises on a record whose fields are not what the harness writes
_MISSHAPEN = (KeyError, TypeError, AttributeError, ValueError, IndexError, ArithmeticError)


def _build(files, layout: str, warn):
    """The table of the records in ``files`` ((path, record) pairs); a record the layout cannot read (a
    field missing or of another type: a damaged or hand-edited file) is skipped with a warning that
    names it, like an unreadable file."""
    from harness.errors import PrimebenchError
    from harness.views import build_table

    good = []
    for path, record in files:
        try:
            build_table([record], layout)
        except _MISSHAPEN as exc:
            warn(path, PrimebenchError(f"its fields are not a {layout} record's ({type(exc).__name__}: {exc})"[:400]))
        else:
            good.append(record)
    if not good:
        raise PrimebenchError(
            f"none of the {len(files)} records can be read as a {layout} table",
            fix="pass records written by `primebench eval ... --out DIR`, unedited",
        )
    try:
        return build_table(good, layout)
    except _MISSHAPEN as exc:
        raise PrimebenchError(
            f"the records do not fit one {layout} table together ({type(exc).__name__}: {exc})"[:400],
            fix="pass records of one evaluation, unedited",
        ) from None


def _check_out(ctx, param, value):
    """``--out`` checked when parsed, before any record is read: a folder (or the deprecated FILE.EXT,
    whose folder is checked)."""
    from harness.cli.options import _out_callback

    if value is None:
        return None
    path = Path(value)
    if path.suffix in set(_SUFFIX.values()) and not path.is_dir():
        _out_callback(ctx, param, str(path.parent))
        return path
    return _out_callback(ctx, param, value)


def _table_path(out, layout: str, fmt: str):
    """``--out`` is a folder; the table is ``LAYOUT.EXT`` inside. A path ending in a table suffix that is
    not a folder is the old meaning (a file), still accepted for one release with a deprecation line."""
    from harness.checks import check_out_folder

    if out.suffix in set(_SUFFIX.values()) and not out.is_dir():
        click.echo(
            f"warning: --out FILE is deprecated; --out is a folder (the table goes to {out.parent}/LAYOUT.EXT)",
            err=True,
        )
        return out
    check_out_folder(out)
    return out / f"{layout}{_SUFFIX[fmt]}"


@click.command("report")
@click.argument("records", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option(
    "--html",
    "html_out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The page to write: one self-contained HTML file (no server, no network).",
)
@click.option("--title", default=None, help="The page's title [default: the job's name, or 'primebench records'].")
def report_cmd(records, html_out, title):
    """Write RECORDS (record files, folders of them, or one folder a reproduce job wrote) as one static HTML
    page: every table with its legend of kinds, the plots, and each record's protocol and provenance a click
    away, filterable by family and dataset.

    A folder written by `reproduce small` or `reproduce quickstart` (tables.md beside records/) gets the
    same tables as its tables.md and its PNG plots; other records get one table per evaluation."""
    from harness.logging import console
    from harness.reproduce.report.html import write_html_report

    def warn(path, exc) -> None:
        click.echo(f"warning: skipped {str(path)!r}: {exc.problem}", err=True)

    html_out.parent.mkdir(parents=True, exist_ok=True)
    path = write_html_report(list(records), html_out, title=title, skip=warn)
    console().log(f"wrote {path}")
    click.echo(str(path))


COMMANDS = [table_cmd, report_cmd]
