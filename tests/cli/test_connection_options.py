"""``--js-domain``, ``--nkey`` and ``--tlsfirst``: every JetStream request of the CLI goes to the
domain's API (``$JS.<domain>.API``), on both servers; an nkey seed authenticates and TLS can come
before the server's INFO, on both servers too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cli.conftest import Cli
from typer.testing import CliRunner

from conftest import BOTH
from headwater.cli.app import app
from headwater.testing import ServerProcess
from support.certs import TestPKI
from support.certs import pki_fixture as pki_fixture  # registers the session fixture "pki"
from support.connectopts import DOCUMENTS, DOMAIN, domain_server, nkey_server, tls_first_server


@pytest.fixture(params=BOTH, scope="module")
def hub(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A JetStream server of each kind in domain ``hub``."""
    with domain_server(request.param, tmp_path_factory.mktemp("domain")) as server:
        yield server


@pytest.fixture(scope="module")
def cli_hub(hub: ServerProcess) -> Cli:
    return Cli(hub.url)


def in_domain(*args: str) -> tuple[str, ...]:
    return ("--js-domain", DOMAIN, *args)


def test_stream_and_consumer_commands_in_the_domain(cli_hub: Cli) -> None:
    created = cli_hub.json(*in_domain("stream", "add", "DSTREAM", "--subjects", "dstream.*"))
    assert created["config"]["name"] == "DSTREAM"
    assert "DSTREAM" in cli_hub.json(*in_domain("stream", "ls", "--names"))
    cli_hub.ok(*in_domain("pub", "dstream.a", "hello {{Count}}", "--count", "2"))
    info = cli_hub.json(*in_domain("stream", "info", "DSTREAM"))
    assert info["state"]["messages"] == 2
    # A pull consumer read through nats-py's JetStream context (CONSUMER.MSG.NEXT)
    cli_hub.ok(*in_domain("consumer", "add", "DSTREAM", "READER", "--pull", "--ack", "explicit"))
    got = cli_hub.json_lines(*in_domain("consumer", "next", "DSTREAM", "READER", "--count", "2"))
    assert [msg["data"] for msg in got] == ["hello 1", "hello 2"]
    assert cli_hub.json(*in_domain("consumer", "info", "DSTREAM", "READER"))["num_pending"] == 0


def test_kv_commands_in_the_domain(cli_hub: Cli) -> None:
    cli_hub.ok(*in_domain("kv", "add", "DKV", "--history", "2"))
    put = cli_hub.json(*in_domain("kv", "put", "DKV", "color", "blue"))
    assert put == {"bucket": "DKV", "key": "color", "revision": 1}
    entry = cli_hub.json(*in_domain("kv", "get", "DKV", "color"))
    assert (entry["value"], entry["revision"]) == ("blue", 1)
    assert "DKV" in cli_hub.json(*in_domain("kv", "ls"))
    assert cli_hub.json(*in_domain("kv", "ls", "DKV")) == ["color"]
    cli_hub.ok(*in_domain("kv", "rm", "DKV", "--force"))
    assert "DKV" not in cli_hub.json(*in_domain("kv", "ls"))


def test_plan_and_apply_in_the_domain(cli_hub: Cli, tmp_path: Path) -> None:
    documents = tmp_path / "resources.yaml"
    documents.write_text(DOCUMENTS)
    plan = cli_hub(*in_domain("plan", "-f", str(documents)))
    assert plan.exit_code == 2, plan.output  # changes present
    applied = cli_hub.ok(*in_domain("apply", "-f", str(documents), "--yes"))
    assert "DORDERS" in applied.output
    again = cli_hub(*in_domain("plan", "-f", str(documents)))
    assert again.exit_code == 0, again.output
    assert (
        cli_hub.json(*in_domain("stream", "info", "KV_DSETTINGS"))["config"]["max_msgs_per_subject"]
        == 3
    )


def test_another_domain_gets_no_answer(cli_hub: Cli, tmp_path: Path) -> None:
    """Nothing serves ``$JS.other.API`` on a ``hub`` server: each way of reaching JetStream
    fails with an error naming that prefix, which shows the domain is what the CLI uses."""
    cli_hub.ok(*in_domain("stream", "add", "THERE", "--subjects", "there.*"))
    cli_hub.ok(*in_domain("kv", "add", "THEREKV"))
    other = ("--js-domain", "other", "--timeout", "2s")

    listed = cli_hub.fails(*other, "stream", "ls")
    assert "$JS.other.API.STREAM" in listed.stderr
    assert "--js-domain other" in listed.stderr
    assert "$JS.other.API" in cli_hub.fails(*other, "stream", "info", "THERE").stderr

    kv = cli_hub.fails(*other, "kv", "get", "THEREKV", "k")
    assert "no JetStream responder on $JS.other.API" in kv.stderr
    assert "--js-domain other" in kv.stderr

    documents = tmp_path / "resources.yaml"
    documents.write_text(DOCUMENTS)
    plan = cli_hub.fails(*other, "plan", "-f", str(documents))
    assert "$JS.other.API" in plan.stderr


def test_the_environment_supplies_the_domain(hub: ServerProcess) -> None:
    runner = CliRunner()
    env = {"NATS_URL": hub.url, "NATS_JS_DOMAIN": DOMAIN}
    result = runner.invoke(app, ["--json", "account", "info"], env=env)
    assert result.exit_code == 0, result.output
    env["NATS_JS_DOMAIN"] = "other"
    result = runner.invoke(app, ["--timeout", "2s", "account", "info"], env=env)
    assert result.exit_code == 1
    assert "$JS.other.API.INFO" in result.stderr
    # the flag beats the variable
    result = runner.invoke(app, ["--js-domain", DOMAIN, "account", "info"], env=env)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("domain", ["a.b", "hub *"])
def test_a_domain_must_be_one_subject_token(domain: str) -> None:
    result = CliRunner().invoke(app, ["--js-domain", domain, "stream", "ls"])
    assert result.exit_code == 1
    assert "Invalid value for --js-domain" in result.output
    assert "one subject token expected" in result.output
    assert "Traceback" not in result.output and "pydantic" not in result.output


@pytest.mark.parametrize("kind", BOTH)
def test_nkey_seed_authenticates(tmp_path: Path, kind: str) -> None:
    with nkey_server(tmp_path, kind) as (server, seed):
        cli = Cli(server.url)
        info = cli.json("--nkey", str(seed), "account", "info")
        assert "api" in info
        cli.ok("--nkey", str(seed), "stream", "add", "SEEDED", "--subjects", "seeded.*")
        assert cli.json("--nkey", str(seed), "stream", "ls", "--names") == ["SEEDED"]

        refused = cli.fails("--timeout", "2s", "account", "info")
        assert "Authorization Violation" in refused.stderr

        from_env = CliRunner().invoke(
            app, ["--json", "stream", "ls"], env={"NATS_URL": server.url, "NATS_NKEY": str(seed)}
        )
        assert from_env.exit_code == 0, from_env.output

        missing = cli.fails("--nkey", str(tmp_path / "missing.nk"), "account", "info")
        assert "missing.nk" in missing.stderr


@pytest.mark.parametrize("kind", BOTH)
def test_tls_first(tmp_path: Path, pki: TestPKI, kind: str) -> None:
    """A server with ``handshake_first`` answers only a client that starts TLS at once; the
    others wait for an INFO that never comes and fail with exit code 1."""
    with tls_first_server(tmp_path, pki, kind) as server:
        cli = Cli(server.url)
        tls = ("--tlsca", str(pki.ca_cert))
        cli.ok(*tls, "--tlsfirst", "stream", "add", "FIRST", "--subjects", "first.*")
        assert cli.json(*tls, "--tlsfirst", "stream", "ls", "--names") == ["FIRST"]
        late = cli.fails(*tls, "--timeout", "1s", "stream", "ls")
        assert "cannot connect" in late.stderr


def test_an_empty_server_list_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["-s", " , ", "stream", "ls"], env={"NATS_URL": None})
    assert result.exit_code == 1
    assert "Invalid value for --server / $NATS_URL" in result.output
    assert "at least one server URL is required" in result.output
