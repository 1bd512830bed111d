"""The one way a command hands back its record: written under ``--out``, then JSON or a view on stdout."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def emit_record(
    record: dict,
    *,
    out: Path | None,
    as_json: bool,
    render: Callable[[dict], None],
    indent: int | None = 2,
    attachments: dict[str, tuple[str, bytes]] | None = None,
    before: list[tuple[dict, dict[str, tuple[str, bytes]]]] = (),
) -> Path | None:
    """Write ``record`` into the folder ``out`` (if given), then print it as JSON (``as_json``, with
    ``indent``) or through ``render``. Returns the written file, or None.

    ``attachments``: files that go next to the record under its name (see
    :func:`harness.records.write_record`); without ``out`` they are not written. ``before``:
    ``(record, attachments)`` pairs written into ``out`` first and not printed (a sweep's points).

    Under torchrun only rank 0 writes and prints, so a record appears once whatever the world size.
    """
    from harness import distributed
    from harness.logging import console

    if not distributed.is_main():
        return None
    path = None
    if out is not None:
        from harness.records import write_record

        for other, files in before:
            console().log(f"record written to {write_record(other, out, attachments=files)}")
        path = write_record(record, out, attachments=attachments)
        for key in attachments or {}:
            console().log(f"{key.replace('_', ' ')} written to {record[key]}")
        console().log(f"record written to {path}")
    if as_json:
        import click

        from harness.records import record_json

        click.echo(record_json(record, indent=indent))
    else:
        render(record)
    return path


__all__ = ["emit_record"]
