"""The shared frame of every reproduce report: :class:`Section` and how a list of them prints on the
terminal (:func:`print_sections`) and reads as Markdown (:func:`sections_markdown`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.logging import capture_stdout, stdout_console
from harness.views import build_table, render, to_rich
from harness.views.html import HtmlSection, page_html


@dataclass(frozen=True)
class Section:
    """One table of a report: ``layout`` (a :mod:`harness.views` layout name) over ``records``, or
    ``view(record)`` called on each record (a record with a rich view of its own), or a prebuilt
    ``table``. ``note`` is a paragraph printed under the title in ``tables.md``; a section without
    records is left out of both outputs."""

    title: str
    records: Sequence[dict[str, Any]] = field(default_factory=tuple)
    layout: str | None = None
    view: Callable[[dict[str, Any]], None] | None = None
    note: str = ""
    table: Any = None  # a prebuilt harness.views.Table (then records only say the section is not empty)


def print_sections(sections: Sequence[Section]) -> None:
    """Print every section that has records on stdout (rich tables, as the ``table`` command prints them)."""

    screen = stdout_console()
    for s in sections:
        if not s.records:
            continue
        if s.table is not None:
            screen.print(to_rich(s.table))
        elif s.view is not None:
            for record in s.records:
                s.view(record)
        elif s.records:
            screen.print(to_rich(build_table(list(s.records), s.layout)))


def _body(s: Section):
    """A section's table (a prebuilt one, or its layout over its records), or the text its view prints."""
    if s.table is not None:
        return s.table, None
    if s.view is not None:
        with capture_stdout() as screen:
            for record in s.records:
                s.view(record)
        return None, "\n".join(line.rstrip() for line in screen.export_text().splitlines()).strip()
    return build_table(list(s.records), s.layout), None


def sections_markdown(title: str, sections: Sequence[Section], preamble: str = "") -> str:
    """The sections as one Markdown document (returned as a string): ``# title``, then ``preamble``, then
    a heading per section with records: its note, then a Markdown table for a layout or a prebuilt table,
    a code block of the printed text for a view."""

    parts = [f"# {title}\n"]
    if preamble:
        parts.append(preamble.rstrip() + "\n")
    for s in sections:
        if not s.records:
            continue
        parts.append(f"## {s.title}\n")
        if s.note:
            parts.append(s.note.rstrip() + "\n")
        table, text = _body(s)
        if table is not None:
            parts.append(render(table, "md").rstrip() + "\n")
        else:
            parts.append(f"```\n{text}\n```\n")
    return "\n".join(parts)


def sections_html(title: str, sections: Sequence[Section], preamble: str = "", images: Sequence[Path] = ()) -> str:
    """The same sections as one self-contained HTML page (:func:`harness.views.html.page_html`): the
    tables, the plots in ``images`` embedded, and every record behind its rows."""

    parts = []
    for s in sections:
        if not s.records:
            continue
        table, text = _body(s)
        parts.append(HtmlSection(s.title, s.note, table=table, text=text, records=list(s.records)))
    return page_html(title, parts, preamble=preamble, images=[Path(p) for p in images if Path(p).is_file()])
