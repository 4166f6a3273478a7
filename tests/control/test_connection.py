"""ConnectionSettings: the one place every way in turns options into a nats-py connection."""

from __future__ import annotations

import asyncio
import gc
import os

import pytest
from pydantic import ValidationError

from headwater.control import api
from headwater.control.backup import backup_stream, restore_stream
from headwater.control.connection import DEFAULT_URL, ConnectionSettings
from headwater.control.documents import parse_documents
from headwater.control.reconcile import apply_resources, plan_resources
from headwater.testing import ServerProcess
from support.certs import pki_fixture as pki_fixture  # registers the session fixture "pki"
from support.connectopts import DOCUMENTS, DOMAIN, domain_server, nkey_server, tls_first_server


def test_defaults_to_the_local_server():
    assert ConnectionSettings.from_env({}).servers == (DEFAULT_URL,)


def test_environment_supplies_url_and_credentials():
    settings = ConnectionSettings.from_env(
        {"NATS_URL": "nats://a:1, nats://b:2", "NATS_CREDS": "/x.creds", "NATS_TOKEN": "t"}
    )
    assert settings.servers == ("nats://a:1", "nats://b:2")
    assert settings.credentials == "/x.creds"
    assert settings.token == "t"


def test_explicit_values_beat_the_environment_and_none_does_not():
    settings = ConnectionSettings.from_env(
        {"NATS_URL": "nats://env:1", "NATS_USER": "env"}, servers="nats://flag:2", user=None
    )
    assert settings.servers == ("nats://flag:2",)
    assert settings.user == "env"


def test_empty_server_list_is_an_error():
    with pytest.raises(ValidationError, match="at least one server"):
        ConnectionSettings(servers=" , ")


def test_no_tls_files_means_no_context():
    assert ConnectionSettings().ssl_context() is None


async def test_connects_with_user_and_password():
    proc = ServerProcess(kind="headwater", args=["--user", "u", "--pass", "p"]).start()
    try:
        nc = await ConnectionSettings(servers=proc.url, user="u", password="p").connect()
        assert nc.is_connected
        await nc.close()
        with pytest.raises(Exception, match=r"[Aa]uthorization"):
            await ConnectionSettings(servers=proc.url, user="u", password="bad").connect()
    finally:
        proc.stop()
        proc.cleanup()


def test_environment_supplies_nkey_and_domain():
    settings = ConnectionSettings.from_env({"NATS_NKEY": "/u.nk", "NATS_JS_DOMAIN": "hub"})
    assert (settings.nkey, settings.js_domain) == ("/u.nk", "hub")
    assert settings.api_prefix == "$JS.hub.API"
    assert ConnectionSettings().api_prefix == "$JS.API"


@pytest.mark.parametrize("domain", ["a.b", "a b", "hub.*", ">"])
def test_a_domain_is_one_subject_token(domain):
    with pytest.raises(ValidationError, match="invalid JetStream domain"):
        ConnectionSettings(js_domain=domain)


@pytest.mark.parametrize("kind", ["headwater", "nats"])
async def test_domain_settings_send_every_request_to_the_domain(kind, tmp_path):
    """Plan, apply, a backup and restore, all through ``$JS.hub.API``; a connection set to
    another domain finds no JetStream there, which shows the prefix is what is used."""
    resources, errors = parse_documents(DOCUMENTS)
    assert not errors
    with domain_server(kind, tmp_path) as server:
        nc = await ConnectionSettings(servers=server.url, js_domain=DOMAIN).connect()
        try:
            _plan, report = await apply_resources(nc, resources, owner="cli")
            assert report.ok and len(report.applied) == 2
            again, _ = await plan_resources(nc, resources, owner="cli")
            assert not again.has_changes
            await nc.publish("dorders.1", b"one")
            await nc.flush()
            result = await backup_stream(nc, "DORDERS", tmp_path / "backup")
            assert result.messages == 1
            await api.request(nc, "STREAM.DELETE.DORDERS")
            await restore_stream(nc, tmp_path / "backup")
            info = await api.request(nc, "STREAM.INFO.DORDERS")
            assert info["state"]["messages"] == 1
        finally:
            await nc.close()
        elsewhere = await ConnectionSettings(servers=server.url, js_domain="other").connect()
        try:
            with pytest.raises(api.ApiUnavailable, match=r"\$JS\.other\.API"):
                await plan_resources(elsewhere, resources, owner="cli", timeout=1)
        finally:
            await elsewhere.close()


@pytest.mark.parametrize("kind", ["headwater", "nats"])
async def test_nkey_seed_authenticates(kind, tmp_path):
    with nkey_server(tmp_path, kind) as (server, seed):
        nc = await ConnectionSettings(servers=server.url, nkey=str(seed)).connect()
        try:
            assert "api" in await api.request(nc, "INFO")
        finally:
            await nc.close()
        with pytest.raises(Exception, match=r"[Aa]uthorization"):
            await ConnectionSettings(servers=server.url).connect()


@pytest.mark.parametrize("kind", ["headwater", "nats"])
async def test_tls_first(kind, tmp_path, pki):
    """TLS before the server's INFO. Without ``tls_first`` the client waits for an INFO that
    never comes."""
    with tls_first_server(tmp_path, pki, kind) as server:
        first = ConnectionSettings(servers=server.url, tls_ca=str(pki.ca_cert), tls_first=True)
        nc = await first.connect()
        try:
            assert "api" in await api.request(nc, "INFO")
        finally:
            await nc.close()
        late = ConnectionSettings(servers=server.url, tls_ca=str(pki.ca_cert), connect_timeout=1)
        with pytest.raises(Exception):  # noqa: B017 - nats-py reports it as a timeout or EOF
            await late.connect()


async def test_a_failed_connect_releases_its_socket(tmp_path, pki):
    """The operator retries unreachable servers on a timer: each failed attempt must close
    what it opened rather than leave the socket to the garbage collector."""
    with tls_first_server(tmp_path, pki, "nats") as server:
        late = ConnectionSettings(servers=server.url, tls_ca=str(pki.ca_cert), connect_timeout=1)
        gc.collect()
        gc.disable()
        try:
            before = len(os.listdir("/proc/self/fd"))
            for _ in range(3):
                with pytest.raises(OSError):  # a timeout waiting for INFO
                    await late.connect()
            await asyncio.sleep(0.1)
            assert len(os.listdir("/proc/self/fd")) <= before
        finally:
            gc.enable()


@pytest.mark.parametrize(
    "content",
    ["", "not a creds file\n", "-----BEGIN NATS USER JWT-----\n\n------END NATS USER JWT------\n"],
)
async def test_a_file_that_is_not_creds_is_refused_at_once(tmp_path, content: str) -> None:
    """nats-py reads a creds file line by line until its JWT armour line, forever when there
    is none: the CLI, the operator and the provider hung on a wrong file."""
    path = tmp_path / "user.creds"
    path.write_text(content)
    # nats-py reads the file when the server's INFO carries a nonce (nkey or JWT auth).
    with nkey_server(tmp_path, "headwater") as (server, _seed):
        settings = ConnectionSettings(servers=(server.url,), credentials=str(path))
        with pytest.raises(ConnectionError, match=r"is not a \.creds file"):
            await asyncio.wait_for(settings.connect(), 5)
        missing = ConnectionSettings(
            servers=(server.url,), credentials=str(tmp_path / "nowhere.creds")
        )
        with pytest.raises(ConnectionError, match="cannot read credentials file"):
            await asyncio.wait_for(missing.connect(), 5)
