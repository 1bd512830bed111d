"""The HTML report (``primebench report --html``): one self-contained page with every table of a job's
``tables.md``, the legend of kinds, the plots embedded, each record's protocol and provenance behind
its rows, and filters by family and dataset; opened in headless Chromium where it is installed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.views.html import table_html
from harness.views.table import Cell, Column, Footnote, Table

ROOT = Path(__file__).resolve().parents[3]
JOBS = ("small", "quickstart")


def _titles(markdown: str) -> list[str]:
    return [line[3:].strip() for line in markdown.splitlines() if line.startswith("## ")]


def _record(name: str, family: str, value: float, *, label: str | None = None, data: str = "wiki:validation"):
    return {
        "evaluation": "ppl",
        "model": {"name": name, "family": family, "label": label or name, "config": {"seed": 0}},
        "metrics": {"nll": {"value": value, "stderr": 0.1, "kind": "bound", "units": "nats/token"}},
        "protocol": {"data": data},
        "provenance": {"command": "primebench eval ppl"},
    }


def test_a_table_keeps_every_mark_escapes_text_and_links_rows_to_records():
    cols = (Column("model", "model", numeric=False), Column("nll", "NLL"), Column("obj", "objective"))
    evil = "<script>alert(1)</script>"
    rows = (
        (Cell(text="m1"), Cell(3.5, 0.1, "bound"), Cell(3.1, 0.1, "paper-objective")),
        (Cell(text=evil), Cell(2.0, 0.0, "exact"), Cell(1.0, None, "estimate")),
        (Cell(text="unigram"), Cell(5.0, 0.0, "exact"), Cell(None)),
    )
    table = Table("ppl", "t", cols, rows, (Footnote("bound", "a bound"),), 2)
    records = [_record("m1", "mdlm", 3.5), _record(evil, "prime", 2.0)]
    ids = {id(r): f"record-{i}" for i, r in enumerate(records)}
    page = table_html(table, records, ids)
    assert '<td class="num bound">&lt;=3.5000 ± 0.1000</td>' in page
    assert '<td class="num paper-objective">3.1000† ± 0.1000</td>' in page
    assert '<td class="num estimate">~1.0000 ± n/a</td>' in page and "<script>" not in page
    assert 'data-family="mdlm"' in page and 'href="#record-0"' in page and 'href="#record-1"' in page
    assert '<tr class="reference"><td>unigram</td>' in page  # a row no record made: a reference
    assert "<p>&lt;= a bound</p>" in page


def test_rows_of_one_label_link_the_record_of_their_seed():
    seed0, seed1 = _record("small-mdlm", "mdlm", 4.7), _record("small-mdlm", "mdlm", 4.6)
    seed1["model"]["config"]["seed"] = 1
    cols = (Column("model", "model", numeric=False), Column("nll", "NLL"))
    rows = ((Cell(text="small-mdlm"), Cell(4.7, 0.1, "bound")), (Cell(text="small-mdlm (seed 1)"), Cell(4.6, 0.1)))
    page = table_html(Table("ppl", "t", cols, rows), [seed0, seed1], {id(seed0): "a", id(seed1): "b"})
    first, second = page.split("<tr")[2:4]
    assert 'href="#a"' in first and 'href="#b"' not in first and 'href="#b"' in second


@pytest.mark.parametrize("job", JOBS)
def test_the_committed_pages_hold_every_table_of_tables_md(job, tmp_path):
    folder = ROOT / "results" / job
    out = tmp_path / "report.html"
    res = CliRunner().invoke(main, ["report", str(folder), "--html", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text()
    for title in _titles((folder / "tables.md").read_text()):
        assert f"<h2>{title}</h2>" in page.replace("&#x27;", "'"), title
    assert len(re.findall(r'<img alt="[^"]+" src="data:image/png;base64,', page)) == len(list(folder.glob("*.png")))
    assert not re.search(r'(src|href)="(https?:)?//', page)  # nothing is fetched: no server, no CDN
    for kind in ("exact", "bound", "paper-objective", "estimate"):
        assert f"<td>{kind}</td>" in page
    committed = folder / "report.html"
    assert committed.is_file() and committed.read_text() == page, f"regenerate: primebench report {folder} --html"


def test_plain_records_get_a_table_per_evaluation_and_unknown_kinds_are_named(tmp_path):
    records = tmp_path / "records"
    records.mkdir()
    source = ROOT / "results" / "small" / "records"
    picked = sorted(source.glob("ppl-*.json"))[:2] + sorted(source.glob("genppl-*.json"))[:1]
    for path in picked:
        shutil.copy(path, records / path.name)
    out = tmp_path / "page.html"
    res = CliRunner().invoke(main, ["report", str(records), "--html", str(out), "--title", "mine"])
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert "<title>mine</title>" in page and "<h2>ppl</h2>" in page and "<h2>genppl</h2>" in page
    assert "Records (3)" in page
    doc = json.loads(picked[0].read_text())
    (records / "odd.json").write_text(json.dumps(dict(doc, evaluation="mystery")))
    res = CliRunner().invoke(main, ["report", str(records), "--html", str(out)])
    assert res.exit_code == 2 and "no table layout takes records of 'mystery'" in res.output


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed (make browser)")
def test_the_small_page_in_headless_chromium(tmp_path):
    """Chromium loads the committed page, runs its script, and a probe sets the family filter: every
    table is in the DOM, and only rows of that family (and reference rows) stay visible."""
    page = (ROOT / "results" / "small" / "report.html").read_text()
    probe = """<script>
    var sel=document.getElementById('family'); sel.value='duo'; sel.dispatchEvent(new Event('change'));
    var shown=0, hidden=0;
    document.querySelectorAll('tr[data-family]').forEach(function(r){
      if(r.style.display==='none'){hidden++}else{shown++} });
    var out=document.createElement('div'); out.id='probe';
    out.textContent=JSON.stringify({tables:document.querySelectorAll('table.result').length, shown:shown, hidden:hidden,
      h2:Array.from(document.querySelectorAll('h2')).map(function(h){return h.textContent})});
    document.body.appendChild(out);
    </script></body>"""
    (tmp_path / "probe.html").write_text(page.replace("</body>", probe))
    dom = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", f"file://{tmp_path / 'probe.html'}"],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    found = json.loads(re.search(r'<div id="probe">(.*?)</div>', dom).group(1).replace("&quot;", '"'))
    titles = _titles((ROOT / "results" / "small" / "tables.md").read_text())
    assert all(t in found["h2"] for t in titles) and found["tables"] >= len(titles)
    assert found["shown"] > 0 and found["hidden"] > found["shown"]
