"""One shape for every evaluation: on the paths of ``eval ppl``, ``eval genppl``, ``eval zeroshot``,
``eval fid`` and the audits, no function body is over 60 lines, a parameter list over 8 names a reason
(a public keyword API kept as it was), the evaluation modules do not import each other in a cycle, and
no evaluator changes the model's sequence length to evaluate it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: the modules on the evaluation paths (requests, model calls, metric states, records)
PATHS = [
    "harness/evaluation",
    "harness/lmeval/__init__.py",
    "harness/fid/evaluate.py",
    "harness/audit",
    "harness/sampling/samplers.py",
    "harness/training.py",
    "harness/reproduce/quickstart.py",
    "harness/reproduce/paper.py",
    "harness/reproduce/report/published.py",
    "harness/bench/sampling.py",
]
MAX_BODY, MAX_PARAMS = 60, 8

#: functions with more parameters, and why
WIDE = {
    "generate": "the samplers' public keywords (documented in docs/api.md), one per sampling setting",
    "evaluate_nll": "the public scoring entry point of every likelihood evaluation and audit",
    "audit_checkpoint": "audit bound's keyword API (its CLI options one to one)",
    "gumbel_audit": "audit gumbel's keyword API (its CLI options one to one)",
    "_row": "one GumbelRow's fields",
    "text_references": "the scored tokens and their packing, as eval ppl computed them",
    "_forward_backward": "one training step's state, kept in one call so that a signal cuts it as one",
}


def _functions():
    for entry in PATHS:
        path = ROOT / entry
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            tree = ast.parse(file.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield file.relative_to(ROOT).as_posix(), node


def _body_lines(node) -> int:
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]  # the docstring
    return 0 if not body else body[-1].end_lineno - body[0].lineno + 1


def _params(node) -> int:
    a = node.args
    names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
    return len([n for n in names if n not in ("self", "cls")])


def test_no_function_on_the_evaluation_paths_is_long():
    long = [
        f"{rel}:{n.lineno} {n.name} ({_body_lines(n)} lines)" for rel, n in _functions() if _body_lines(n) > MAX_BODY
    ]
    assert not long, "split these (requests, model calls, metric states, record):\n" + "\n".join(long)


def test_a_wide_parameter_list_names_its_reason():
    wide = [f"{rel}:{n.lineno} {n.name} ({_params(n)})" for rel, n in _functions() if _params(n) > MAX_PARAMS]
    unexplained = [w for w in wide if w.split()[1] not in WIDE]
    assert not unexplained, "take a settings object, or say why in WIDE:\n" + "\n".join(unexplained)
    assert {w.split()[1] for w in wide} == set(WIDE), "WIDE names a function that is no longer wide"


def test_the_evaluation_modules_import_in_any_order():
    """Each module imports on its own in a fresh interpreter (a cycle shows as an ImportError for one
    of the orders), and genppl and its references no longer import each other."""
    modules = [
        "harness.evaluation.genppl_references",
        "harness.evaluation.genppl_scoring",
        "harness.evaluation.genppl",
        "harness.evaluation.ppl",
        "harness.evaluation.genppl_sweep",
    ]
    for module in modules:
        res = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=ROOT, capture_output=True, text=True)
        assert res.returncode == 0, (module, res.stderr[-2000:])
    refs = ast.parse((ROOT / "harness/evaluation/genppl_references.py").read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(refs) if isinstance(n, ast.ImportFrom)}
    assert "harness.evaluation.genppl" not in imported


@pytest.mark.parametrize("entry", ["harness/evaluation", "harness/lmeval", "harness/fid", "harness/audit"])
def test_no_evaluator_changes_the_model_length(entry):
    for file in (ROOT / entry).rglob("*.py"):
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    assert not (isinstance(target, ast.Attribute) and target.attr == "seq_len"), (
                        f"{file.relative_to(ROOT)}:{node.lineno} sets seq_len: pass seq_len= to the sampler instead"
                    )
