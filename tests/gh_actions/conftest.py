"""Fixtures for the GitHub Actions tests: JetStream servers of both kinds and an action caller.

Every action runs with ``install: 'false'`` (headwater is installed in the test environment)
and ``python`` set to this interpreter, so the CLI under test is this checkout's.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from gh_actions.locations import ACTIONS, RunAction

from conftest import BOTH, start_server
from headwater.testing import ServerProcess
from support.actions_runner import ActionRun, run_action


@pytest.fixture(params=BOTH)
def js_any(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """A fresh JetStream server: headwater-server, then nats-server."""
    yield from start_server(request.param, jetstream=True)


@pytest.fixture
def headwater_js() -> Iterator[ServerProcess]:
    """A fresh JetStream headwater-server."""
    yield from start_server("headwater", jetstream=True)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The checkout directory ($GITHUB_WORKSPACE) the actions run in."""
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture
def act(workspace: Path) -> RunAction:
    """``act("plan", files="jetstream", server=url)`` runs gh-actions/plan in the workspace."""

    def call(name: str, env: dict[str, str] | None = None, **inputs: str) -> ActionRun:
        given = {"install": "false", "python": sys.executable}
        given |= {key.replace("_", "-"): value for key, value in inputs.items()}
        return run_action(ACTIONS / name, given, workspace=workspace, env=env)

    return call
