"""Stream templates on an in-process Headwater server: API, auto-creation, cascade, restart."""

from __future__ import annotations

import asyncio
import base64
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
TYPE = "io.nats.jetstream.api.v1."


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    """``await start(store)`` -> (server, client); everything is stopped after the test."""
    running: list[tuple[Server, Client]] = []

    async def _start(store: Path = tmp_path / "store") -> tuple[Server, Client]:
        settings = Settings(
            host="127.0.0.1",
            port=-1,
            jetstream=JetStreamSettings(enabled=True, store_dir=str(store)),
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


async def api(nc: Client, subject: str, body: bytes | dict[str, Any] = b"") -> Any:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    msg = await nc.request(f"$JS.API.{subject}", raw, timeout=2)
    return json.loads(msg.data)


def template(name: str = "T", max_streams: int = 10, **cfg: Any) -> dict[str, Any]:
    config = {"subjects": ["CLIENT.*"], "storage": "file"} | cfg
    return {"name": name, "config": config, "max_streams": max_streams}


async def wait_for_stream(nc: Client, name: str) -> dict[str, Any]:
    for _ in range(100):
        info = await api(nc, f"STREAM.INFO.{name}")
        if "error" not in info:
            return info
        await asyncio.sleep(0.01)
    raise AssertionError(f"stream {name} was not created")


async def test_create_info_names_delete(start: Start) -> None:
    _, nc = await start()
    created = await api(nc, "STREAM.TEMPLATE.CREATE.T", template())
    assert created["type"] == TYPE + "stream_template_create_response"
    assert created["streams"] == []
    cfg = created["config"]
    assert (cfg["name"], cfg["max_streams"]) == ("T", 10)
    assert cfg["config"]["name"] == "_", "checked under nats-server's placeholder name"
    assert cfg["config"]["subjects"] == ["CLIENT.*"]
    assert cfg["config"]["storage"] == "file"
    assert cfg["config"]["retention"] == "limits"

    info = await api(nc, "STREAM.TEMPLATE.INFO.T")
    assert info == {"type": TYPE + "stream_template_info_response"} | {
        "config": cfg,
        "streams": [],
    }
    await api(nc, "STREAM.TEMPLATE.CREATE.A", template("A", subjects=["A.*"]))
    names = await api(nc, "STREAM.TEMPLATE.NAMES")
    assert names == {
        "type": TYPE + "stream_template_names_response",
        "total": 2,
        "offset": 0,
        "limit": 1024,
        "streams": ["A", "T"],
    }
    paged = await api(nc, "STREAM.TEMPLATE.NAMES", {"offset": 1})
    assert (paged["offset"], paged["streams"]) == (1, ["T"])

    deleted = await api(nc, "STREAM.TEMPLATE.DELETE.T")
    assert deleted == {"type": TYPE + "stream_template_delete_response", "success": True}
    assert (await api(nc, "STREAM.TEMPLATE.NAMES"))["streams"] == ["A"]


async def test_errors(start: Start) -> None:
    _, nc = await start()

    async def err(subject: str, body: bytes | dict[str, Any] = b"") -> dict[str, Any]:
        reply = await api(nc, subject, body)
        return reply["error"]

    assert await err("STREAM.TEMPLATE.CREATE.X", template("Y")) == {
        "code": 400,
        "err_code": 10073,
        "description": "template name in subject does not match request",
    }
    assert (await err("STREAM.TEMPLATE.CREATE.X", b"{nope"))["err_code"] == 10025
    named = template("X")
    named["config"]["name"] = "S"
    assert await err("STREAM.TEMPLATE.CREATE.X", named) == {
        "code": 500,
        "err_code": 10066,
        "description": "template config name should be empty",
    }
    bad_cfg = await err("STREAM.TEMPLATE.CREATE.X", template("X", max_age=-1))
    assert bad_cfg["err_code"] == 10052
    assert (await err("STREAM.TEMPLATE.CREATE.X", {"name": "X"}))["err_code"] == 10066
    await api(nc, "STREAM.TEMPLATE.CREATE.X", template("X"))
    assert await err("STREAM.TEMPLATE.CREATE.X", template("X")) == {
        "code": 500,
        "err_code": 10066,
        "description": 'template with name "X" already exists',
    }
    missing = {"code": 404, "err_code": 10068, "description": "template not found"}
    assert await err("STREAM.TEMPLATE.INFO.NOPE") == missing
    assert await err("STREAM.TEMPLATE.DELETE.NOPE") == missing
    assert (await err("STREAM.TEMPLATE.INFO.X", b'{"a":1}'))["err_code"] == 10038
    assert (await err("STREAM.TEMPLATE.DELETE.X", b'{"a":1}'))["err_code"] == 10038
    failed_info = await api(nc, "STREAM.TEMPLATE.INFO.NOPE")
    assert set(failed_info) == {"type", "error"}


async def test_publish_creates_stream_and_is_stored(start: Start) -> None:
    _, nc = await start()
    await api(nc, "STREAM.TEMPLATE.CREATE.T", template())
    js = nc.jetstream()
    ack = await js.publish("CLIENT.acme", b"first")
    assert (ack.stream, ack.seq) == ("CLIENT_acme", 1)
    ack = await js.publish("CLIENT.acme", b"second")
    assert (ack.stream, ack.seq) == ("CLIENT_acme", 2)
    info = await api(nc, "STREAM.INFO.CLIENT_acme")
    assert info["config"]["subjects"] == ["CLIENT.acme"]
    assert info["config"]["template_owner"] == "T"
    assert info["state"]["messages"] == 2
    first = await api(nc, "STREAM.MSG.GET.CLIENT_acme", {"seq": 1})
    assert first["message"]["subject"] == "CLIENT.acme"
    assert (await api(nc, "STREAM.TEMPLATE.INFO.T"))["streams"] == ["CLIENT_acme"]


async def test_burst_before_creation_keeps_every_message_in_order(start: Start) -> None:
    _, nc = await start()
    await api(nc, "STREAM.TEMPLATE.CREATE.T", template(storage="memory"))
    for i in range(20):
        await nc.publish("CLIENT.burst", b"%d" % i)
    await nc.flush()
    await wait_for_stream(nc, "CLIENT_burst")
    for _ in range(100):
        info = await api(nc, "STREAM.INFO.CLIENT_burst")
        if info["state"]["messages"] == 20:
            break
        await asyncio.sleep(0.01)
    assert info["state"]["messages"] == 20
    for seq in (1, 20):
        msg = await api(nc, "STREAM.MSG.GET.CLIENT_burst", {"seq": seq})
        assert msg["message"]["data"] == base64.b64encode(b"%d" % (seq - 1)).decode()


async def test_max_streams_caps_creation(start: Start) -> None:
    _, nc = await start()
    await api(nc, "STREAM.TEMPLATE.CREATE.T", template(max_streams=2))
    js = nc.jetstream()
    await js.publish("CLIENT.a", b"")
    await js.publish("CLIENT.b", b"")
    with pytest.raises(nats.errors.TimeoutError):
        await nc.request("CLIENT.c", b"not stored", timeout=0.3)
    names = await api(nc, "STREAM.NAMES")
    assert names["streams"] == ["CLIENT_a", "CLIENT_b"]
    # A stream deleted directly no longer counts, so the template may create another.
    await api(nc, "STREAM.DELETE.CLIENT_a")
    assert (await js.publish("CLIENT.c", b"")).stream == "CLIENT_c"


async def test_delete_cascades_to_owned_streams_only(start: Start) -> None:
    _, nc = await start()
    js = nc.jetstream()
    await js.add_stream(name="OTHER", subjects=["other"])
    await api(nc, "STREAM.TEMPLATE.CREATE.T", template())
    await js.publish("CLIENT.a", b"")
    await js.publish("CLIENT.b", b"")
    assert (await api(nc, "STREAM.TEMPLATE.DELETE.T"))["success"] is True
    assert (await api(nc, "STREAM.NAMES"))["streams"] == ["OTHER"]
    # The template's subjects are no longer trapped.
    with pytest.raises(nats.errors.NoRespondersError):
        await nc.request("CLIENT.z", b"", timeout=0.5)


async def test_templates_and_their_streams_survive_a_restart(tmp_path: Path, start: Start) -> None:
    store = tmp_path / "persist"
    srv, nc = await start(store)
    await api(nc, "STREAM.TEMPLATE.CREATE.T", template(max_streams=2))
    await api(nc, "STREAM.TEMPLATE.CREATE.M", template("M", storage="memory", subjects=["M.*"]))
    await nc.jetstream().publish("CLIENT.acme", b"kept")
    before = await api(nc, "STREAM.TEMPLATE.INFO.T")
    meta = store / "jetstream" / "$G" / "templates" / "T" / "meta.inf"
    assert json.loads(meta.read_text())["name"] == "T"
    await nc.close()
    await srv.shutdown()

    srv, nc = await start(store)
    after = await api(nc, "STREAM.TEMPLATE.INFO.T")
    assert after == before
    assert (await api(nc, "STREAM.TEMPLATE.NAMES"))["streams"] == ["T"], "memory one is gone"
    js = nc.jetstream()
    assert (await js.publish("CLIENT.acme", b"again")).seq == 2
    assert (await js.publish("CLIENT.new", b"")).stream == "CLIENT_new"
    with pytest.raises(nats.errors.TimeoutError):
        await nc.request("CLIENT.third", b"over the cap", timeout=0.3)
    await api(nc, "STREAM.TEMPLATE.DELETE.T")
    assert not meta.parent.exists()
    assert (await api(nc, "STREAM.NAMES"))["streams"] is None


async def test_template_deleted_while_its_stream_is_being_created(start: Start) -> None:
    srv, nc = await start()
    await api(nc, "STREAM.TEMPLATE.CREATE.T", template())
    manager = srv.jetstream.templates
    manager.on_message("T", "CLIENT.race", "", None, b"x")
    assert "CLIENT_race" not in srv.jetstream.streams, "creation runs in a task"
    await manager.delete("T")
    for _ in range(100):
        if not manager.creating:
            break
        await asyncio.sleep(0.01)
    assert manager.creating == 0
    assert (await api(nc, "STREAM.NAMES"))["total"] == 0
    assert (await api(nc, "STREAM.TEMPLATE.NAMES"))["total"] == 0
