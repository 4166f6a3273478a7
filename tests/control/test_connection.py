"""ConnectionSettings: the one place every way in turns options into a nats-py connection."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from headwater.control.connection import DEFAULT_URL, ConnectionSettings
from headwater.testing import ServerProcess


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
