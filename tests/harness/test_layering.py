"""Families own their differences: the harness never imports the family packages ``prime`` and
``baselines`` (it reaches a family through the model registry and the family's methods), and the samplers and audits
never read the ``subtokens`` fact to pick a family's code path (they ask the family)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "harness"

#: where ``subtokens`` may still be read under harness/ (nowhere: the families answer for it)
SUBTOKENS_ALLOWED: set[tuple[str, str]] = set()


def _modules(folder: Path):
    for path in sorted(folder.rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


#: the packages that hold families; the harness reaches them only through the registry
FAMILY_PACKAGES = ("prime", "baselines")


def _is_family_package(module: str | None) -> bool:
    return module is not None and any(module == p or module.startswith(p + ".") for p in FAMILY_PACKAGES)


def test_the_harness_never_imports_a_family_package():
    offenders = []
    for rel, tree in _modules(HARNESS):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module] if node.level == 0 else []
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in (
                "import_module",
                "__import__",
            ):
                names = [a.value for a in node.args[:1] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            else:
                continue
            offenders += [f"{rel}:{node.lineno}: {name}" for name in names if _is_family_package(name)]
    # the registry loads the family modules by name (harness.models._FAMILY_MODULES); nothing else may
    assert not offenders, "harness imports a family package:\n" + "\n".join(offenders)


def _reads_of(tree: ast.AST, name: str):
    """(line, qualified name of the enclosing function or class) of every ``x.name`` or bare ``name``."""
    found = []

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = f"{scope}.{child.name}" if scope else child.name
            if (isinstance(child, ast.Attribute) and child.attr == name) or (
                isinstance(child, ast.Name) and child.id == name
            ):
                found.append((child.lineno, scope))
            visit(child, inner)

    visit(tree, "")
    return found


def test_no_sampler_or_audit_reads_subtokens():
    offenders = []
    for folder in (HARNESS / "sampling", HARNESS / "audit"):
        for rel, tree in _modules(folder):
            offenders += [
                f"{rel}:{line} in {scope or 'module'}"
                for line, scope in _reads_of(tree, "subtokens")
                if (rel, scope) not in SUBTOKENS_ALLOWED
            ]
    assert not offenders, "samplers/audits branch on the family's sub-tokens:\n" + "\n".join(offenders)


def test_the_walk_sees_what_it_looks_for():
    lines = [
        "import prime.model",
        "class A:",
        "    def f(self, u):",
        "        if u.subtokens:",
        "            from prime import toy",
    ]
    tree = ast.parse("\n".join(lines))
    assert [scope for _, scope in _reads_of(tree, "subtokens")] == ["A.f"]
    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert len(imports) == 2


#: packages whose function-level imports must each say why they are deferred (a heavy optional
#: dependency, or a module the CLI reads at start-up without torch)
EXPLAINED_IMPORTS = (
    "harness/evaluation",
    "harness/audit",
    "harness/fid",
    "harness/metrics",
    "harness/sampling",
    "harness/reproduce",
    "harness/views",
    "harness/bench",
    "harness/lmeval",
    "harness/data",
    "harness/models",
    "harness/*.py",
    "prime",
    "baselines",
)


def test_an_import_inside_a_function_says_why_it_is_deferred():
    """In the packages of EXPLAINED_IMPORTS every import sits at the top of its module, except those
    deferred on purpose, which carry a ``deferred:`` comment on their line or on the comment just above
    their import block."""
    unexplained = []
    for entry in EXPLAINED_IMPORTS:
        paths = sorted(ROOT.glob(entry) if entry.endswith(".py") else (ROOT / entry).rglob("*.py"))
        assert paths, f"{entry} names no module"
        for path in paths:
            lines = path.read_text(encoding="utf-8").split("\n")
            for fn in ast.walk(ast.parse("\n".join(lines))):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for node in ast.walk(fn):
                    if not isinstance(node, (ast.Import, ast.ImportFrom)):
                        continue
                    above = node.lineno - 2
                    while above >= 0 and (
                        not lines[above].strip() or lines[above].strip().startswith(("from ", "import "))
                    ):
                        above -= 1  # up the import block (its groups split by blank lines) to the comment over it
                    told = "deferred" in lines[node.lineno - 1] or (
                        above >= 0 and lines[above].strip().startswith("#") and "deferred" in lines[above]
                    )
                    if not told:
                        unexplained.append(f"{path.relative_to(ROOT)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not unexplained, "move these to the module top, or say why they wait:\n" + "\n".join(unexplained)


#: packages whose imports wait inside functions as a rule, and the rule's reason
DEFERRED_PACKAGES = {
    "harness/cli": "a command imports what it runs when it runs, so that `primebench --help` and the "
    "command list load neither torch nor the evaluation packages",
}


def test_a_package_that_defers_its_imports_keeps_its_reason():
    """The CLI's modules defer their imports by rule: importing the CLI and building its top-level
    commands loads no torch (the reason in DEFERRED_PACKAGES holds), and the two lists do not overlap."""
    import subprocess
    import sys

    assert not set(DEFERRED_PACKAGES) & set(EXPLAINED_IMPORTS)
    code = (
        "import sys, click; from harness.cli import main\n"
        "ctx = click.Context(main); [main.get_command(ctx, n) for n in main.list_commands(ctx)]\n"
        "assert 'torch' not in sys.modules, 'torch loaded at start-up'\n"
        "assert not any(m.startswith(('harness.evaluation', 'harness.sampling')) for m in sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
