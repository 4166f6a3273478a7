"""``-s`` pointing at HTTP: an ``http://`` URL or the monitoring port says so in one line.

Before, ``-s http://host:8222`` failed with "Name or service not known" and
``-s nats://host:<monitoring port>`` with a bare TimeoutError, neither of which says that the
monitoring port speaks HTTP, not NATS. Servers of both kinds run with ``-m`` (monitoring).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner, Result

from headwater.cli.app import app
from headwater.testing import ServerProcess

from ..conftest import BOTH, start_server
from .conftest import describe


@pytest.fixture(params=BOTH, scope="module")
def monitored(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """A server with JetStream and its HTTP monitoring port on an ephemeral port."""
    yield from start_server(request.param, jetstream=True, args=["-m", "-1"])


def run(*args: str, env: dict[str, str | None] | None = None) -> Result:
    result = CliRunner().invoke(app, list(args), env={"NATS_URL": None, **(env or {})})
    assert result.exit_code == 1, describe(result)
    assert "Traceback" not in result.output
    return result


def test_an_http_url_is_not_a_nats_url():
    started = time.monotonic()
    result = run("-s", "http://127.0.0.1:8222", "stream", "ls")
    assert result.stderr.strip() == (
        "Error: http://127.0.0.1:8222 is not a NATS URL: use nats://127.0.0.1:4222 "
        "(8222 is the HTTP monitoring port)"
    )
    assert time.monotonic() - started < 2  # refused before connecting
    from_env = run("kv", "ls", env={"NATS_URL": "nats://a:4222,https://b.example"})
    assert from_env.stderr.strip() == (
        "Error: https://b.example is not a NATS URL: use nats://b.example:4222 "
        "(or tls://b.example:4222 for TLS)"
    )


def test_an_unknown_scheme_is_refused():
    result = run("-s", "nat://127.0.0.1:4222", "stream", "ls")
    assert result.stderr.strip() == (
        "Error: nat://127.0.0.1:4222: unknown URL scheme nat://; use nats://, tls://, ws:// "
        "or wss://"
    )


def test_http_to_the_monitoring_port_is_refused(monitored: ServerProcess):
    url = f"http://127.0.0.1:{monitored.http_port}"
    result = run("-s", url, "stream", "ls")
    assert f"Error: {url} is not a NATS URL: use nats://127.0.0.1:" in result.stderr


@pytest.mark.parametrize("scheme", ["nats://", ""])
def test_the_monitoring_port_is_named_an_http_port(monitored: ServerProcess, scheme: str):
    url = f"{scheme}127.0.0.1:{monitored.http_port}"
    result = run("-s", url, "--timeout", "1s", "stream", "ls")
    assert result.stderr.strip() == (
        f"Error: cannot connect to {url}: it is an HTTP port (a monitoring port?), not a NATS "
        "one; use the client port (4222 by default)"
    )
    # the client port of the same server works
    ok = CliRunner().invoke(app, ["-s", monitored.url, "stream", "ls"], env={"NATS_URL": None})
    assert ok.exit_code == 0, describe(ok)
