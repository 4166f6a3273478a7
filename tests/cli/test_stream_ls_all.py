"""``stream ls`` hides the streams behind KV buckets, object stores and MQTT state unless
``--all``/``-a``, as natscli's ``nats stream ls`` does (jsm.go's ``IsInternalStream``: names
starting ``KV_``, ``OBJ_`` or ``$MQTT_``); ``--names`` lists every stream, as natscli's does.
Checked on both servers."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.differential


@pytest.fixture(scope="module")
def streams(cli):
    """A user stream, a KV bucket's stream and an object store's (created by name)."""
    cli.ok("stream", "add", "HIDE1", "--subjects", "hide1.*")
    cli.ok("kv", "add", "HIDEKV")
    cli.ok("stream", "add", "OBJ_HIDEOBJ", "--subjects", "$O.HIDEOBJ.>")
    yield
    for name in ("HIDE1", "KV_HIDEKV", "OBJ_HIDEOBJ"):
        cli.ok("stream", "rm", name, "--force")


def listed(cli, *flags: str) -> set[str]:
    return {info["config"]["name"] for info in cli.json("stream", "ls", *flags)}


def test_ls_hides_kv_and_object_streams(cli, streams):
    names = listed(cli)
    assert "HIDE1" in names
    assert not names & {"KV_HIDEKV", "OBJ_HIDEOBJ"}
    table = cli.ok("stream", "ls").stdout
    assert "HIDE1" in table and "KV_HIDEKV" not in table and "OBJ_HIDEOBJ" not in table


@pytest.mark.parametrize("flag", ["--all", "-a"])
def test_ls_all_shows_them(cli, streams, flag):
    assert {"HIDE1", "KV_HIDEKV", "OBJ_HIDEOBJ"} <= listed(cli, flag)
    table = cli.ok("stream", "ls", flag).stdout
    assert "KV_HIDEKV" in table and "OBJ_HIDEOBJ" in table


def test_ls_names_lists_every_stream(cli, streams):
    assert {"HIDE1", "KV_HIDEKV", "OBJ_HIDEOBJ"} <= set(cli.json("stream", "ls", "--names"))


def test_only_system_streams_says_how_to_see_them(cli, streams):
    result = cli.ok("stream", "ls", "--subject", "$KV.HIDEKV.>")
    assert "No streams defined, pass -a to include system streams" in result.stdout
    assert cli.json("stream", "ls", "--subject", "$KV.HIDEKV.>") == []
