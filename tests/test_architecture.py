"""The dependency rules of ARCHITECTURE.md, checked on the source: imports go one way."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "engine" / "headwater"
WAY_IN = ("headwater.server", "headwater.cli")

# (package folder, packages it must never import, why)
RULES = [
    (ENGINE / "server", ("headwater.control", "headwater.cli", "headwater.verify"),
     "the engine never imports the control plane"),
    (ENGINE / "control", ("headwater.server", "headwater.cli", "headwater.verify"),
     "the core reaches servers only over NATS"),
    (ENGINE / "archive", ("headwater.server", "headwater.control", "headwater.cli"),
     "a pure format library"),
    (ENGINE / "verify", WAY_IN, "the verifier reads archives, never a live engine"),
    (ROOT / "operator" / "headwater_operator", WAY_IN, "the operator goes through the core"),
    (ROOT / "terraform" / "headwater_terraform", WAY_IN, "the provider goes through the core"),
]  # fmt: skip


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize(("root", "forbidden", "why"), RULES, ids=[r[0].name for r in RULES])
def test_package_respects_its_import_rule(root: Path, forbidden: tuple[str, ...], why: str):
    if not root.is_dir():
        pytest.fail(f"{root} is missing; the rule table names a package that does not exist")
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted(root.rglob("*.py"))
        for name in imported_modules(path)
        if any(name == bad or name.startswith(bad + ".") for bad in forbidden)
    ]
    assert not offenders, f"{why}: " + "; ".join(offenders)


def test_rule_checker_sees_a_forbidden_import(tmp_path: Path):
    module = tmp_path / "m.py"
    module.write_text("from headwater.control import plan\nimport headwater.server.node\n")
    assert imported_modules(module) == {"headwater.control", "headwater.server.node"}
