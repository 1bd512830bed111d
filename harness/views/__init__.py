"""Every human view of results: paper-style tables of records, and what each command prints.

Tables are views of records (``primebench-record/1``), built in three plain steps:
:func:`load_records` reads record files or folders; :func:`build_table` turns records into a
:class:`Table` for one layout (``ppl``, ``zeroshot``, ``genppl``, ``precision``, ``idle``, ``fid``,
``bound``); :func:`render` writes it as rich text, Markdown, LaTeX or CSV. The ``render_*``
functions print one record (or audit) the way its command does.

Modules: ``table`` (the model and its formats), ``records_io`` (loading), ``entries`` and
``footnotes`` (what every layout shares), ``generic`` (the one-row-per-entry table), one module per
evaluation (``ppl``, ``zeroshot``, ``genppl``, ``precision``, ``idle``, ``fid``, ``bound``,
``gumbel``, ``corpus``) with its layout and its command's view, and ``layouts`` (the registry).
Nothing here imports torch, so ``primebench table`` stays light.
"""

from __future__ import annotations

from harness.views.bound import render_bound
from harness.views.corpus import render_corpus_info
from harness.views.fid import render_fid
from harness.views.genppl import render_genppl
from harness.views.gumbel import render_gumbel
from harness.views.idle import render_idle
from harness.views.layouts import LAYOUTS, build_table
from harness.views.ppl import render_ppl
from harness.views.precision import render_precision
from harness.views.records_io import load_records
from harness.views.table import FORMATS, Cell, Column, Footnote, Table, render, to_rich
from harness.views.zeroshot import render_zeroshot

__all__ = [
    "Cell",
    "Column",
    "FORMATS",
    "Footnote",
    "LAYOUTS",
    "Table",
    "build_table",
    "load_records",
    "render",
    "render_bound",
    "render_corpus_info",
    "render_fid",
    "render_genppl",
    "render_gumbel",
    "render_idle",
    "render_ppl",
    "render_precision",
    "render_zeroshot",
    "to_rich",
]
