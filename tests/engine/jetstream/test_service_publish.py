"""The publish path of an in-process Headwater server: acks, group commit, limits, timers.

The server runs on the test's event loop, so tests can reach into the running streams (e.g.
to hold a store's ``durable()``) while nats-py talks to it over a real socket.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import json
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from unittest import mock

import nats
import pytest
from nats.aio.client import Client
from nats.js.errors import APIError

from headwater.server.config.settings import JetStreamSettings, Settings
from headwater.server.jetstream import errors, publish
from headwater.server.node import Server
from headwater.server.services import attach_services

Start = Callable[..., Awaitable[tuple[Server, Client]]]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    """``await start(**jetstream_settings)`` -> (server, connected client); both closed after."""
    running: list[tuple[Server, Client]] = []

    async def _start(**js: Any) -> tuple[Server, Client]:
        js.setdefault("store_dir", str(tmp_path / f"store{len(running)}"))
        settings = Settings(
            host="127.0.0.1", port=-1, jetstream=JetStreamSettings(enabled=True, **js)
        )
        srv = Server(settings)
        attach_services(srv)
        await srv.start()
        nc = await nats.connect(f"nats://127.0.0.1:{srv.port}", allow_reconnect=False)
        running.append((srv, nc))
        return srv, nc

    yield _start
    for srv, nc in running:
        await nc.close()
        await srv.shutdown()


async def api(nc: Client, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    msg = await nc.request(f"$JS.API.{subject}", json.dumps(body or {}).encode(), timeout=2)
    return json.loads(msg.data)


async def test_acks_wait_for_durable_and_share_one_sync(start: Start) -> None:
    srv, nc = await start()
    js = nc.jetstream()
    await js.add_stream(name="G", subjects=["g.>"])
    store = srv.jetstream.streams["G"].store
    gate = asyncio.Event()
    calls = 0
    real_durable = store.durable

    async def held_durable() -> None:
        nonlocal calls
        calls += 1
        await gate.wait()
        await real_durable()

    store.durable = held_durable
    acks = [asyncio.ensure_future(js.publish("g.x", b"%d" % i)) for i in range(50)]
    await asyncio.sleep(0.3)
    assert not any(a.done() for a in acks), "an ack went out before its message was durable"
    assert store.state().msgs == 50, "messages must be stored before the sync completes"
    gate.set()
    seqs = [a.seq for a in await asyncio.gather(*acks)]
    assert seqs == list(range(1, 51))
    assert 1 <= calls <= 3, f"{calls} syncs for 50 acks: group commit is not batching"


async def test_a_failed_sync_turns_the_ack_into_an_error(start: Start) -> None:
    srv, nc = await start()
    js = nc.jetstream()
    await js.add_stream(name="F", subjects=["f"])
    store = srv.jetstream.streams["F"].store

    async def broken() -> None:
        raise OSError("no space left on device")

    store.durable = broken
    with pytest.raises(APIError) as info:
        await js.publish("f", b"x")
    assert info.value.err_code == 10077
    assert "no space left on device" in str(info.value.description)


async def test_periodic_sync_acks_without_waiting_for_durable(start: Start) -> None:
    # The timer syncs later: that is what sync_interval asks for.
    srv, nc = await start(sync_interval=30.0)
    js = nc.jetstream()
    await js.add_stream(name="I", subjects=["i"])

    async def never() -> None:
        raise AssertionError("this sync mode must not wait for durable()")

    srv.jetstream.streams["I"].store.durable = never
    assert (await js.publish("i", b"x")).seq == 1


async def test_sync_always_acks_after_an_fsync_off_the_event_loop(start: Start) -> None:
    # ``always`` fsyncs every message before its ack, as nats-server does, but in the group
    # commit's worker thread: an fsync on the loop thread would stall every client.
    srv, nc = await start(sync_interval=-1.0)
    js = nc.jetstream()
    await js.add_stream(name="A", subjects=["a"])
    store = srv.jetstream.streams["A"].store
    loop_thread = threading.get_ident()
    synced_on: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced_on.append(threading.get_ident())
        real_fsync(fd)

    with mock.patch.object(os, "fsync", fsync):
        assert (await js.publish("a", b"x")).seq == 1
    assert synced_on, "the ack went out before any fsync"
    assert loop_thread not in synced_on
    assert store.state().msgs == 1


async def test_no_ack_streams_answer_nothing(start: Start) -> None:
    srv, nc = await start()
    js = nc.jetstream()
    await js.add_stream(name="N", subjects=["n"], no_ack=True)
    with pytest.raises(nats.errors.TimeoutError):
        await nc.request("n", b"x", timeout=0.3)
    assert srv.jetstream.streams["N"].state().msgs == 1


async def test_server_budgets(start: Start) -> None:
    _, nc = await start(max_file_store=2000, max_memory_store=3000)
    assert (await api(nc, "STREAM.CREATE.A", {"name": "A", "max_bytes": 1500}))["did_create"]
    err = (await api(nc, "STREAM.CREATE.B", {"name": "B", "max_bytes": 1500}))["error"]
    assert err == {
        "code": 500,
        "err_code": 10047,
        "description": "insufficient storage resources available",
    }
    mem = {"name": "M", "storage": "memory", "max_bytes": 5000}
    assert (await api(nc, "STREAM.CREATE.M", mem))["error"]["err_code"] == 10028
    assert (await api(nc, "STREAM.CREATE.C", {"name": "C"}))["did_create"]
    replies = [json.loads((await nc.request("C", b"x" * 900, timeout=2)).data) for _ in range(4)]
    assert [r.get("seq") for r in replies[:3]] == [1, 2, 3]
    assert replies[3] == {
        "error": {"code": 503, "err_code": 10023, "description": "insufficient resources"},
        "stream": "C",
        "seq": 0,
    }
    info = await api(nc, "INFO")
    assert info["storage"] == 3 * (22 + 1 + 900 + 8)
    assert info["reserved_storage"] == 1500


async def test_domain_shows_in_acks_and_api_prefix(start: Start) -> None:
    _, nc = await start(domain="hub")
    msg = await nc.request("$JS.hub.API.STREAM.CREATE.D", b'{"name":"D"}', timeout=2)
    assert json.loads(msg.data)["did_create"]
    ack = await nc.request("D", b"x", timeout=2)
    assert ack.data == b'{"stream":"D","domain":"hub","seq":1}'
    info = await api(nc, "INFO")
    assert info["domain"] == "hub"
    assert list(info).index("domain") == list(info).index("api") - 1


async def test_max_age_expires_on_a_timer(start: Start) -> None:
    srv, nc = await start()
    js = nc.jetstream()
    await js.add_stream(name="AGE", subjects=["age"], max_age=0.4)
    for _ in range(3):
        await js.publish("age", b"x")
    stream = srv.jetstream.streams["AGE"]
    assert stream.state().msgs == 3
    await asyncio.sleep(0.8)
    state = stream.state()
    assert (state.msgs, state.first_seq, state.last_seq) == (0, 4, 3)


async def test_ttl_expiry_leaves_a_marker_that_expires_without_a_new_one(start: Start) -> None:
    srv, nc = await start()
    body = {
        "name": "TTL",
        "subjects": ["t.>"],
        "allow_msg_ttl": True,
        "subject_delete_marker_ttl": 1_000_000_000,
    }
    assert "error" not in await api(nc, "STREAM.CREATE.TTL", body)
    js = nc.jetstream()
    await js.publish("t.keep", b"stays")
    await js.publish("t.a", b"goes", headers={"Nats-TTL": "1s"})
    await asyncio.sleep(1.4)
    got = await api(nc, "STREAM.MSG.GET.TTL", {"last_by_subj": "t.a"})
    marker = got["message"]
    assert marker["seq"] == 3
    hdr = base64.b64decode(marker["hdrs"])
    assert (
        hdr == b"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: 1s\r\nNats-Rollup: sub\r\n\r\n"
    )
    await asyncio.sleep(1.2)
    state = srv.jetstream.streams["TTL"].state()
    assert (state.msgs, state.last_seq) == (1, 3), "the marker's own expiry made a new marker"


async def test_rollup_all_keeps_only_the_new_message(start: Start) -> None:
    _, nc = await start()
    js = nc.jetstream()
    await js.add_stream(name="RU", subjects=["ru.>"], allow_rollup_hdrs=True)
    for subject in ("ru.a", "ru.b", "ru.a"):
        await js.publish(subject, b"x")
    await js.publish("ru.c", b"last", headers={"Nats-Rollup": "all"})
    info = await js.stream_info("RU")
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (1, 4, 4)
    bad = await nc.request("ru.a", b"x", headers={"Nats-Rollup": "some"}, timeout=2)
    assert json.loads(bad.data)["error"]["description"] == 'rollup value invalid: "some"'


async def test_republish_sends_stored_messages_on(start: Start) -> None:
    _, nc = await start()
    body = {"name": "RP", "subjects": ["rp.>"], "republish": {"src": "rp.>", "dest": "out.>"}}
    assert "error" not in await api(nc, "STREAM.CREATE.RP", body)
    sub = await nc.subscribe("out.>")
    js = nc.jetstream()
    await js.publish("rp.a", b"one", headers={"X-Id": "1"})
    await js.publish("rp.a", b"two")
    first = await sub.next_msg(timeout=2)
    second = await sub.next_msg(timeout=2)
    assert first.subject == "out.a" and first.data == b"one"
    assert first.headers is not None and first.headers["X-Id"] == "1"
    assert first.headers["Nats-Stream"] == "RP"
    assert first.headers["Nats-Subject"] == "rp.a"
    assert first.headers["Nats-Sequence"] == "1"
    assert first.headers["Nats-Last-Sequence"] == "0"
    assert second.headers is not None and second.headers["Nats-Last-Sequence"] == "1"


async def test_republish_headers_only(start: Start) -> None:
    _, nc = await start()
    republish = {"src": "h.*", "dest": "ho.$1", "headers_only": True}
    body = {"name": "HO", "subjects": ["h.*"], "republish": republish}
    assert "error" not in await api(nc, "STREAM.CREATE.HO", body)
    sub = await nc.subscribe("ho.*")
    await nc.jetstream().publish("h.k", b"12345")
    msg = await sub.next_msg(timeout=2)
    assert msg.subject == "ho.k" and msg.data == b""
    assert msg.headers is not None and msg.headers["Nats-Msg-Size"] == "5"


async def test_subject_transform_applies_before_storing(start: Start) -> None:
    _, nc = await start()
    body = {
        "name": "TR",
        "subjects": ["in.*"],
        "subject_transform": {"src": "in.*", "dest": "out.$1"},
    }
    assert "error" not in await api(nc, "STREAM.CREATE.TR", body)
    js = nc.jetstream()
    await js.publish("in.a", b"x")
    msg = await js.get_msg("TR", 1)
    assert msg.subject == "out.a"
    info = await js.stream_info("TR", subjects_filter=">")
    assert info.state.subjects == {"out.a": 1}


async def test_markers_are_recognised_after_a_restart(tmp_path: Path, start: Start) -> None:
    store = str(tmp_path / "markers")
    srv, nc = await start(store_dir=store)
    body = {
        "name": "MK",
        "subjects": ["mk.>"],
        "allow_msg_ttl": True,
        "subject_delete_marker_ttl": 2_000_000_000,
    }
    assert "error" not in await api(nc, "STREAM.CREATE.MK", body)
    # A TTL below the markers' TTL is raised to it: this message lives 2s.
    await nc.jetstream().publish("mk.a", b"x", headers={"Nats-TTL": "1s"})
    stream = srv.jetstream.streams["MK"]
    for _ in range(100):
        if stream.state().last_seq == 2:
            break
        await asyncio.sleep(0.05)
    assert stream.markers == {2}
    await nc.close()
    await srv.shutdown()
    srv, _ = await start(store_dir=store)
    assert srv.jetstream.streams["MK"].markers == {2}


async def test_interest_retention_without_interest_stores_nothing(start: Start) -> None:
    srv, nc = await start()
    js = nc.jetstream()
    await js.add_stream(name="INTEREST", subjects=["interest"], retention="interest")
    first = await js.publish("interest", b"x", headers={"Nats-Msg-Id": "a"})
    again = await js.publish("interest", b"x", headers={"Nats-Msg-Id": "a"})
    assert (first.seq, again.seq, again.duplicate) == (1, 1, True)
    stream = srv.jetstream.streams["INTEREST"]
    state = stream.state()
    assert (state.msgs, state.first_seq, state.last_seq) == (0, 2, 1)
    stream.interest_filters.append("interest")
    assert (await js.publish("interest", b"kept")).seq == 2
    assert stream.state().msgs == 1


async def test_a_failed_fsync_stops_the_stream_until_it_is_reopened(start: Start) -> None:
    """After a failed fsync the kernel may have dropped the dirty pages, so a later fsync that
    succeeds proves nothing: the stream refuses every write (10077) and says so in an
    advisory, even once the disk works again; reads go on."""
    srv, nc = await start()
    js = nc.jetstream()
    await js.add_stream(name="F", subjects=["f"])
    assert (await js.publish("f", b"kept")).seq == 1
    advisories = await nc.subscribe("$JS.EVENT.ADVISORY.SERVER.OUT_OF_STORAGE")
    io = srv.jetstream.streams["F"].store._io

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    io.fsync = failing_fsync  # type: ignore[method-assign]
    with pytest.raises(APIError) as info:
        await js.publish("f", b"not acknowledged")
    assert info.value.err_code == 10077
    del io.fsync  # the disk answers again: no retry may make the stream writable
    with pytest.raises(APIError) as again:
        await js.publish("f", b"refused")
    assert again.value.err_code == 10077
    for request in ("STREAM.PURGE.F", "STREAM.MSG.DELETE.F"):
        body = {"seq": 1} if "DELETE" in request else None
        assert (await api(nc, request, body))["error"]["err_code"] == 10077, request
    advisory = json.loads((await advisories.next_msg(timeout=2)).data)
    assert advisory["type"] == "io.nats.jetstream.advisory.v1.server_out_of_space"
    assert advisory["stream"] == "F"
    assert (await js.get_msg("F", 1)).data == b"kept"


async def test_admit_says_what_happened_and_answers_nobody(start: Start) -> None:
    """``publish.admit`` decides and stores; answering is the stream's (``Stream.answer``)."""
    srv, nc = await start()
    js = nc.jetstream()
    await js.add_stream(name="AD", subjects=["ad"], max_msg_size=64)
    stream = srv.jetstream.streams["AD"]
    replies = await nc.subscribe("_NOBODY.>")
    msg_id = b"NATS/1.0\r\nNats-Msg-Id: one\r\n\r\n"
    assert publish.admit(stream, "ad", msg_id, b"x") == publish.Stored(1)
    assert publish.admit(stream, "ad", msg_id, b"y") == publish.Stored(1, duplicate=True)
    assert publish.admit(stream, "ad", None, b"x" * 65) is errors.STREAM_MESSAGE_EXCEEDS_MAXIMUM
    assert stream.state().msgs == 1
    with pytest.raises(nats.errors.TimeoutError):
        await replies.next_msg(timeout=0.2)


async def test_admit_at_a_given_time_is_decided_by_that_time(start: Start) -> None:
    """A replicated stream's replicas each run the publish checks on the committed log, at
    the time its leader gave each message: the duplicate window and the stored time follow
    that time, not each server's clock, so every replica decides alike."""
    srv, nc = await start()
    await nc.jetstream().add_stream(name="T", subjects=["t"], duplicate_window=60)
    stream = srv.jetstream.streams["T"]
    base = 1_700_000_000 * 10**9
    hdr = b"NATS/1.0\r\nNats-Msg-Id: x\r\n\r\n"

    def admit_at(ts: int, payload: bytes) -> publish.Outcome:
        with stream.at(ts):
            return publish.admit(stream, "t", hdr, payload)

    assert admit_at(base, b"1") == publish.Stored(1)
    assert admit_at(base + 10**9, b"2") == publish.Stored(1, duplicate=True)
    # Past the window by the given time (no time passed here): a new message.
    assert admit_at(base + 61 * 10**9, b"3") == publish.Stored(2)
    assert [m.ts for m in map(stream.store.load_msg, (1, 2)) if m] == [base, base + 61 * 10**9]
    assert stream.clock() > base + 365 * 86_400 * 10**9  # the server's clock again (2026)
