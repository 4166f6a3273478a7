"""The dependency rules of ARCHITECTURE.md, checked on the source: imports go one way."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "engine" / "headwater"

# (package that imports, packages it must never import, why)
RULES = [
    (
        "server",
        ("headwater.control", "headwater.cli"),
        "the engine never imports the control plane",
    ),
    ("control", ("headwater.server", "headwater.cli"), "the core reaches servers only over NATS"),
    (
        "archive",
        ("headwater.server", "headwater.control", "headwater.cli"),
        "a pure format library",
    ),
]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize(("package", "forbidden", "why"), RULES, ids=[r[0] for r in RULES])
def test_package_respects_its_import_rule(package: str, forbidden: tuple[str, ...], why: str):
    root = PACKAGE / package
    if not root.is_dir():
        pytest.fail(f"{root} is missing; the rule table names a package that does not exist")
    offenders = [
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in sorted(root.rglob("*.py"))
        for name in imported_modules(path)
        if any(name == bad or name.startswith(bad + ".") for bad in forbidden)
    ]
    assert not offenders, f"{why}: " + "; ".join(offenders)


def test_rule_checker_sees_a_forbidden_import(tmp_path: Path):
    module = tmp_path / "m.py"
    module.write_text("from headwater.control import plan\nimport headwater.server.node\n")
    assert imported_modules(module) == {"headwater.control", "headwater.server.node"}
