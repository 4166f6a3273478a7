"""Fixtures for the ``headwater`` CLI tests: JetStream servers of both kinds and a runner.

``js_server`` (root conftest) is a module-scoped JetStream server of each kind, Headwater and
nats-server: every CLI behaviour is checked against both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from headwater.cli.app import app
from headwater.testing import ServerProcess


@dataclass
class Cli:
    """Runs ``headwater -s <server> ARGS`` in-process and returns click's Result."""

    url: str

    def __call__(self, *args: str, input: str | None = None) -> Result:
        runner = CliRunner()
        return runner.invoke(app, ["-s", self.url, *args], input=input, env={"NATS_URL": None})

    def ok(self, *args: str, input: str | None = None) -> Result:
        """Run and require exit code 0, showing the output when it fails."""
        result = self(*args, input=input)
        assert result.exit_code == 0, describe(result)
        return result

    def json(self, *args: str) -> Any:
        """Run with ``--json`` and parse stdout."""
        return json.loads(self.ok(*args, "--json").stdout)

    def fails(self, *args: str, input: str | None = None) -> Result:
        """Run and require exit code 1 with a one-line error, never a traceback."""
        result = self(*args, input=input)
        assert result.exit_code == 1, describe(result)
        assert result.exception is None or isinstance(result.exception, SystemExit), describe(
            result
        )
        assert "Traceback" not in result.output
        return result

    def json_lines(self, *args: str) -> list[dict[str, Any]]:
        """Run with ``--json`` and parse stdout as one JSON object per line."""
        text = self.ok(*args, "--json").stdout
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def describe(result: Result) -> str:
    streams = f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return f"exit {result.exit_code}\n{streams}\n{result.exception!r}"


@pytest.fixture(scope="module")
def cli(js_server: ServerProcess) -> Cli:
    return Cli(js_server.url)


@pytest.fixture(scope="module")
def cli_pair(js_server_pair: tuple[ServerProcess, ServerProcess]) -> tuple[Cli, Cli]:
    """A runner for a Headwater server and one for a nats-server, to compare their output."""
    ours, theirs = js_server_pair
    return Cli(ours.url), Cli(theirs.url)


@pytest.fixture(scope="module")
def srv() -> Iterator[ServerProcess]:
    """A headwater-server of the module's own, for the tests of Headwater-only features
    (its backup archive format, restore --salvage)."""
    with ServerProcess("headwater", jetstream=True) as server:
        yield server


def run_cli(srv: ServerProcess, *args: str) -> Result:
    """``headwater -s <srv> ARGS`` in process."""
    return CliRunner().invoke(app, ["-s", srv.url, *args])
