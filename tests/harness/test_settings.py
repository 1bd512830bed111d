"""Every evaluation takes one frozen settings object whose fields are its command's options (with the
command's defaults), changed by name; a misspelt name is an error that lists the fields."""

from __future__ import annotations

import dataclasses

import click
import pytest

from harness.audit.precision import PrecisionSettings
from harness.errors import InputError
from harness.evaluation.genppl import GenPPLSettings, genppl_settings
from harness.evaluation.ppl import PPLSettings, ppl_settings
from harness.fid.evaluate import FIDSettings
from harness.lmeval import ZeroShotSettings
from harness.settings import changed


def test_changes_by_name_and_a_misspelt_name_is_named():
    s = genppl_settings(samples=3, steps=8)
    assert (s.samples, s.steps, s.dtype) == (3, 8, "float64") and genppl_settings(s, seed=2).samples == 3
    with pytest.raises(InputError, match=r"unknown Gen PPL setting\(s\) \['sample'\]") as info:
        genppl_settings(sample=3)
    assert "samples" in info.value.fix and "nucleus_p" in info.value.fix
    assert ppl_settings(max_rows=4).max_rows == 4
    with pytest.raises(InputError, match="perplexity"):
        ppl_settings(rows=4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.samples = 4  # type: ignore[misc]
    assert changed(ZeroShotSettings(), {"mc_samples": 2}, "zero-shot").mc_samples == 2


@pytest.mark.parametrize(
    ("settings", "path"),
    [
        (GenPPLSettings, ("eval", "genppl")),
        (PPLSettings, ("eval", "ppl")),
        (ZeroShotSettings, ("eval", "zeroshot")),
        (FIDSettings, ("eval", "fid")),
    ],
)
def test_the_defaults_are_the_commands(settings, path):
    """Each field with a command option of the same name has that option's default (the CLI and the
    API give the same number for the same call)."""
    from harness.cli import main

    command = main
    for name in path:
        command = command.commands[name]
    required = ["CKPT"] * sum(isinstance(p, click.Argument) and p.required for p in command.params)
    parsed = command.make_context(command.name, required).params  # every option at its default
    compared = 0
    for field in dataclasses.fields(settings):
        if field.name not in parsed:
            continue
        default = parsed[field.name]
        want = tuple(default) if isinstance(field.default, tuple) and isinstance(default, list) else default
        assert field.default == want, (path, field.name, field.default, default)
        compared += 1
    assert compared >= 4, path


def test_the_precision_settings_are_the_audits():
    s = PrecisionSettings()
    assert (s.method, s.draw, tuple(s.dtypes)) == ("mdlm-legacy", "joint", ("float32", "float64"))
