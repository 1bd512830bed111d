"""Seeded fuzzing of what a user can give: option values, config overrides and files, and record
files. Whatever goes in, the answer is a result or an ``error:`` line with status 2, never a
traceback (status 1, "an internal error").

The cases are drawn from a fixed seed, so a failure names a case that reproduces; the values are
the kinds that broke earlier versions (empty, zero, negative, nan, inf, 1e309, 1e-320, huge
integers, text where a number goes, control characters, very long strings).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.errors import PrimebenchError

VALUES = [
    "",
    "0",
    "-1",
    "nan",
    "inf",
    "-inf",
    "1e309",
    "1e-320",
    "99999999999999999999999",
    "abc",
    "1.5",
    "true",
    "[1, 2]",
    "{a: 1}",
    "\x1b[31m",
    "a\nb",
    "x" * 5000,
    "💥",
    "null",
    "~",
    "*a",
    "&a b",
]

#: commands that fail fast on their missing checkpoint once the options parse, and the options tried
COMMANDS = {
    ("eval", "ppl", "missing-ckpt"): [
        "--batch-size",
        "--max-rows",
        "--mc-samples",
        "--seed",
        "--estimator",
        "--seq-len",
    ],
    ("eval", "genppl", "missing-ckpt"): [
        "--samples",
        "--steps",
        "--temperature",
        "--nucleus-p",
        "--batch-size",
        "--seq-len",
        "--sweep",
        "--dtype",
        "--method",
        "--judge",
        "--seed",
    ],
    ("eval", "zeroshot", "missing-ckpt"): ["--tasks", "--limit", "--batch-size", "--mc-samples", "--seed"],
    ("audit", "precision", "missing-ckpt"): ["--steps", "--samples", "--dtype", "--method", "--batch-size", "--seed"],
    ("audit", "idle"): ["--seq-len", "--steps", "--ell", "--schedule", "--batch-size", "--samples", "--seed"],
    ("audit", "gumbel"): ["--probs", "--mdlm-step", "--steps", "--vocab", "--samples", "--seed"],
    ("reproduce", "small"): ["--seeds", "--seed", "--models", "--samples", "--max-rows", "--train-steps"],
}

#: the work behind the commands that need no checkpoint: replaced by a stand-in that stops once the
#: options have parsed (module, function)
WORK = [
    ("harness.audit.idle_measure", "idle_audit"),
    ("harness.audit.gumbel_audit", "gumbel_audit"),
    ("harness.reproduce.small", "run_small"),
]


class Parsed(PrimebenchError):
    """Raised by the stand-ins: the options reached the work."""


def _assert_no_traceback(res, case) -> None:
    text = res.output
    assert "Traceback" not in text and "internal error" not in text, f"{case}: {text[-2000:]}"
    assert res.exit_code in (0, 2), f"{case}: exit {res.exit_code}: {text[-2000:]}"


@pytest.mark.parametrize("seed", range(6))
def test_random_option_values_never_give_a_traceback(seed, tmp_path, monkeypatch):
    import importlib

    def stop(*args, **kwargs):
        raise Parsed("the options parsed")

    for module, name in WORK:
        monkeypatch.setattr(importlib.import_module(module), name, stop)
    monkeypatch.chdir(tmp_path)
    rng = random.Random(seed)
    runner = CliRunner()
    for _ in range(25):
        command = rng.choice(sorted(COMMANDS))
        chosen = rng.sample(COMMANDS[command], k=min(len(COMMANDS[command]), rng.randint(1, 3)))
        args = list(command)
        for name in chosen:
            args += [name, rng.choice(VALUES)]
        res = runner.invoke(main, args)
        _assert_no_traceback(res, args)


def _config_keys() -> list[str]:
    import dataclasses

    from harness.config import Config
    from harness.models import family_class, family_names

    keys = {"seed", "name"}
    for section in ("data", "train"):
        keys |= {f"{section}.{f.name}" for f in dataclasses.fields(getattr(Config(), section))}
    for family in family_names():
        keys |= {f"model.{f.name}" for f in dataclasses.fields(family_class(family).config_class)}
    return sorted(keys)


@pytest.mark.parametrize("seed", range(4))
def test_random_config_overrides_and_files_are_accepted_or_named(seed, tmp_path):
    """Every override (and the same value written in a YAML file) either loads or is a PrimebenchError."""
    from harness.config import load_config

    rng = random.Random(100 + seed)
    keys = _config_keys()
    presets = ["tiny/arm", "tiny/mdlm", "tiny/prime", "tiny/bd3lm", "tiny/udlm", "tiny/duo"]
    for i in range(60):
        key, value = rng.choice(keys), rng.choice(VALUES)
        preset = rng.choice(presets)
        try:
            load_config(preset, [f"{key}={value}"])
        except PrimebenchError:
            pass
        section, _, leaf = key.rpartition(".")
        text = f"{section}:\n  {leaf}: {value}\n" if section else f"{leaf}: {value}\n"
        path = tmp_path / f"c{i}.yaml"
        path.write_text(
            "model:\n  family: mdlm\n" + text
            if section != "model"
            else text.replace("model:\n", "model:\n  family: mdlm\n")
        )
        try:
            load_config(str(path))
        except PrimebenchError:
            pass


def _mutate(node, rng, depth=0):
    """A copy of a JSON tree with one random leaf replaced, a key dropped or a type changed."""
    if isinstance(node, dict) and node:
        key = rng.choice(sorted(node))
        out = dict(node)
        roll = rng.random()
        if roll < 0.15:
            del out[key]
        elif roll < 0.3 or depth > 6:
            out[key] = rng.choice([None, "x", -1, 1e308, [], {}, True, "nan"])
        else:
            out[key] = _mutate(node[key], rng, depth + 1)
        return out
    if isinstance(node, list) and node:
        i = rng.randrange(len(node))
        return node[:i] + [_mutate(node[i], rng, depth + 1)] + node[i + 1 :]
    return rng.choice([None, "x", -1, 1e308, [], {}, True, "nan", 0])


@pytest.mark.parametrize("seed", range(8))
def test_damaged_records_never_give_a_traceback_in_table(seed, tmp_path):
    root = Path(__file__).resolve().parents[3] / "results"
    records = sorted(p for p in root.rglob("*.json") if '"primebench-record/1"' in p.read_text()[:4000])[:40]
    assert records
    rng = random.Random(200 + seed)
    runner = CliRunner()
    for i in range(12):
        source = rng.choice(records)
        doc = json.loads(source.read_text())
        for _ in range(rng.randint(1, 3)):
            doc = _mutate(doc, rng)
        folder = tmp_path / f"r{i}"
        folder.mkdir()
        (folder / source.name).write_text(json.dumps(doc))
        (folder / "ok.json").write_text(source.read_text())
        res = runner.invoke(main, ["table", str(folder), "--format", rng.choice(["md", "csv", "latex", "rich"])])
        _assert_no_traceback(res, (source.name, i))


#: options of the commands that run on a real checkpoint, with values that parse: the edges of their
#: ranges and the combinations that cannot work (a row longer than the model's, one token per row)
ON_A_CHECKPOINT = {
    ("eval", "ppl"): {
        "--batch-size": ["1", "3", "100000"],
        "--max-rows": ["1", "2", "3"],
        "--mc-samples": ["1", "3"],
        "--seq-len": ["1", "2", "7", "100000"],
        "--estimator": ["default", "both", "exact", "bound", "subtoken", "token_joint"],
        "--time-sampler": ["t", "n"],
        "--seed": ["0", "4294967295"],
    },
    ("eval", "genppl"): {
        "-n": ["1", "2"],
        "--batch-size": ["1", "100000"],
        "--steps": ["1", "2", "300"],
        "--temperature": ["0.001", "1000"],
        "--nucleus-p": ["0.001", "1"],
        "--dtype": ["float32", "float64"],
        "--sampler": ["ancestral", "first-hitting", "maskgit", "autoregressive"],
        "--seed": ["0", "4294967295"],
    },
}


@pytest.mark.parametrize("seed", range(2))
def test_random_settings_on_a_real_checkpoint_give_a_result_or_a_named_error(seed, trained, tmp_path, monkeypatch):
    """The fuzz above stops at the missing checkpoint; here the values that parse reach a trained one."""
    monkeypatch.chdir(tmp_path)
    rng = random.Random(100 + seed)
    runner = CliRunner()
    checkpoints = {family: str(trained(family)) for family in ("mdlm", "prime")}
    for i in range(6):
        command = rng.choice(sorted(ON_A_CHECKPOINT))
        options = ON_A_CHECKPOINT[command]
        args = [*command, checkpoints[rng.choice(sorted(checkpoints))], "--out", str(tmp_path / f"r{i}")]
        if command == ("eval", "ppl"):
            args += ["--max-rows", "2"]
        else:
            args += ["-n", "2", "--no-references", "--judge", f"arm:{trained('arm')}"]
        for name in rng.sample(sorted(options), k=rng.randint(1, 3)):
            args += [name, rng.choice(options[name])]
        res = runner.invoke(main, args)
        _assert_no_traceback(res, args)
