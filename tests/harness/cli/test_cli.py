"""The command line's shape: no empty groups, and one function that emits every record."""

from __future__ import annotations

import json

import click
from click.testing import CliRunner

from harness import records as records_module
from harness.cli import main
from harness.cli.emit import emit_record
from harness.records import Metric, make_record


def _groups(group: click.Group, prefix: str = "primebench"):
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            yield f"{prefix} {name}", cmd
            yield from _groups(cmd, f"{prefix} {name}")


def test_no_empty_command_groups():
    empty = [name for name, g in _groups(main) if not g.commands]
    assert empty == []
    assert {"quickstart", "precision"} <= set(main.commands["reproduce"].commands)
    assert not isinstance(main.commands["bench"], click.Group)


def _record():
    return make_record(
        "ppl",
        model={"name": "m", "family": "mdlm"},
        seed=0,
        protocol={"data": "x"},
        metrics={"nll": Metric(3.0, 0.1, "bound", "nats/token")},
    )


def test_emit_record_writes_then_prints_json_or_the_view(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(records_module, "git_revision", lambda: "test")
    monkeypatch.delenv("RANK", raising=False)
    rec = _record()
    seen = []
    path = emit_record(rec, out=tmp_path, as_json=False, render=seen.append)
    assert path is not None and json.loads(path.read_text())["metrics"] == rec["metrics"] and seen == [rec]
    assert emit_record(rec, out=None, as_json=True, render=seen.append) is None and len(seen) == 1
    printed = capsys.readouterr().out
    assert json.loads(printed) == json.loads(json.dumps(rec, default=str)) and printed.startswith("{\n  ")
    emit_record(rec, out=None, as_json=True, render=seen.append, indent=None)
    assert "\n" not in capsys.readouterr().out.strip()


def test_emit_record_is_silent_off_rank_0(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RANK", "1")
    seen = []
    assert emit_record(_record(), out=tmp_path / "recs", as_json=True, render=seen.append) is None
    assert not (tmp_path / "recs").exists() and seen == [] and capsys.readouterr().out == ""


def test_commands_that_print_records_use_emit_record():
    # every record-printing command module goes through harness.cli.emit (no second write-then-print)
    import inspect

    from harness.cli import (
        audit_bound,
        audit_gumbel,
        audit_idle,
        audit_precision,
        eval_fid,
        eval_genppl,
    )
    from harness.cli import (
        eval as eval_cli,
    )

    for module in (audit_bound, audit_gumbel, audit_idle, audit_precision, eval_cli, eval_fid, eval_genppl):
        source = inspect.getsource(module)
        assert "emit_record(" in source and "write_record(" not in source and "json.dumps(" not in source, module


def test_help_lists_groups_with_commands():
    res = CliRunner().invoke(main, ["--help"])
    assert res.exit_code == 0 and "reproduce " in res.output and "bench " in res.output


def test_table_command_offers_every_layout_and_format():
    from harness.cli import table as table_cli
    from harness.views import FORMATS, LAYOUTS

    assert table_cli._LAYOUTS == tuple(LAYOUTS) and table_cli._FORMATS == FORMATS


def test_estimator_choices_come_from_the_registry():
    from harness.cli.parsing import estimator_choices
    from harness.evaluation.duel import DUEL
    from harness.models import MODELS, family_names

    offered = {e.name for f in family_names() for e in MODELS.get(f).estimators} | {DUEL.name}
    choices = estimator_choices()
    assert choices[:2] == ["default", "both"] and set(choices[2:]) == offered and len(choices) == len(set(choices))
    help_text = CliRunner().invoke(main, ["eval", "ppl", "--help"]).output
    assert all(name in help_text for name in offered)
    bad = CliRunner().invoke(main, ["eval", "ppl", "nowhere", "--estimator", "joint"])
    assert bad.exit_code == 2 and "token_joint" in bad.output


def test_models_lists_each_family_with_its_estimators_and_their_kinds():
    out = CliRunner().invoke(main, ["models", "--json"])
    assert out.exit_code == 0, out.output
    rows = {r["family"]: r for r in json.loads(out.output)}
    assert rows["arm"]["estimators"] == {"exact": "exact"}
    assert rows["prime"]["estimators"] == {"subtoken": "bound", "token_joint": "paper-objective"}
    assert rows["mdlm"]["estimators"] == rows["masked"]["estimators"] == {"bound": "bound"}
    text = CliRunner().invoke(main, ["models"]).output
    assert "property" not in text and "token_joint (paper-objective)" in text
