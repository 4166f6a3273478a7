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


# Functions that run before the server serves anyone (start-up wiring), where an import costs
# start-up time only. Anywhere else in the engine a function-level import runs on the event
# loop the first time a client reaches it: a cold import of a store or of prometheus_client
# took over 100 ms there and stalled every client (a CI run caught it on a first STREAM.CREATE).
STARTUP_IMPORTS = {("main.py", "serve"), ("services.py", "attach_services")}


def function_level_imports(path: Path) -> list[tuple[str, int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for func in ast.walk(tree):
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(func):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    found.append((func.name, node.lineno, ast.unparse(node)))
    return found


def test_engine_imports_nothing_while_serving():
    server = ENGINE / "server"
    offenders = [
        f"{path.relative_to(ROOT)}:{line} {func}(): {text}"
        for path in sorted(server.rglob("*.py"))
        for func, line, text in function_level_imports(path)
        if (str(path.relative_to(server)), func) not in STARTUP_IMPORTS
    ]
    assert not offenders, "import these at module level: " + "; ".join(offenders)


def test_lazy_import_checker_sees_an_import_in_a_method(tmp_path: Path):
    module = tmp_path / "m.py"
    module.write_text("class A:\n    async def f(self):\n        import cramjam\n")
    assert function_level_imports(module) == [("f", 3, "import cramjam")]
