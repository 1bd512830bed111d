"""docs/api.md is tested: every public name it lists imports, and every ``python`` example runs.

Convention (stated at the top of docs/api.md): a bullet whose text begins with fully qualified names
in backticks, before the first colon after a backtick, lists public names; each ``python`` fenced
block is an example, run on its own in a fresh namespace from a folder that holds
``runs/tiny-prime`` (the ``tiny/prime`` preset, trained here), ``release-fixtures/`` (the release
files of ``tests.fixtures.releases``) and ``results/`` (the repository's committed results).
"""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api.md"
PACKAGES = ("harness", "prime", "baselines")

_BULLET = re.compile(r"^- (`.*)$")
_NAME = re.compile(r"`([A-Za-z_][\w.]*)`")
_EXAMPLE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _bullets(text: str) -> list[str]:
    """Each top-level bullet that begins with a backticked name, its continuation lines joined."""
    bullets: list[str] = []
    current: list[str] | None = None
    for line in text.splitlines():
        match = _BULLET.match(line)
        if match:
            current = [match.group(1)]
            bullets.append(current)  # type: ignore[arg-type]
        elif current is not None and line.startswith("  ") and line.strip():
            current.append(line.strip())
        else:
            current = None
    return [" ".join(parts) for parts in bullets]


def listed_names(text: str) -> list[str]:
    """The public names of docs/api.md: the backticked dotted names before a bullet's colon."""
    names: list[str] = []
    for bullet in _bullets(text):
        lead = bullet.split("`:", 1)[0] + "`"
        for name in _NAME.findall(lead):
            if "." in name and name.split(".", 1)[0] in PACKAGES and name not in names:
                names.append(name)
    return names


def examples(text: str) -> list[tuple[int, str]]:
    """``(line number, source)`` of every ``python`` fenced block."""
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in _EXAMPLE.finditer(text)]


def resolve(name: str):
    """Import the longest importable module prefix of ``name`` and fetch the rest as attributes."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        module_name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # only a missing module of the name itself means "try a shorter prefix"; a missing
            # dependency inside an existing module is a failure
            if exc.name is None or not module_name.startswith(exc.name):
                raise
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(name)


TEXT = API.read_text(encoding="utf-8")
NAMES = listed_names(TEXT)
EXAMPLES = examples(TEXT)


def test_the_page_lists_names_and_examples():
    assert len(NAMES) >= 40, NAMES
    assert len(EXAMPLES) >= 10
    assert "harness.load" in NAMES and "prime.bounds.subtoken_bound" in NAMES


@pytest.mark.parametrize("name", NAMES)
def test_listed_name_imports(name):
    try:
        resolve(name)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"docs/api.md lists {name!r}, which does not import: {exc!r}")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, release_files):
    """The folder the examples run from (see docs/api.md)."""
    from harness.config import load_config
    from harness.training import train

    folder = tmp_path_factory.mktemp("docs-api")
    train(load_config("tiny/prime"), folder / "runs" / "tiny-prime", quiet=True)
    os.symlink(release_files, folder / "release-fixtures")
    os.symlink(ROOT / "results", folder / "results")
    return folder


@pytest.mark.parametrize("line, source", EXAMPLES, ids=[f"api.md:{line}" for line, _ in EXAMPLES])
def test_example_runs(line, source, workspace, monkeypatch, single_thread):
    monkeypatch.chdir(workspace)
    code = compile(source, f"docs/api.md:{line}", "exec")
    exec(code, {"__name__": "docs_api_example"})
