"""The report of ``primebench reproduce small``: the idle-step and paper-objective-gap tables it adds
to the shared ones, its sections, and its ``tables.md`` and plots."""

from __future__ import annotations

from pathlib import Path

from harness.io import atomic_write_text
from harness.reproduce.report.plots import plot_genppl, plot_nll, plot_training, record_label, record_metric
from harness.reproduce.report.sections import Section, sections_html, sections_markdown
from harness.reproduce.seeds import seed_difference_table, seed_table
from harness.views.table import Cell, Column, Footnote, Table


def idle_table(genppl_records):
    """Idle steps measured on the real models' samples (the cached two-stage sampler calls the denoiser
    once per non-idle step, so ISR = 1 - NFE / T) beside the analytic ISR (1 - 1/T)^(L ell) of one sequence.

    ``genppl_records``: Gen PPL records; those of the cached ancestral sampler that measured NFE give a row
    each. Returns a :class:`harness.views.table.Table`."""

    rows = []
    for r in genppl_records:
        p = r.get("protocol", {})
        nfe = r.get("metrics", {}).get("nfe")
        if p.get("sampler") != "ancestral" or not p.get("cache") or nfe is None or not p.get("steps"):
            continue
        T, L, ell = int(p["steps"]), int(p["seq_len"]), int(p.get("ell") or 1)
        block = p.get("block_size")  # BD3-LM: T steps in each block of `block` tokens, one block after another
        span, total = (L, T) if not block else (int(block), T * -(-L // int(block)))
        se = nfe.get("stderr")
        rows.append(
            (
                Cell(text=record_label(r)),
                Cell(text=str(ell)),
                Cell(text=str(T) if not block else f"{T} per block of {block} ({total} in all)"),
                Cell(nfe["value"], se, "estimate", decimals=1),
                Cell(
                    100 * (1 - nfe["value"] / total), None if se is None else 100 * se / total, "estimate", decimals=2
                ),
                Cell(100 * (1 - 1 / T) ** (span * ell), 0.0, "exact", decimals=2),
            )
        )
    columns = (
        Column("model", "model", False),
        Column("ell", "ell", False),
        Column("steps", "steps T", False),
        Column("nfe", "NFE per sample"),
        Column("isr", "measured ISR %"),
        Column("analytic", "analytic ISR %"),
    )
    notes = (
        Footnote("estimate", "estimate (sampled)"),
        Footnote(
            None,
            "measured on the Gen-PPL samples (two-stage draw, cache on, T = L): the denoiser is called "
            "only at steps that reveal something, so NFE = T - idle steps (minus at most one call at "
            "the end); analytic: (1 - 1/T)^(L ell) for one sequence, linear schedule; a block sampler "
            "(BD3-LM) runs T steps per block of n tokens: (1 - 1/T)^n, the same in every block.",
        ),
    )
    return Table("idle", "Idle steps measured on the trained models", columns, tuple(rows), notes, len(rows))


def gap_table(ppl_records):
    """Prime's paper objective minus its valid bound, per ell (nats/token), with a conservative standard error.

    ``ppl_records``: perplexity records; those with both ``nll`` and ``nll_token_joint`` (Prime's) give a
    row each. Returns a :class:`harness.views.table.Table`."""

    rows = []
    for r in ppl_records:
        bound, joint = record_metric(r, "nll"), record_metric(r, "nll_token_joint")
        if bound is None or joint is None:
            continue
        ell = r.get("protocol", {}).get("ell")
        rows.append(
            (
                Cell(text=record_label(r)),
                Cell(text=str(ell)),
                Cell(bound[0], bound[1], "bound"),
                Cell(joint[0], joint[1], "paper-objective"),
                Cell(bound[0] - joint[0], (bound[1] ** 2 + joint[1] ** 2) ** 0.5, "estimate"),
            )
        )
    columns = (
        Column("model", "model", False),
        Column("ell", "ell", False),
        Column("bound", "valid bound (nats/token)"),
        Column("objective", "paper objective (nats/token)", mark="paper-objective"),
        Column("gap", "bound - objective"),
    )
    notes = (
        Footnote("bound", "upper bound (the true value is at most this)"),
        Footnote("paper-objective", "paper objective, not a bound"),
        Footnote(
            None,
            "gap ± sqrt(se_bound^2 + se_objective^2): conservative, since both share every corruption. "
            "A positive gap is how far Prime's published objective sits below a number that is a valid "
            "bound for the same model and data.",
        ),
    )
    return Table("ppl", "MDM-Prime: paper objective against the valid bound", columns, tuple(rows), notes, len(rows))


def small_sections(result) -> list[Section]:
    """The small run's tables, in the order they print, from ``result`` (the run's
    :class:`harness.reproduce.small.SmallRecords`); the seed tables only when it trained several seeds."""

    several = result.seeds > 1
    return [
        Section("Perplexity on the validation split", result.ppl, "ppl"),
        Section("Perplexity over training seeds", result.ppl if several else (), table=seed_table(result.ppl)),
        Section(
            "Differences between models against the seed spread",
            result.ppl if several else (),
            table=seed_difference_table(result.ppl),
        ),
        Section("Prime: paper objective against the valid bound", result.ppl, table=gap_table(result.ppl)),
        Section("Generative perplexity, float64 draws", result.genppl, "genppl"),
        Section("Zero-shot on the local tasks (lm-eval)", result.zeroshot, "zeroshot"),
        Section("Idle steps measured on the trained models", result.genppl, table=idle_table(result.genppl)),
    ]


def write_small_report(result) -> list[Path]:
    """Write ``tables.md``, the PNG plots (``ppl``, ``genppl`` and, when a checkpoint has a training log,
    ``training``) and ``report.html`` (the same tables and the plots as one page, every record a click
    away) of a ``reproduce small`` run into ``result.out``, next to its records.

    ``result``: the run's :class:`harness.reproduce.small.SmallRecords`. Returns the paths written."""

    out = result.out
    preamble = (
        "Every table is a view of the JSON records in `records/`. `<=` marks a valid upper bound, `†` Prime's "
        "paper objective (not a bound), `~` an estimate; `±` is one standard error."
    )
    sections = small_sections(result)
    paths = [
        atomic_write_text(out / "tables.md", sections_markdown("primebench reproduce small", sections, preamble)),
        plot_nll(result.ppl, out / "ppl.png", title="Perplexity: exact (ARM), bounds and paper objective"),
        plot_genppl(result.genppl, out / "genppl.png", title="Gen PPL against entropy, float64"),
    ] + [
        p
        for p in [
            plot_training(
                result.ppl, out / "training.png", title="Validation loss during training, against the unigram reference"
            )
        ]
        if p
    ]
    page = sections_html(f"primebench reproduce small ({out.name})", sections, preamble, sorted(out.glob("*.png")))
    return paths + [atomic_write_text(out / "report.html", page)]
