"""Stream management through nats-py, against Headwater and nats-server alike."""

from __future__ import annotations

import json
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType
from nats.js.errors import APIError, NotFoundError


async def raw(nc: Client, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    payload = json.dumps(body).encode() if body is not None else b""
    msg = await nc.request(f"$JS.API.{subject}", payload, timeout=5)
    return json.loads(msg.data)


async def test_create_info_update_delete(nc: Client) -> None:
    jsm = nc.jsm()
    created = await jsm.add_stream(name="LIFE", subjects=["life.>"], max_msgs=100)
    cfg = created.config
    assert cfg.name == "LIFE" and cfg.subjects == ["life.>"]
    assert (cfg.max_msgs, cfg.max_bytes, cfg.max_msgs_per_subject) == (100, -1, -1)
    assert cfg.retention == RetentionPolicy.LIMITS
    assert cfg.discard == DiscardPolicy.OLD
    assert cfg.storage == StorageType.FILE
    assert (cfg.num_replicas, cfg.duplicate_window) == (1, 120.0)
    assert created.state.messages == 0 and created.state.first_seq == 0
    again = await jsm.add_stream(name="LIFE", subjects=["life.>"], max_msgs=100)
    assert again.created == created.created
    with pytest.raises(APIError) as info:
        await jsm.add_stream(name="LIFE", subjects=["life.>"], max_msgs=5)
    assert info.value.err_code == 10058

    js = nc.jetstream()
    for i in range(3):
        await js.publish(f"life.{i}", b"x")
    updated = await jsm.update_stream(name="LIFE", subjects=["life.>", "more.>"], max_msgs=2)
    assert updated.config.subjects == ["life.>", "more.>"]
    assert updated.state.messages == 2 and updated.state.first_seq == 2
    assert (await js.publish("more.x", b"y")).seq == 4

    assert await jsm.delete_stream("LIFE")
    with pytest.raises(NotFoundError):
        await jsm.stream_info("LIFE")
    with pytest.raises(NotFoundError):
        await jsm.delete_stream("LIFE")


async def test_config_errors(nc: Client) -> None:
    jsm = nc.jsm()
    await jsm.add_stream(name="OWNER", subjects=["owned.*"])
    with pytest.raises(APIError) as info:
        await jsm.add_stream(name="THIEF", subjects=["owned.x"])
    assert info.value.err_code == 10065
    with pytest.raises(APIError) as info:
        await jsm.update_stream(name="NOSUCH", subjects=["nosuch"])
    assert info.value.err_code == 10059
    with pytest.raises(APIError) as info:
        await jsm.update_stream(name="OWNER", subjects=["owned.*"], storage=StorageType.MEMORY)
    assert info.value.err_code == 10052
    assert info.value.description == "stream configuration update can not change storage type"


async def test_purge_variants(nc: Client) -> None:
    jsm = nc.jsm()
    js = nc.jetstream()
    await jsm.add_stream(name="PURGE", subjects=["pg.*"])
    for i in range(10):
        await js.publish(f"pg.{'ab'[i % 2]}", b"%d" % i)
    assert await jsm.purge_stream("PURGE", subject="pg.a")
    info = await jsm.stream_info("PURGE", subjects_filter=">")
    assert info.state.messages == 5 and info.state.subjects == {"pg.b": 5}
    assert await jsm.purge_stream("PURGE", keep=2)
    info = await jsm.stream_info("PURGE")
    assert (info.state.messages, info.state.first_seq) == (2, 8)
    assert await jsm.purge_stream("PURGE", seq=10)
    assert (await jsm.stream_info("PURGE")).state.messages == 1
    reply = await raw(nc, "STREAM.PURGE.PURGE", {"seq": 3, "keep": 1})
    assert reply["error"]["err_code"] == 10003 and reply["purged"] == 0
    assert await jsm.purge_stream("PURGE")
    state = (await jsm.stream_info("PURGE")).state
    assert (state.messages, state.first_seq, state.last_seq) == (0, 11, 10)


async def test_names_and_list(nc: Client) -> None:
    jsm = nc.jsm()
    for name in ("LST_C", "LST_A", "LST_B"):
        await jsm.add_stream(name=name, subjects=[f"{name.lower()}.>"])
    names = await raw(nc, "STREAM.NAMES", {"subject": "lst_b.x"})
    assert (names["total"], names["offset"], names["limit"], names["streams"]) == (
        1,
        0,
        1024,
        ["LST_B"],
    )
    nothing = await raw(nc, "STREAM.NAMES", {"subject": "no.such.subject"})
    assert (nothing["total"], nothing["streams"]) == (0, None)
    everything = await raw(nc, "STREAM.NAMES")
    ours = [n for n in everything["streams"] if n.startswith("LST_")]
    assert ours == ["LST_A", "LST_B", "LST_C"], "names come sorted"
    past = await raw(nc, "STREAM.NAMES", {"offset": 10_000})
    assert (past["offset"], past["streams"]) == (past["total"], None)
    listed = await raw(nc, "STREAM.LIST", {"subject": "lst_a.>"})
    assert (listed["total"], listed["limit"]) == (1, 256)
    entry = listed["streams"][0]
    assert list(entry) == ["config", "created", "state", "ts"]
    infos = await jsm.streams_info()
    assert {"LST_A", "LST_B", "LST_C"} <= {i.config.name for i in infos}
    assert await jsm.find_stream_name_by_subject("lst_c.q") == "LST_C"


async def test_info_details_and_account_bytes(nc: Client) -> None:
    jsm = nc.jsm()
    js = nc.jetstream()
    await jsm.add_stream(name="BYTES", subjects=["world"])
    before = await jsm.account_info()
    await js.publish("world", b"hello world!")
    info = await jsm.stream_info("BYTES")
    assert info.state.bytes == 47
    after = await jsm.account_info()
    assert after.storage - before.storage == 47
    assert after.streams == before.streams
    await jsm.add_stream(name="DETAIL", subjects=["dt.*"])
    for subject in ("dt.a", "dt.b", "dt.a", "dt.c"):
        await js.publish(subject, b"x")
    await jsm.delete_msg("DETAIL", 2)
    detail = await raw(
        nc, "STREAM.INFO.DETAIL", {"deleted_details": True, "subjects_filter": "dt.a"}
    )
    assert (detail["total"], detail["offset"], detail["limit"]) == (1, 0, 100000)
    state = detail["state"]
    assert state["subjects"] == {"dt.a": 2}
    assert (state["num_deleted"], state["deleted"], state["num_subjects"]) == (1, [2], 2)
    assert detail["cluster"]["leader"]
    missing = await raw(nc, "STREAM.INFO.NOPE")
    assert missing["error"]["err_code"] == 10059
    assert (missing["total"], missing["offset"], missing["limit"]) == (0, 0, 0)


async def test_list_pages_of_256(nc: Client) -> None:
    jsm = nc.jsm()
    for i in range(260):
        await jsm.add_stream(name=f"PG_{i:03d}", subjects=[f"pages.{i:03d}"], storage="memory")
    first = await raw(nc, "STREAM.LIST", {"subject": "pages.*"})
    assert (first["total"], first["offset"], first["limit"]) == (260, 0, 256)
    names = [f"PG_{i:03d}" for i in range(260)]
    assert [s["config"]["name"] for s in first["streams"]] == names[:256]
    rest = await raw(nc, "STREAM.LIST", {"subject": "pages.*", "offset": 256})
    assert [s["config"]["name"] for s in rest["streams"]] == names[256:]
    page = await raw(nc, "STREAM.NAMES", {"subject": "pages.*", "offset": 250})
    assert page["streams"] == names[250:]
    for name in names:
        await jsm.delete_stream(name)
