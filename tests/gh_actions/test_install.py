"""The install step: what it asks pip for, given the version input, and its output.

A stand-in interpreter records the pip command instead of installing, so the test needs no
package index; the step itself runs unchanged, as the runner runs it.
"""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest
from gh_actions.locations import ACTIONS, REPO

from support.actions_runner import run_action

FAKE_PYTHON = """#!/usr/bin/env bash
# Records `python -m pip install ...`; answers the version query like the real one would.
if [[ "$1" == "-m" && "$2" == "pip" ]]; then
  printf '%s\\n' "${@:3}" >"$RECORD"
  exit 0
fi
exec "$REAL_PYTHON" "$@"
"""


@pytest.fixture
def fake_python(tmp_path: Path) -> Path:
    path = tmp_path / "python"
    path.write_text(FAKE_PYTHON)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.parametrize(
    ("version", "requirement"),
    [
        ("", f"{REPO}[cli]"),
        ("0.1.0", "headwater[cli]==0.1.0"),
        ("1.2.0rc1", "headwater[cli]==1.2.0rc1"),
        (
            "git+https://github.com/example/headwater@v1",
            "git+https://github.com/example/headwater@v1",
        ),
        ("headwater>=0.1", "headwater>=0.1"),
    ],
)
def test_install_requirement(
    fake_python: Path, tmp_path: Path, version: str, requirement: str
) -> None:
    check_install("setup", fake_python, tmp_path, version, requirement)


def test_every_action_installs_the_same_way(fake_python: Path, tmp_path: Path) -> None:
    # One of them, through its own install step: they all run setup/install.sh.
    check_install("plan", fake_python, tmp_path, "", f"{REPO}[cli]")


def test_only_the_verify_action_installs_pyspark(fake_python: Path, tmp_path: Path) -> None:
    """PySpark is ~450 MB: every install carried it when it was a plain dependency."""
    inputs = {"paths": "nowhere"}
    check_install("verify", fake_python, tmp_path, "0.1.0", "headwater[cli,verify]==0.1.0", inputs)
    extras = {"extras": "cli,verify"}
    check_install("setup", fake_python, tmp_path, "", f"{REPO}[cli,verify]", extras)


def check_install(
    action: str,
    fake_python: Path,
    tmp_path: Path,
    version: str,
    requirement: str,
    more: dict[str, str] | None = None,
) -> None:
    record = tmp_path / "pip-args"
    inputs = {"python": str(fake_python), "version": version, **(more or {})}
    if action == "plan":
        inputs |= {"files": "nowhere"}  # the plan step fails after the install; not under test
    env = {"RECORD": str(record), "REAL_PYTHON": sys.executable}
    run = run_action(ACTIONS / action, inputs, workspace=tmp_path, env=env)
    install = run.steps[0]
    assert install.outcome == "success", run.log
    pip_args = record.read_text().splitlines()
    assert pip_args == ["install", "--disable-pip-version-check", requirement]
    if action == "setup":
        assert run.outputs["version"] == install.outputs["version"]
        assert run.outputs["version"]


@pytest.mark.parametrize(("value", "installs"), [("false", False), ("no", False), ("yes", True)])
def test_install_accepts_the_boolean_spellings_of_other_inputs(
    tmp_path: Path, fake_python: Path, value: str, installs: bool
) -> None:
    record = tmp_path / "pip-args"
    env = {"RECORD": str(record), "REAL_PYTHON": sys.executable}
    inputs = {"python": str(fake_python), "install": value, "files": "nowhere"}
    run = run_action(ACTIONS / "plan", inputs, workspace=tmp_path, env=env)
    assert run.steps[0].outcome == "success", run.log
    assert record.exists() is installs  # 'yes' was once silently taken for 'false'


def test_install_refuses_a_value_that_is_not_a_boolean(tmp_path: Path, fake_python: Path) -> None:
    record = tmp_path / "pip-args"
    env = {"RECORD": str(record), "REAL_PYTHON": sys.executable}
    inputs = {"python": str(fake_python), "install": "maybe", "files": "nowhere"}
    run = run_action(ACTIONS / "plan", inputs, workspace=tmp_path, env=env)
    assert run.steps[0].outcome == "failure"
    assert "'maybe' is not a boolean input value" in run.log
    assert not record.exists()
