"""The ``$JS.API`` surface of an in-process Headwater server: envelopes, stats, persistence."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from headwater.server.config.settings import JetStreamSettings, Settings
from headwater.server.node import Server
from headwater.server.services import attach_services

Start = Callable[..., Awaitable[tuple[Server, Client]]]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    """``await start(store=...)`` -> (server, client); everything is stopped after the test."""
    running: list[tuple[Server, Client]] = []

    async def _start(store: Path = tmp_path / "store", **js: Any) -> tuple[Server, Client]:
        settings = Settings(
            host="127.0.0.1",
            port=-1,
            jetstream=JetStreamSettings(enabled=True, store_dir=str(store), **js),
        )
        srv = Server(settings)
        attach_services(srv)
        await srv.start()
        nc = await nats.connect(f"nats://127.0.0.1:{srv.port}", allow_reconnect=False)
        running.append((srv, nc))
        return srv, nc

    yield _start
    for srv, nc in running:
        if not nc.is_closed:
            await nc.close()
        await srv.shutdown()


async def stop(srv: Server, nc: Client) -> None:
    await nc.close()
    await srv.shutdown()


async def api(nc: Client, subject: str, body: bytes | dict[str, Any] = b"", **kw: Any) -> Any:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    msg = await nc.request(f"$JS.API.{subject}", raw, timeout=2, **kw)
    return json.loads(msg.data)


async def test_account_info_counts_requests_errors_and_bytes(start: Start) -> None:
    _, nc = await start()
    first = await api(nc, "INFO")
    assert first["type"] == "io.nats.jetstream.api.v1.account_info_response"
    assert first["api"]["total"] == 0 and first["api"]["errors"] == 0
    await api(nc, "STREAM.CREATE.W", {"name": "W", "subjects": ["world"]})
    await api(nc, "STREAM.INFO.NOPE")
    await nc.request("world", b"hello world!", timeout=2)
    info = await api(nc, "INFO")
    assert info["api"] == {"level": 1, "total": 3, "errors": 1}
    assert info["storage"] == 47, "a 12-byte message on 'world' counts 47 bytes"
    assert (info["streams"], info["consumers"], info["memory"]) == (1, 0, 0)
    assert info["limits"] == {
        "max_memory": -1,
        "max_storage": -1,
        "max_streams": -1,
        "max_consumers": -1,
        "max_ack_pending": -1,
        "memory_max_stream_bytes": -1,
        "storage_max_stream_bytes": -1,
        "max_bytes_required": False,
    }


async def test_unknown_api_subjects_get_no_reply_but_missing_direct_get_fails_fast(
    start: Start,
) -> None:
    _, nc = await start()
    with pytest.raises(nats.errors.TimeoutError):
        await nc.request("$JS.API.STREAM.FROB.X", b"", timeout=0.3)
    with pytest.raises(nats.errors.NoRespondersError):
        await nc.request("$JS.API.DIRECT.GET.MISSING", b'{"seq":1}', timeout=2)
    assert (await api(nc, "INFO"))["api"]["total"] == 0


async def test_required_api_level_header(start: Start) -> None:
    _, nc = await start()
    too_high = await api(nc, "INFO", headers={"Nats-Required-Api-Level": "99"})
    assert too_high["error"] == {
        "code": 412,
        "err_code": 10185,
        "description": "JetStream minimum api level required",
    }
    ok = await api(nc, "INFO", headers={"Nats-Required-Api-Level": "1"})
    assert "error" not in ok


async def test_streams_survive_a_restart(tmp_path: Path, start: Start) -> None:
    store = tmp_path / "persist"
    srv, nc = await start(store)
    js = nc.jetstream()
    await js.add_stream(name="P", subjects=["p.>"], max_msgs_per_subject=2)
    await js.add_stream(name="MEM", subjects=["mem"], storage="memory")
    for i in range(5):
        await js.publish(f"p.{i % 2}", b"m%d" % i, headers={"Nats-Msg-Id": f"id{i}"})
    await js.publish("mem", b"gone after restart")
    before = await api(nc, "STREAM.INFO.P")
    await stop(srv, nc)

    meta = store / "jetstream" / "$G" / "streams" / "P" / "meta.inf"
    assert json.loads(meta.read_text())["name"] == "P"
    srv, nc = await start(store)
    after = await api(nc, "STREAM.INFO.P")
    assert after["created"] == before["created"]
    assert after["state"] == before["state"]
    assert after["config"] == before["config"]
    names = await api(nc, "STREAM.NAMES")
    assert names["streams"] == ["P"], "memory streams are not kept across restarts"
    dup = await nc.request("p.0", b"again", headers={"Nats-Msg-Id": "id4"}, timeout=2)
    assert dup.data == b'{"stream":"P","seq":5,"duplicate": true}'
    wrong = await nc.request("p.0", b"x", headers={"Nats-Expected-Last-Msg-Id": "nope"}, timeout=2)
    assert json.loads(wrong.data)["error"]["description"] == "wrong last msg ID: id4"
    assert (await nc.jetstream().publish("p.1", b"next")).seq == 6


async def test_delete_removes_the_stream_directory(tmp_path: Path, start: Start) -> None:
    store = tmp_path / "del"
    _, nc = await start(store)
    await api(nc, "STREAM.CREATE.GONE", {"name": "GONE"})
    directory = store / "jetstream" / "$G" / "streams" / "GONE"
    assert directory.is_dir()
    assert await api(nc, "STREAM.DELETE.GONE") == {
        "type": "io.nats.jetstream.api.v1.stream_delete_response",
        "success": True,
    }
    assert not directory.exists()
    with pytest.raises(nats.errors.NoRespondersError):
        await nc.request("GONE", b"x", timeout=2)


async def test_update_moves_subjects_and_direct_access(start: Start) -> None:
    _, nc = await start()
    await api(nc, "STREAM.CREATE.U", {"name": "U", "subjects": ["old"]})
    await nc.request("old", b"1", timeout=2)
    with pytest.raises(nats.errors.NoRespondersError):
        await nc.request("$JS.API.DIRECT.GET.U", b'{"seq":1}', timeout=2)
    updated = await api(
        nc, "STREAM.UPDATE.U", {"name": "U", "subjects": ["new"], "allow_direct": True}
    )
    assert updated["config"]["subjects"] == ["new"]
    assert "cluster" not in updated and "did_create" not in updated
    with pytest.raises(nats.errors.NoRespondersError):
        await nc.request("old", b"2", timeout=2)
    ack = await nc.request("new", b"3", timeout=2)
    assert json.loads(ack.data) == {"stream": "U", "seq": 2}
    got = await nc.request("$JS.API.DIRECT.GET.U.new", b"", timeout=2)
    assert got.data == b"3" and got.headers is not None and got.headers["Nats-Sequence"] == "2"


async def test_names_and_list_page(start: Start) -> None:
    _, nc = await start()
    for i in range(1030):
        await api(nc, f"STREAM.CREATE.S{i:04d}", {"name": f"S{i:04d}", "storage": "memory"})
    names = await api(nc, "STREAM.NAMES")
    assert (names["total"], names["offset"], names["limit"]) == (1030, 0, 1024)
    assert len(names["streams"]) == 1024 and names["streams"][0] == "S0000"
    rest = await api(nc, "STREAM.NAMES", {"offset": 1024})
    assert rest["streams"] == [f"S{i:04d}" for i in range(1024, 1030)]
    listed = await api(nc, "STREAM.LIST", {"offset": 1000})
    assert (listed["total"], listed["offset"], listed["limit"]) == (1030, 1000, 256)
    assert [s["config"]["name"] for s in listed["streams"]] == [
        f"S{i:04d}" for i in range(1000, 1030)
    ]
    assert "_nats.ver" not in listed["streams"][0]["config"]["metadata"]
    filtered = await api(nc, "STREAM.NAMES", {"subject": "S0007"})
    assert filtered["streams"] == ["S0007"]


async def test_monitoring_hooks(start: Start) -> None:
    srv, nc = await start(sync_interval=5.0)
    await api(nc, "STREAM.CREATE.V", {"name": "V", "max_bytes": 1000})
    js = srv.jetstream
    assert js.health_error() is None
    section = js.varz()
    assert section["config"]["store_dir"] == js.store_dir
    assert section["config"]["sync_interval"] == 5_000_000_000
    assert section["stats"]["reserved_storage"] == 1000
    assert section["stats"]["api"]["total"] == 1
