"""The table model (:class:`Cell`, :class:`Column`, :class:`Footnote`, :class:`Table`) and its four
text formats (:func:`render`: rich, Markdown, LaTeX, CSV).

Marks are never hidden in the numbers' meaning: a bound is printed ``<= x``, a paper objective
``x†`` (not a bound), an estimate ``~x``, an exact number plain; ``± s`` is one standard error
(``n/a`` when it could not be estimated; exact numbers have none); ``‡a`` flags a row that differs
from the others in the protocol key of footnote ``a``.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from harness.errors import PrimebenchError

FORMATS = ("rich", "md", "latex", "csv")


@dataclass(frozen=True)
class Cell:
    """One cell: a number with its standard error and kind, or text. ``flags`` are footnote letters
    of protocol keys in which this row differs from the others."""

    value: float | None = None
    stderr: float | None = None
    kind: str | None = None
    text: str | None = None
    decimals: int = 4
    flags: tuple[str, ...] = ()
    quoted: bool = False  # a number quoted from a paper: printed without a standard error

    @property
    def numeric(self) -> bool:
        return self.text is None


@dataclass(frozen=True)
class Column:
    """``key``: machine name (CSV header); ``title``: what a reader sees; ``numeric``: right-aligned,
    and in CSV followed by ``KEY_stderr`` and ``KEY_kind`` columns."""

    key: str
    title: str
    numeric: bool = True
    mark: str | None = None


@dataclass(frozen=True)
class Footnote:
    """``mark``: a kind (``bound``, ``paper-objective``, ``estimate``), ``flag:LETTER`` for a protocol
    difference (``key`` names it), or None for plain text."""

    mark: str | None
    text: str
    key: str | None = None


@dataclass(frozen=True)
class Table:
    layout: str
    title: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[Cell, ...], ...]
    footnotes: tuple[Footnote, ...] = ()
    records: int = 0

    def flag_keys(self, row: Sequence[Cell]) -> list[str]:
        """Protocol keys flagged anywhere in ``row`` (for CSV's ``protocol_differs`` column)."""
        letters = {f for c in row for f in c.flags}
        keys = [n.key for n in self.footnotes if n.mark and n.mark.startswith("flag:") and n.mark[5:] in letters]
        return list(dict.fromkeys(keys))


_SYMBOLS = {
    "text": {
        "bound": "<=",
        "paper-objective": "†",
        "estimate": "~",
        "exact-policy": "§",
        "flag": "‡{}",
        "pm": "±",
        "none": "–",
    },
    "latex": {
        "bound": r"$\le$",
        "paper-objective": r"$^{\dagger}$",
        "estimate": r"$\sim$",
        "exact-policy": r"$^{\S}$",
        "flag": r"$^{{\ddagger {}}}$",
        "pm": r"$\pm$",
        "none": "--",
    },
}
_LATEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "†": r"$^{\dagger}$",
    "‡": r"$^{\ddagger}$",
    "…": r"\ldots{}",
    "—": "---",
}


def _latex_escape(text: str) -> str:
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in text)


def _number(x: float, decimals: int) -> str:
    if math.isnan(x) or math.isinf(x):
        return str(x)
    return f"{x:.{decimals}f}"


def _plain(text: str) -> str:
    """Text that came from a record (a label, a name) made safe to print in any format: control
    characters (newlines, tabs, ANSI escapes, ...) are shown as escapes, so that no label can break a
    row, a Markdown table or the terminal."""
    if all(ch.isprintable() for ch in text):
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def _cell_text(cell: Cell, style: str) -> str:
    sym = _SYMBOLS[style]
    flags = sym["flag"].format(",".join(cell.flags)) if cell.flags else ""
    if not cell.numeric:
        text = _plain(cell.text)
        return (_latex_escape(text) if style == "latex" else text) + flags
    if cell.value is None:
        return sym["none"]
    if not math.isfinite(cell.value):  # never dressed as a bound or an estimate, never with a ± beside it
        return f"{cell.value} (not finite)" + flags
    out = _number(cell.value, cell.decimals)
    if cell.kind == "bound":
        out = sym["bound"] + out
    elif cell.kind == "estimate":
        out = sym["estimate"] + out
    elif cell.kind in ("paper-objective", "exact-policy"):
        out = out + sym[cell.kind]
    if cell.quoted:
        pass
    elif cell.stderr is None or not math.isfinite(cell.stderr) or cell.stderr < 0:
        out += f" {sym['pm']} n/a"
    elif not (cell.stderr == 0 and cell.kind in ("exact", "exact-policy")):
        out += f" {sym['pm']} {_number(cell.stderr, cell.decimals)}"
    return out + flags


def _title_text(col: Column, style: str) -> str:
    title = _latex_escape(_plain(col.title)) if style == "latex" else _plain(col.title)
    return title + (_SYMBOLS[style][col.mark] if col.mark else "")


def _footnote_text(note: Footnote, style: str) -> str:
    sym = _SYMBOLS[style]
    text = _latex_escape(_plain(note.text)) if style == "latex" else _plain(note.text)
    if note.mark is None:
        return text
    mark = sym["flag"].format(note.mark[5:]) if note.mark.startswith("flag:") else sym[note.mark]
    return f"{mark} {text}"


def to_rich(table: Table):
    """A rich ``Table`` (cells as ``Text``, so no markup is interpreted)."""

    caption = Text("\n".join(_footnote_text(n, "text") for n in table.footnotes))
    out = RichTable(title=Text(_plain(table.title)), caption=caption, caption_justify="left")
    for col in table.columns:
        out.add_column(
            Text(_title_text(col, "text").replace(", ", "\n")),
            justify="right" if col.numeric else "left",
            no_wrap=col.key not in ("protocol", "case"),
        )
    for row in table.rows:
        out.add_row(*(Text(_cell_text(c, "text")) for c in row))
    return out


def _render_rich(table: Table) -> str:

    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None, force_terminal=False, legacy_windows=False).print(to_rich(table))
    return buf.getvalue()


def _render_md(table: Table) -> str:
    def esc(s: str) -> str:  # a label never closes a cell, opens an HTML tag or entity, or strikes through
        s = re.sub(r"&(?=[A-Za-z#])", "&amp;", s)
        s = re.sub(r"<(?=[A-Za-z/!?])", "&lt;", s)
        return s.replace("|", r"\|").replace("~", r"\~")

    lines = [f"**{esc(_plain(table.title))}**", ""]
    lines.append("| " + " | ".join(esc(_title_text(c, "text")) for c in table.columns) + " |")
    lines.append("|" + "|".join("---:" if c.numeric else ":---" for c in table.columns) + "|")
    for row in table.rows:
        lines.append("| " + " | ".join(esc(_cell_text(c, "text")) for c in row) + " |")
    lines.append("")
    lines += [f"- {esc(_footnote_text(n, 'text'))}" for n in table.footnotes]
    return "\n".join(lines) + "\n"


def _render_latex(table: Table) -> str:
    spec = "".join("r" if c.numeric else "l" for c in table.columns)
    lines = [
        f"% {_plain(table.title)}",
        f"\\begin{{tabular}}{{{spec}}}",
        r"\toprule",
        " & ".join(_title_text(c, "latex") for c in table.columns) + r" \\",
        r"\midrule",
    ]
    lines += [" & ".join(_cell_text(c, "latex") for c in row) + r" \\" for row in table.rows]
    lines += [r"\bottomrule", r"\end{tabular}", r"\par\smallskip", r"{\footnotesize"]
    lines += [_footnote_text(n, "latex") + r"\\" for n in table.footnotes]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _render_csv(table: Table) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    header = []
    for col in table.columns:
        header += [col.key, f"{col.key}_stderr", f"{col.key}_kind"] if col.numeric else [col.key]
    writer.writerow(header + ["protocol_differs"])
    for row in table.rows:
        out = []
        for col, cell in zip(table.columns, row):
            if col.numeric:
                out += [
                    "" if cell.value is None else repr(cell.value),
                    "" if cell.stderr is None or cell.value is None else repr(cell.stderr),
                    cell.kind or "",
                ]
            else:
                out.append(_plain(cell.text or ""))
        writer.writerow(out + [";".join(table.flag_keys(row))])
    return buf.getvalue()


def render(table: Table, fmt: str) -> str:
    """``table`` as text: ``rich`` (plain text of the rich table), ``md``, ``latex`` or ``csv``."""
    renderers = {"rich": _render_rich, "md": _render_md, "latex": _render_latex, "csv": _render_csv}
    if fmt not in renderers:
        raise PrimebenchError(f"unknown table format {fmt!r}", fix=f"use one of {', '.join(FORMATS)}")
    return renderers[fmt](table)


__all__ = ["Cell", "Column", "FORMATS", "Footnote", "Table", "render", "to_rich"]
