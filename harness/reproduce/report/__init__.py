"""What a reproduce job shows: its tables on stdout, ``tables.md`` and PNG plots, all views of records.

A job's report is a list of :class:`Section`: a title and either records with a table layout of
:mod:`harness.views` (rendered rich on the terminal, Markdown in ``tables.md``), a prebuilt table, or a
record with a rich view of its own (idle, Gumbel; its text goes into ``tables.md`` as a code block).
The plots are drawn from the same records, so ``primebench table`` and the files always agree.

* :mod:`~harness.reproduce.report.sections`: :class:`Section`, printing and Markdown (shared);
* :mod:`~harness.reproduce.report.plots`: the NLL, Gen PPL and training plots (shared);
* :mod:`~harness.reproduce.report.quickstart`, :mod:`~harness.reproduce.report.small`,
  :mod:`~harness.reproduce.report.precision`: each job's tables, sections and files;
* :mod:`~harness.reproduce.report.published`: the paper-scale presets beside the published numbers.

Every public name is importable from this package.
"""

from __future__ import annotations

from harness.reproduce.report.plots import plot_genppl, plot_nll, plot_training, training_curves
from harness.reproduce.report.precision import (
    drop_table,
    plot_precision_comparison,
    precision_sections,
    precision_table,
    write_precision_report,
)
from harness.reproduce.report.published import published_table, write_preset_report
from harness.reproduce.report.quickstart import quickstart_sections, write_report
from harness.reproduce.report.sections import Section, print_sections, sections_markdown
from harness.reproduce.report.small import gap_table, idle_table, small_sections, write_small_report

__all__ = [
    "plot_training",
    "training_curves",
    "Section",
    "drop_table",
    "gap_table",
    "published_table",
    "write_preset_report",
    "idle_table",
    "small_sections",
    "write_small_report",
    "plot_precision_comparison",
    "precision_sections",
    "precision_table",
    "write_precision_report",
    "plot_genppl",
    "plot_nll",
    "print_sections",
    "quickstart_sections",
    "sections_markdown",
    "write_report",
]
