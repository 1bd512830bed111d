"""The report of ``primebench reproduce quickstart``: its sections and its ``tables.md`` and plots."""

from __future__ import annotations

from pathlib import Path

from harness.audit.precision import plot_record
from harness.io import atomic_write_text
from harness.reproduce.report.plots import plot_genppl, plot_nll, plot_training
from harness.reproduce.report.sections import Section, sections_html, sections_markdown
from harness.views.gumbel import render_gumbel
from harness.views.idle import render_idle


def quickstart_sections(result) -> list[Section]:
    """The quickstart's tables, in the order they print, from ``result`` (the run's
    :class:`harness.reproduce.quickstart.QuickstartRecords`)."""

    return [
        Section("Perplexity on the validation split", result.ppl, "ppl"),
        Section("Generative perplexity, float32 and float64 draws", result.genppl, "genppl"),
        Section("Zero-shot on the local tasks (lm-eval)", result.zeroshot, "zeroshot"),
        Section("Idle-step audit", [result.idle_paper, result.idle_here], view=render_idle),
        Section("Bound audit on enumerable toy models", [result.bound], "bound"),
        Section(
            "Precision audit of the quickstart MDLM (C = 1000)",
            [result.precision],
            "precision",
            note="MDLM's joint draw in float32 and float64, same seed. At a 1000-token vocabulary a token's "
            "share of a step stays far above 2^-24, so the two dtypes should agree within their standard "
            "errors; `primebench reproduce precision` shows the effect at GPT-2's vocabulary.",
        ),
        Section("Gumbel audit: MDLM's first ancestral step at V = 50257", [result.gumbel], view=render_gumbel),
        Section("Digits: bits per dimension", [r for r in result.images if r["evaluation"] == "ppl"], "ppl"),
        Section(
            "Digits: FID in a digits classifier's features",
            [r for r in result.images if r["evaluation"] == "fid"],
            "fid",
        ),
    ]


def write_report(result) -> list[Path]:
    """Write ``tables.md``, the PNG plots (``ppl``, ``genppl``, ``precision`` and, when a checkpoint has
    a training log, ``training``) and ``report.html`` (the same tables and plots as one page) of a
    quickstart run into ``result.out``, next to its records.

    ``result``: the run's :class:`harness.reproduce.quickstart.QuickstartRecords`. Returns the paths written."""

    out = result.out
    preamble = (
        "Every table is a view of the JSON records in `records/` (`primebench table records/NAME.json`). "
        "`<=` marks a valid upper bound, `†` Prime's paper objective (not a bound), `~` an estimate; "
        "`±` is one standard error."
    )
    sections = quickstart_sections(result)
    markdown = sections_markdown("primebench reproduce quickstart", sections, preamble)
    paths = [atomic_write_text(out / "tables.md", markdown)]
    paths.append(plot_nll(result.ppl, out / "ppl.png", title="Perplexity: exact (ARM), bounds and paper objective"))
    paths.append(plot_genppl(result.genppl, out / "genppl.png", title="Gen PPL against entropy, float32 vs float64"))
    paths.append(plot_record(result.precision, out / "precision.png"))
    training = plot_training(
        result.ppl, out / "training.png", title="Validation loss during training, against the unigram reference"
    )
    paths += [training] if training else []
    page = sections_html(f"primebench reproduce quickstart ({out.name})", sections, preamble, sorted(out.glob("*.png")))
    return paths + [atomic_write_text(out / "report.html", page)]
