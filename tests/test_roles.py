"""Each console script names the extra to install when its role's packages are missing."""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = [
    ("server", "uvloop", "headwater-server", "server"),
    ("cli", "typer", "headwater", "cli"),
    ("operator_main", "kopf", "headwater-operator", "operator"),
    ("terraform_provider", "grpc", "terraform-provider-headwater", "terraform"),
]


@pytest.mark.parametrize(("entry", "package", "script", "extra"), CASES)
def test_a_missing_extra_is_one_line_naming_it(
    entry: str, package: str, script: str, extra: str
) -> None:
    # None in sys.modules makes ``import package`` fail as if it were not installed.
    code = (
        f"import sys; sys.modules[{package!r}] = None; sys.argv = [{script!r}, '--help']; "
        f"from headwater import roles; sys.exit(roles.{entry}())"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == (
        f"Error: {script} needs the {extra!r} extra ({package} is not installed): "
        f"pip install 'headwater[{extra}]'\n"
    )


def test_an_installed_role_runs() -> None:
    code = (
        "import sys; sys.argv = ['headwater-server', '--version']; "
        "from headwater import roles; sys.exit(roles.server())"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
