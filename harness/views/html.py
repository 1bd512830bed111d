"""Tables and records as one static, self-contained HTML page (no server, no CDN, no external file):
what ``primebench report --html`` and the reproduce jobs' ``report.html`` are.

A table is rendered with the same cell text as the other formats (``<=`` a bound, ``†`` a paper
objective, ``~`` an estimate, ``§`` exact under a policy, ``±`` one standard error, ``‡`` a protocol
difference), each numeric cell also carrying its kind as a class, so the page colours them and a
script can read them. Every row that comes from records links to them: each record is listed at the
end of the page with its metrics, protocol and provenance behind a click (``<details>``). Two
selects filter rows and records by family and by dataset (a few lines of inline script; the page
reads as a document without it). Plots are embedded as ``data:`` URIs.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.views.table import Table, _cell_text, _footnote_text, _title_text

LEGEND = (
    ("exact", "plain", "an exact likelihood (the ARM's, and the references')"),
    ("bound", "<=", "a valid upper bound on the NLL (a lower bound on the likelihood)"),
    ("paper-objective", "†", "MDM-Prime's published objective: not a bound"),
    ("estimate", "~", "an estimate (Gen PPL, entropy, FID)"),
    ("exact-policy", "§", "exact under an unmasking policy (DUEL): the likelihood of that sampler"),
)

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2rem auto;max-width:78rem;
padding:0 1rem;color:#1b1b1b;line-height:1.45}
h1{font-size:1.6rem}h2{font-size:1.25rem;margin-top:2.2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.6rem 0;font-size:.9rem}
th,td{border:1px solid #d5d5d5;padding:.25rem .5rem;vertical-align:top}
th{background:#f3f3f3;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.bound{color:#1d4e89}td.paper-objective{color:#8a1c1c}td.estimate{color:#5b4a00}td.exact-policy{color:#3d6b21}
tr.reference td{background:#fafafa;font-style:italic}
.notes{font-size:.82rem;color:#444;margin:.2rem 0 1rem 0}.notes p{margin:.1rem 0}
.legend td:first-child{text-align:center;font-weight:bold}
pre{background:#f7f7f7;padding:.6rem;overflow:auto;font-size:.8rem}
details{margin:.25rem 0}summary{cursor:pointer}
.filters{position:sticky;top:0;background:#fff;padding:.5rem 0;border-bottom:1px solid #eee;z-index:1}
.record{border-left:3px solid #ccc;padding-left:.6rem;margin:.6rem 0}
img{max-width:100%;border:1px solid #eee}
a.rec{font-size:.75rem;margin-left:.3rem}
"""

_SCRIPT = """
function applyFilters(){
  var fam=document.getElementById('family').value, ds=document.getElementById('dataset').value;
  document.querySelectorAll('[data-family]').forEach(function(el){
    var okF=!fam||(' '+el.dataset.family+' ').indexOf(' '+fam+' ')>=0;
    var okD=!ds||(' '+el.dataset.dataset+' ').indexOf(' '+ds+' ')>=0;
    el.style.display=(okF&&okD)?'':'none';
  });
}
document.getElementById('family').addEventListener('change',applyFilters);
document.getElementById('dataset').addEventListener('change',applyFilters);
"""


@dataclass
class HtmlSection:
    """One section of the page: a ``title``, a ``note``, and either a ``table`` (with the ``records``
    it was built from) or ``text`` (a record's own printed view)."""

    title: str
    note: str = ""
    table: Table | None = None
    text: str | None = None
    records: Sequence[dict[str, Any]] = field(default_factory=tuple)


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def record_dataset(record: dict[str, Any]) -> str:
    """The dataset a record was measured on (``protocol.data``, or its tasks), "" when none is named."""
    protocol = record.get("protocol") or {}
    data = protocol.get("data") or protocol.get("dataset")
    if data:
        return str(data)
    tasks = protocol.get("tasks")
    if isinstance(tasks, (list, tuple)):
        return " ".join(map(str, tasks))
    return ""


def record_family(record: dict[str, Any]) -> str:
    return str((record.get("model") or {}).get("family") or "")


def _row_records(label: str, records: Sequence[dict[str, Any]], ids: dict[int, str]) -> list[dict[str, Any]]:
    """The records a table row shows: those whose model label (or name) the row's first cell begins with,
    the longest match winning."""
    best, length = [], 0
    for record in records:
        model = record.get("model") or {}
        for key in (model.get("label"), model.get("name")):
            if key and label.startswith(str(key)) and len(str(key)) >= length:
                if len(str(key)) > length:
                    best, length = [], len(str(key))
                best.append(record)
    if len(best) > 1:  # one label, several training seeds: the row names its seed ("(seed 1)"), else seed 0
        marked = re.search(r"\(seed (\d+)\)", label)
        want = int(marked.group(1)) if marked else 0
        best = [r for r in best if _seed(r) == want] or best
    return [r for r in best if id(r) in ids]


def _seed(record: dict[str, Any]) -> int:
    config = (record.get("model") or {}).get("config")
    seed = config.get("seed") if isinstance(config, dict) else None
    return int(seed) if isinstance(seed, int) else 0


def table_html(table: Table, records: Sequence[dict[str, Any]] = (), ids: dict[int, str] | None = None) -> str:
    """``table`` as an HTML ``<table>`` and its footnotes; rows built from ``records`` link to them
    (``ids``: id(record) -> anchor) and carry their families and datasets for the filters."""
    ids = ids or {}
    out = ['<table class="result">', "<thead><tr>"]
    out += [f"<th>{_e(_title_text(col, 'text'))}</th>" for col in table.columns]
    out.append("</tr></thead><tbody>")
    for row in table.rows:
        label = _cell_text(row[0], "text") if row else ""
        linked = _row_records(label, records, ids)
        attrs = ""
        if linked:
            fams = " ".join(sorted({record_family(r) for r in linked}))
            sets = " ".join(sorted({record_dataset(r) for r in linked if record_dataset(r)}))
            attrs = f' data-family="{_e(fams)}" data-dataset="{_e(sets)}"'
        elif records:
            attrs = ' class="reference"'
        cells = []
        for i, cell in enumerate(row):
            classes = ["num", cell.kind or ""] if cell.numeric else []
            body = _e(_cell_text(cell, "text"))
            if i == 0 and linked:
                body += "".join(f'<a class="rec" href="#{ids[id(r)]}">[record]</a>' for r in linked)
            cls = f' class="{" ".join(c for c in classes if c)}"' if classes else ""
            cells.append(f"<td{cls}>{body}</td>")
        out.append(f"<tr{attrs}>{''.join(cells)}</tr>")
    out.append("</tbody></table>")
    if table.footnotes:
        out.append('<div class="notes">')
        out += [f"<p>{_e(_footnote_text(n, 'text'))}</p>" for n in table.footnotes]
        out.append("</div>")
    return "\n".join(out)


def _details(summary: str, value: Any) -> str:
    body = _e(json.dumps(value, indent=2, default=str))
    return f"<details><summary>{_e(summary)}</summary><pre>{body}</pre></details>"


def _record_html(record: dict[str, Any], anchor: str) -> str:
    model = record.get("model") or {}
    metrics = record.get("metrics") or {}
    head = f"{record.get('evaluation', '?')}: {model.get('label') or model.get('name') or '?'}"
    parts = []
    for name, metric in list(metrics.items())[:6]:
        if isinstance(metric, dict) and isinstance(metric.get("value"), (int, float)):
            err = metric.get("stderr")
            pm = f" ± {err:.4g}" if isinstance(err, (int, float)) else ""
            parts.append(f"{name} = {metric['value']:.4g}{pm} ({metric.get('kind', '?')})")
    blocks = []
    for key in ("model", "protocol", "provenance"):
        value = record.get(key)
        if key == "model" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k != "config"} | {"config": "(below)"}
        blocks.append(_details(key, value))
    if model.get("config") is not None:
        blocks.append(_details("config", model["config"]))
    return (
        f'<div class="record" id="{anchor}" data-family="{_e(record_family(record))}" '
        f'data-dataset="{_e(record_dataset(record))}"><strong>{_e(head)}</strong>'
        f"<div>{_e('; '.join(parts))}</div>{''.join(blocks)}</div>"
    )


def _image_html(path: Path) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return (
        f'<figure><img alt="{_e(Path(path).stem)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{_e(Path(path).name)}</figcaption></figure>"
    )


def page_html(
    title: str,
    sections: Sequence[HtmlSection],
    *,
    preamble: str = "",
    images: Sequence[Path] = (),
) -> str:
    """The whole page: title, legend, filters, the sections, the plots, and every record of the sections."""
    records: list[dict[str, Any]] = []
    for s in sections:
        for r in s.records:
            if all(r is not other for other in records):
                records.append(r)
    ids = {id(r): f"record-{i + 1}" for i, r in enumerate(records)}
    families = sorted({record_family(r) for r in records} - {""})
    datasets = sorted({d for r in records for d in record_dataset(r).split(" ") if d})
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
    ]
    if preamble:
        out.append(f"<p>{_e(preamble)}</p>")
    out.append('<table class="legend"><thead><tr><th>mark</th><th>kind</th><th>meaning</th></tr></thead><tbody>')
    out += [f"<tr><td>{_e(m)}</td><td>{_e(k)}</td><td>{_e(t)}</td></tr>" for k, m, t in LEGEND]
    out.append(
        "<tr><td>±</td><td>stderr</td><td>one standard error (n/a: not estimable)</td></tr>"
        "<tr><td>‡</td><td>protocol</td><td>this row differs from the others in the setting its footnote "
        "names</td></tr><tr><td><i>italic</i></td><td>reference</td><td>a reference row (unigram, bigram, "
        "a published number), not a model of these records</td></tr></tbody></table>"
    )
    out.append('<div class="filters">Family: <select id="family"><option value="">all</option>')
    out += [f'<option value="{_e(f)}">{_e(f)}</option>' for f in families]
    out.append('</select> Dataset: <select id="dataset"><option value="">all</option>')
    out += [f'<option value="{_e(d)}">{_e(d)}</option>' for d in datasets]
    out.append("</select></div>")
    for s in sections:
        out.append(f"<section><h2>{_e(s.title)}</h2>")
        if s.note:
            out.append(f"<p>{_e(s.note)}</p>")
        if s.table is not None:
            out.append(table_html(s.table, s.records, ids))
        elif s.text is not None:
            out.append(f"<pre>{_e(s.text)}</pre>")
        out.append("</section>")
    if images:
        out.append("<section><h2>Plots</h2>")
        out += [_image_html(p) for p in images]
        out.append("</section>")
    out.append(f"<section><h2>Records ({len(records)})</h2>")
    out += [_record_html(r, ids[id(r)]) for r in records]
    out.append("</section>")
    out.append(f"<script>{_SCRIPT}</script></body></html>")
    return "\n".join(out) + "\n"


__all__ = ["HtmlSection", "LEGEND", "page_html", "record_dataset", "record_family", "table_html"]
