"""The connection inputs every server action shares: user/password, token, TLS files (TLS first
too) and a credentials file, through the publish action against servers that require them."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from gh_actions.locations import ACTIONS, RunAction

from conftest import BOTH
from headwater.testing import ServerProcess
from support.certs import TestPKI
from support.certs import pki_fixture as pki_fixture  # registers the session fixture "pki"
from support.connectopts import tls_first_server


def serve(*args: str) -> Iterator[ServerProcess]:
    srv = ServerProcess("headwater", args=args)
    srv.start()
    try:
        yield srv
    finally:
        srv.cleanup()


@pytest.fixture
def password_server() -> Iterator[ServerProcess]:
    yield from serve("--user", "ci", "--pass", "s3cret")


@pytest.fixture
def token_server() -> Iterator[ServerProcess]:
    yield from serve("--auth", "t0ken")


@pytest.fixture
def mutual_tls_server(pki: TestPKI) -> Iterator[ServerProcess]:
    yield from serve(
        "--tlscert",
        str(pki.server_cert),
        "--tlskey",
        str(pki.server_key),
        "--tlsverify",
        "--tlscacert",
        str(pki.ca_cert),
    )


def publish(act: RunAction, url: str, **connection: str) -> bool:
    run = act("publish", server=url, subject="ci.ping", payload="x", timeout="2s", **connection)
    return run.ok


def test_user_and_password(password_server: ServerProcess, act: RunAction) -> None:
    assert publish(act, password_server.url, user="ci", password="s3cret")
    assert not publish(act, password_server.url, user="ci", password="wrong")
    assert not publish(act, password_server.url)


def test_token(token_server: ServerProcess, act: RunAction) -> None:
    assert publish(act, token_server.url, token="t0ken")
    assert not publish(act, token_server.url, token="other")


def test_tls_files(mutual_tls_server: ServerProcess, act: RunAction, pki: TestPKI) -> None:
    url = mutual_tls_server.url.replace("nats://", "tls://")
    files = {
        "tls_ca": str(pki.ca_cert),
        "tls_cert": str(pki.client_cert),
        "tls_key": str(pki.client_key),
    }
    assert publish(act, url, **files)
    assert not publish(act, url, tls_ca=str(pki.ca_cert))  # the server wants a client cert


@pytest.mark.parametrize("kind", BOTH)
def test_tls_first(act: RunAction, pki: TestPKI, tmp_path: Path, kind: str) -> None:
    """A server with ``handshake_first``."""
    with tls_first_server(tmp_path, pki, kind) as server:
        ca = str(pki.ca_cert)
        assert publish(act, server.url, tls_ca=ca, tls_first="true")
        assert not publish(act, server.url, tls_ca=ca, tls_first="false")


def _sourced(script: str, env: dict[str, str]) -> list[str]:
    """What ``script`` prints after sourcing gh-actions/setup/lib.sh with ``env``."""
    lib = str(ACTIONS / "setup" / "lib.sh")
    command = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", 'source "$1"; ' + script]
    proc = subprocess.run(
        [*command, "bash", lib],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.splitlines()


def connection_flags(env: dict[str, str]) -> list[str]:
    """The CLI flags gh-actions/setup/lib.sh builds from the actions' HW_* variables."""
    return _sourced('for flag in "${HW_CONNECTION[@]}"; do printf "%s\\n" "$flag"; done', env)


def secret_environment(env: dict[str, str]) -> dict[str, str]:
    """The NATS_PASSWORD/NATS_TOKEN lib.sh exports for the CLI."""
    lines = _sourced("env | grep -E '^NATS_(PASSWORD|TOKEN)=' || true", env)
    return dict(line.split("=", 1) for line in lines)


def test_every_connection_input_becomes_its_cli_flag() -> None:
    env = {
        "HW_SERVER": "tls://a:4222,tls://b:4222",
        "HW_CREDENTIALS": "/run/ci user.creds",
        "HW_USER": "ci",
        "HW_PASSWORD": "pass word",
        "HW_TOKEN": "t0ken",
        "HW_NKEY": "/run/ci user.nk",
        "HW_TLS_CERT": "c.pem",
        "HW_TLS_KEY": "k.pem",
        "HW_TLS_CA": "ca.pem",
        "HW_TLS_FIRST": "true",
        "HW_JS_DOMAIN": "hub",
        "HW_TIMEOUT": "3s",
    }
    assert connection_flags(env) == [
        "--server", "tls://a:4222,tls://b:4222",
        "--creds", "/run/ci user.creds",
        "--user", "ci",
        "--nkey", "/run/ci user.nk",
        "--tlscert", "c.pem",
        "--tlskey", "k.pem",
        "--tlsca", "ca.pem",
        "--tlsfirst",
        "--js-domain", "hub",
        "--timeout", "3s",
    ]  # fmt: skip
    assert connection_flags({"HW_SERVER": "", "HW_TOKEN": "", "HW_TLS_FIRST": "false"}) == []


def test_secrets_reach_the_cli_through_its_environment_never_argv() -> None:
    """A flag's value is in /proc/<pid>/cmdline, readable by every process on the runner;
    the CLI reads NATS_PASSWORD and NATS_TOKEN itself."""
    env = {"HW_USER": "ci", "HW_PASSWORD": "pass word", "HW_TOKEN": "t0ken"}
    assert connection_flags(env) == ["--user", "ci"]
    exported = secret_environment(env)
    assert exported == {"NATS_PASSWORD": "pass word", "NATS_TOKEN": "t0ken"}
    assert secret_environment({"HW_PASSWORD": "", "HW_TOKEN": ""}) == {}


def test_server_falls_back_to_nats_url(token_server: ServerProcess, act: RunAction) -> None:
    url = token_server.url.replace("nats://", "nats://t0ken@")
    run = act("publish", env={"NATS_URL": url}, subject="ci.ping", payload="x")
    assert run.ok, run.log
    run = act("publish", env={"NATS_URL": token_server.url}, subject="ci.ping", payload="x")
    assert not run.ok
