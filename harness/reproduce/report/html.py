"""``primebench report RECORDS... --html OUT``: a static, self-contained page from result records.

A folder written by a reproduce job (``results/small``, ``results/quickstart``: ``tables.md`` beside
``records/``) gets that job's own sections, the same tables as its ``tables.md``, and its PNG plots.
Any other set of records gets one table per evaluation, in the layout named after it. Every page has
the legend of kinds, filters by family and dataset, and every record's protocol and provenance
behind its rows (:mod:`harness.views.html`).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from harness.errors import PrimebenchError
from harness.io import atomic_write_text, read_json
from harness.records import training_seed
from harness.reproduce.report.quickstart import quickstart_sections
from harness.reproduce.report.sections import Section, sections_html
from harness.reproduce.report.small import small_sections
from harness.views.layouts import LAYOUTS

JOB_TITLES = {"small": "# primebench reproduce small", "quickstart": "# primebench reproduce quickstart"}
PREAMBLE = (
    "Every table is a view of the JSON records listed at the end of the page. <= marks a valid upper bound, "
    "† Prime's paper objective (not a bound), ~ an estimate; ± is one standard error."
)


def job_of(folder: Path) -> str | None:
    """``small`` or ``quickstart`` for a folder a reproduce job wrote (its ``tables.md`` title), else None."""
    tables = folder / "tables.md"
    if not (folder / "records").is_dir() or not tables.is_file():
        return None
    first = tables.read_text(encoding="utf-8").splitlines()[:1]
    return next((job for job, title in JOB_TITLES.items() if first and first[0].strip() == title), None)


def _records(folder: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: read_json(p, what="record", fix="restore the file") for p in sorted(folder.glob("*.json"))}


def _order(record: dict[str, Any]) -> tuple:
    model = record.get("model") or {}
    return (model.get("order", 99), str(model.get("name")), training_seed(model))


def small_result(folder: Path):
    """The ``reproduce small`` result of a folder, rebuilt from its ``records/`` as the job orders it."""
    # deferred: the job module imports the training stack
    from harness.reproduce.small import SmallRecords

    by_kind: dict[str, list] = defaultdict(list)
    for record in _records(folder / "records").values():
        by_kind[str(record.get("evaluation"))].append(record)
    ppl, genppl, zs = (sorted(by_kind[k], key=_order) for k in ("ppl", "genppl", "zeroshot"))
    seeds = len({training_seed(r["model"]) for r in ppl})
    return SmallRecords(out=folder, ppl=ppl, genppl=genppl, zeroshot=zs, seeds=max(seeds, 1))


#: the quickstart's single records, by the file names its stages give them
QUICKSTART_FILES = {
    "idle_paper": "idle-paper",
    "idle_here": "idle-quickstart",
    "bound": "bound-toy",
    "precision": "precision-mdlm",
    "gumbel": "gumbel-mdlm-step",
}


def quickstart_result(folder: Path):
    """The ``reproduce quickstart`` result of a folder, rebuilt from its ``records/`` by file name."""
    # deferred: the job module imports the training stack
    from harness.reproduce.quickstart import QuickstartRecords

    records = _records(folder / "records")
    missing = [name for name in QUICKSTART_FILES.values() if name not in records]
    if missing:
        raise PrimebenchError(
            f"{folder / 'records'} lacks {', '.join(n + '.json' for n in missing)} of a quickstart run",
            fix="pass the records themselves (primebench report FOLDER/records/*.json --html OUT)",
        )

    def group(prefix: str) -> list:
        return sorted((r for name, r in records.items() if name.startswith(prefix)), key=_order)

    images = sorted(group("bpd-digits-") + group("fid-digits-"), key=lambda r: str(r.get("evaluation")) != "ppl")
    return QuickstartRecords(
        records=folder / "records",
        ppl=group("ppl-"),
        genppl=group("genppl-"),
        zeroshot=group("zeroshot-"),
        images=images,
        **{field: records[name] for field, name in QUICKSTART_FILES.items()},
    )


def job_sections(job: str, folder: Path) -> list[Section]:
    """The sections a job's report prints, over the records of its folder."""
    if job == "small":
        return small_sections(small_result(folder))
    return quickstart_sections(quickstart_result(folder))


def plain_sections(records: list[dict[str, Any]]) -> list[Section]:
    """One section per evaluation that has a layout, in the layouts' order; records of other kinds are refused."""
    by_kind: dict[str, list] = defaultdict(list)
    for record in records:
        by_kind[str(record.get("evaluation"))].append(record)
    unknown = sorted(k for k in by_kind if k not in LAYOUTS)
    if unknown:
        raise PrimebenchError(
            f"no table layout takes records of {', '.join(map(repr, unknown))}",
            fix=f"pass records of {', '.join(LAYOUTS)}, or a folder a reproduce job wrote",
        )
    return [Section(f"{name}", sorted(by_kind[name], key=_order), name) for name in LAYOUTS if by_kind.get(name)]


def write_html_report(sources: list[str], out: Path, *, title: str | None = None, skip=None) -> Path:
    """Write the page for ``sources`` (record files, folders of records, or one folder a job wrote) to ``out``."""
    # deferred: loading records imports the views' readers
    from harness.views.records_io import load_record_files

    folder = Path(sources[0]) if len(sources) == 1 else None
    job = job_of(folder) if folder is not None and folder.is_dir() else None
    if job is not None:
        sections = job_sections(job, folder)
        images = sorted(folder.glob("*.png"))
        title = title or f"primebench reproduce {job} ({folder.name})"
    else:
        records = [record for _, record in load_record_files(sources, skip=skip)]
        sections, images = plain_sections(records), []
        title = title or "primebench records"
    return atomic_write_text(out, sections_html(title, sections, PREAMBLE, images=images))


__all__ = ["job_of", "job_sections", "plain_sections", "quickstart_result", "small_result", "write_html_report"]
