"""Footnotes every layout shares: protocol differences between rows (flagged ``‡a``), family-fixed
conventions (stated once), the legend of marks, units, the shared title and the record count.

Protocol keys whose values differ between rows are flagged instead of being averaged away. Keys
that belong to the model (``ell``, ``base``, ``carry_over``, the schedule), to the run (checkpoint
paths, device, batch size, wall time) or that are derived from other keys are not compared; keys
fixed by the model family (e.g. which tokens a row's NLL counts) are compared only between rows of
the same family and listed in an information footnote otherwise.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from harness.views.entries import LEGEND, Entry, short
from harness.views.table import Cell, Footnote

# Protocol keys (last dotted component) never compared: model-specific, run-specific or derived (counts).
IGNORED_LEAVES = frozenset(
    {
        "ell",
        "base",
        "carry_over",
        "schedule",
        "family",
        "time_conditioning",
        "vocab_size",
        "bos_id",
        "eos_id",
        "pad_id",
        "checkpoint",
        "checkpoint_sha256",
        "samples_file",
        "device",
        "batch_size",
        "world_size",
        "wall_s",
        "created",
        "command",
        "seeded",
        "estimators",
        "judge_description",
        "separators_mapped",
        "judge_truncated_samples",
    }
)
# Keys fixed by the model family: compared only between rows of the same family.
FAMILY_LEAVES = frozenset(
    {"token_convention", "stderr_method", "noise_removal", "cache", "cache_exact", "prefix_len", "time_sampler"}
)


def differences(groups: list[tuple[str, list[Entry]]], ignored: frozenset[str], axes: Sequence[str]):
    """Protocol keys that differ within each group. Returns (footnotes, {(group, label): letters}).

    None means "does not apply to this row" and is not compared. The flagged rows are those whose
    value differs from the most common one (all of them on a tie)."""
    notes: list[Footnote] = []
    flags: dict[tuple[str, str], list[str]] = {}
    for group, items in groups:
        keys = sorted({k for e in items for k in e.protocol})
        for key in keys:
            leaf = key.rsplit(".", 1)[-1]
            if key in ignored or key in axes or not IGNORED_LEAVES.isdisjoint(key.split(".")):
                continue
            subsets = (
                [[e for e in items if e.family == f] for f in dict.fromkeys(e.family for e in items)]
                if leaf in FAMILY_LEAVES
                else [items]
            )
            for subset in subsets:
                present = [(e.label, e.protocol[key]) for e in subset if e.protocol.get(key) is not None]
                canon = [json.dumps(v, sort_keys=True, default=str) for _, v in present]
                counts = Counter(canon)
                if len(counts) < 2:
                    continue
                top = counts.most_common()
                tie = top[0][1] == top[1][1]
                letter = _letter(len(notes))
                where = f" ({group})" if group else ""
                values = ", ".join(f"{label}={short(v)}" for label, v in present)
                notes.append(
                    Footnote(
                        f"flag:{letter}",
                        f"rows differ in {key}{where}: {values}",
                        key=f"{group}:{key}" if group else key,
                    )
                )
                for (label, _), c in zip(present, canon):
                    if tie or c != top[0][0]:
                        flags.setdefault((group, label), []).append(letter)
    return notes, flags


def _letter(i: int) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return letters[i] if i < 26 else letters[i // 26 - 1] + letters[i % 26]


def family_info(items: list[Entry]) -> list[Footnote]:
    """Family-fixed conventions that differ between families (not flagged; stated once), in the
    records' own words (their protocol values)."""
    out = []
    for leaf in sorted(FAMILY_LEAVES):
        by_value: dict[str, list[str]] = {}
        for e in items:
            for key, v in e.protocol.items():
                if key.rsplit(".", 1)[-1] == leaf and v is not None:
                    fams = by_value.setdefault(str(v), [])
                    if e.family not in fams:
                        fams.append(e.family)
        if len(by_value) > 1:
            out.append(
                Footnote(
                    None,
                    f"{leaf} (by family, not flagged): "
                    + "; ".join(f"{'/'.join(f)}: {v}" for v, f in by_value.items()),
                )
            )
    return out


def legend(rows: Sequence[Sequence[Cell]]) -> list[Footnote]:
    """What the marks of the kinds present in ``rows`` mean, and what ± and n/a mean."""
    kinds = {c.kind for r in rows for c in r if c.numeric and c.value is not None}
    notes = [Footnote(k, LEGEND[k]) for k in LEGEND if k in kinds]
    text = "exact numbers are plain" if "exact" in kinds else ""
    if any(c.numeric and c.value is not None and c.stderr is None for r in rows for c in r):
        text += ("; " if text else "") + "n/a: standard error not estimable (e.g. one Monte-Carlo sample)"
    return notes + [Footnote(None, ("± one standard error; " + text).rstrip("; "))]


def units_note(items: list[Entry], names: Sequence[str]) -> Footnote | None:
    """The units of each metric in ``names`` (flagged when rows disagree); None without metrics."""
    parts = []
    for name in names:
        units = list(dict.fromkeys(str(e.metrics[name].get("units")) for e in items if name in e.metrics))
        if units:
            parts.append(f"{name}: {' | '.join(units)}{' (differ between rows)' if len(units) > 1 else ''}")
    return Footnote(None, "units: " + "; ".join(parts)) if parts else None


def shared_title(base: str, items: list[Entry], keys: Sequence[str]) -> str:
    """``base`` plus the protocol ``keys`` whose value every row shares (``Perplexity — data X``)."""
    shared = []
    for key in keys:
        values = {json.dumps(e.protocol.get(key), default=str) for e in items}
        if len(values) == 1 and items[0].protocol.get(key) is not None:
            shared.append(f"{key} {short(items[0].protocol[key], 40)}")
    return base + (" — " + ", ".join(shared) if shared else "")


def count_note(n_records: int, evaluations: set[str]) -> Footnote:
    return Footnote(
        None,
        f"{n_records} record{'s' if n_records != 1 else ''} "
        f"({', '.join(sorted(evaluations))}); tables are views of these records",
    )


def apply_flags(rows: list[list[Cell]], targets: list[list[tuple[int, str, str]]], flags) -> None:
    """``targets[r]``: (column index, group, label) of the cells in row r that carry that row's flags."""
    for r, cells in enumerate(rows):
        for col, group, label in targets[r]:
            letters = flags.get((group, label))
            if letters:
                cells[col] = replace(cells[col], flags=tuple(letters))


__all__ = [
    "FAMILY_LEAVES",
    "IGNORED_LEAVES",
    "apply_flags",
    "count_note",
    "differences",
    "family_info",
    "legend",
    "shared_title",
    "units_note",
]
