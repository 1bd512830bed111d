"""One option vocabulary: docs/cli.md is what the commands say, every shared option name has one meaning,
renamed spellings still parse (with a deprecation line), and only the harness's own errors exit 2."""

from __future__ import annotations

import json
import re

import click
import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.cli.options import VocabularyOption
from harness.cli.parsing import CommaList, Command, PerNameInts
from harness.cli.reference import DOC, commands, markdown, visible_options
from harness.cli.vocabulary import SEVERAL, TYPES, VOCABULARY


def test_docs_cli_md_is_what_the_commands_say():
    assert DOC.read_text() == markdown(), "docs/cli.md is stale: run python -m harness.cli.reference --write"


def test_an_option_name_shared_by_commands_has_one_meaning():
    users: dict[str, list[tuple[str, click.Option]]] = {}
    for path, command in commands():
        for name, option in visible_options(command):
            users.setdefault(name, []).append((" ".join(path), option))
    shared = {name: used for name, used in users.items() if len(used) > 1}
    assert "--steps" in shared and "--samples" in shared
    for name, used in shared.items():
        assert name in VOCABULARY, f"{name} is taken by {[p for p, _ in used]} but has no entry in the vocabulary"
        for path, option in used:
            assert isinstance(option, VocabularyOption) and option.vocabulary == name, (path, name)
            assert option.help.startswith(VOCABULARY[name]), (path, name, option.help)
    assert not set(VOCABULARY) - set(users), "vocabulary entries no command takes"


def _element(option: click.Option) -> tuple[click.ParamType, bool]:
    """The type of one value of ``option``, and whether the option takes several."""
    several = isinstance(option.type, (CommaList, PerNameInts))
    return (option.type.item if several else option.type), several


def test_an_option_name_has_one_type_and_its_arity_is_declared():
    """Every command that takes a shared option parses its values with the vocabulary's type; an
    option takes several values only where the vocabulary says so (and then parses a list of that
    type), and a one-value option refuses a list."""
    several_seen = set()
    for path, command in commands():
        for name, option in visible_options(command):
            if name not in VOCABULARY:
                continue
            item, several = _element(option)
            where = (" ".join(path[1:]), name)
            assert item.name == TYPES[name], (*where, item.name)
            if isinstance(item, click.IntRange) and name in ("--seed", "--seeds", "--steps", "--samples"):
                assert item.min is not None and item.min >= 0 and item.min_open is False, where
            if option.is_flag:
                continue
            two = {"integer range": "2,3", "choice": ",".join(list(getattr(item, "choices", ()))[:2])}.get(item.name)
            if several:
                assert name in SEVERAL, where
                several_seen.add(name)
                if two is not None and not isinstance(option.type, PerNameInts):
                    assert len(_params(command, [name, two])[option.name]) == 2, where
            elif two is not None and name not in ("--models",):
                with pytest.raises(click.BadParameter):
                    _params(command, [name, two])
    assert several_seen == set(SEVERAL), set(SEVERAL) - several_seen


def test_options_that_meant_two_things_now_mean_one():
    by_command = {" ".join(path[1:]): {n for n, _ in visible_options(c)} for path, c in commands()}
    assert "--train-steps" in by_command["reproduce small"] and "--steps" not in by_command["reproduce small"]
    assert {"--train-steps", "--steps"} <= by_command["reproduce precision"]
    assert "--sampling-steps" not in by_command["reproduce owt"]
    for preset in ("owt", "zeroshot", "cifar10-fid"):  # nothing is sampled: no option that would be ignored
        assert not {"--steps", "--samples"} & by_command[f"reproduce {preset}"], preset
    assert {"--steps", "--samples"} <= by_command["reproduce genppl"]
    assert {"--ema", "--carry-over"} <= by_command["eval fid"] & by_command["audit bound"]
    assert "--max-rows" in by_command["eval zeroshot"] and "--limit" not in by_command["eval zeroshot"]
    assert "--source-format" in by_command["import"] and "--format" not in by_command["import"]
    assert {"--seq-len", "--batch-size", "--samples"} <= by_command["audit idle"]


SAMPLE_VALUE = {
    "--seq-len": "32",
    "--batch-size": "2",
    "--samples": "3",
    "--method": "gumbel,race",
    "--dtype": "float64",
    "--max-rows": "5",
    "--source-format": "mdlm-hf",
    "--train-steps": "7",
    "--steps": "16,32",
    "--nucleus-p": "0.9",
}


def _aliases():
    for path, command in commands():
        if isinstance(command, Command):
            for old, new in command.aliases.items():
                yield pytest.param(path, command, old, new, id=f"{' '.join(path[1:])} {old}")


def _params(command, args):
    """The parsed parameters of ``command`` given ``args`` (plus whatever it requires)."""
    required = ["CKPT"] * sum(isinstance(p, click.Argument) and p.required for p in command.params)
    if any(isinstance(p, click.Option) and p.required and p.name == "out" for p in command.params):
        required += ["--out", "out"]
    return command.make_context(command.name, [*required, *args]).params


@pytest.mark.parametrize(("path", "command", "old", "new"), list(_aliases()))
def test_an_old_spelling_parses_as_the_new_one_with_a_deprecation_line(path, command, old, new, capsys):
    flag = next(p for p in command.params if new in getattr(p, "opts", ())).is_flag
    value = None if flag else SAMPLE_VALUE[new]
    if new == "--steps" and command.name in ("quickstart", "small"):
        value = "7"
    given = [] if flag else [value]
    expected = _params(command, [new, *given])
    capsys.readouterr()
    assert _params(command, [old, *given]) == expected
    assert f"{old} is deprecated; use {new}" in capsys.readouterr().err
    if flag:
        pass
    elif old.startswith("--"):
        assert _params(command, [f"{old}={value}"]) == expected
    else:
        assert _params(command, [f"{old}{value}"]) == expected
    assert not re.search(rf"(?<![\w-]){re.escape(old)}(?![\w-])", command.get_help(click.Context(command)))


def test_old_spellings_run_the_same_audit():
    runner = CliRunner()
    new = runner.invoke(main, ["audit", "idle", "--seq-len", "16", "--steps", "16", "--ell", "1,2", "--samples", "2"])
    old = runner.invoke(main, ["audit", "idle", "-L", "16", "--steps", "16", "--ell", "1,2", "--runs", "2", "--json"])
    assert new.exit_code == 0 and old.exit_code == 0, old.output
    rows = json.loads(old.stdout)["rows"]
    assert [r["measured"] is not None for r in rows] == [True, True]
    assert "deprecated" in old.stderr and "deprecated" not in new.stderr


def test_table_out_is_a_folder(tmp_path):
    record = tmp_path / "idle.json"
    res = CliRunner().invoke(main, ["audit", "idle", "--steps", "8", "--seq-len", "8", "--samples", "0", "--json"])
    record.write_text(res.stdout)
    res = CliRunner().invoke(main, ["table", str(record), "--format", "md", "--out", str(tmp_path / "tables")])
    assert res.exit_code == 0, res.output
    assert "| model | family |" in (tmp_path / "tables" / "idle.md").read_text()
    res = CliRunner().invoke(main, ["table", str(record), "--format", "csv", "--out", str(tmp_path / "t.csv")])
    assert res.exit_code == 0 and (tmp_path / "t.csv").is_file() and "deprecated" in res.stderr


def test_an_internal_error_is_a_bug_with_its_traceback(monkeypatch):
    import harness.models

    def broken():
        raise ValueError("an internal bug")

    monkeypatch.setattr(harness.models, "family_names", broken)
    res = CliRunner().invoke(main, ["models"])
    assert res.exit_code == 1 and isinstance(res.exception, ValueError)
    assert "a bug in primebench" in res.stderr


def test_a_user_error_is_an_error_line_and_exit_2(monkeypatch):
    import harness.models
    from harness.errors import InputError

    def refused():
        raise InputError("sequence length 9 exceeds the model's seq_len=8", fix="use --seq-len 8")

    monkeypatch.setattr(harness.models, "family_names", refused)
    res = CliRunner().invoke(main, ["models"])
    assert res.exit_code == 2 and "error: sequence length 9" in res.stderr and "fix: use --seq-len 8" in res.stderr
    assert "bug" not in res.stderr
