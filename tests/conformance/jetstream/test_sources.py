"""Sources through nats-py, the same scenarios against Headwater and nats-server.

Compared: which messages the sourcing stream holds and in which sequence, their subjects after
filters and transforms, the ``Nats-Stream-Source`` header field by field (the last field is
the origin stream's identity, random in nats-server: only its shape and its stability per
origin are compared) and the ``sources`` block of STREAM.INFO.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import nats
import pytest
from nats.aio.client import Client
from nats.js.api import StreamConfig, StreamSource, SubjectTransform

from headwater.testing import ServerProcess
from support.replication import api, info, stored, wait_messages


async def _publish(nc: Client, subject: str, count: int) -> None:
    js = nc.jetstream()
    for i in range(count):
        await js.publish(subject, b"%s-%d" % (subject.encode(), i), headers={"N": str(i)})


def _source_fields(hdrs: dict[str, str]) -> list[str]:
    return hdrs["Nats-Stream-Source"].split(" ")


async def test_sources_merge_two_streams_with_source_headers(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="SA", subjects=["sa.>"])
    await js.add_stream(name="SB", subjects=["sb.>"])
    await _publish(nc, "sa.x", 3)
    await js.add_stream(
        StreamConfig(name="SMERGE", sources=[StreamSource(name="SA"), StreamSource(name="SB")])
    )
    await wait_messages(nc, "SMERGE", 3)
    await _publish(nc, "sb.y", 2)
    await wait_messages(nc, "SMERGE", 5)
    await _publish(nc, "sa.x", 1)
    await wait_messages(nc, "SMERGE", 6)

    rows = await stored(nc, "SMERGE")
    assert [(seq, subj, data) for seq, subj, data, _ in rows] == [
        (1, "sa.x", b"sa.x-0"),
        (2, "sa.x", b"sa.x-1"),
        (3, "sa.x", b"sa.x-2"),
        (4, "sb.y", b"sb.y-0"),
        (5, "sb.y", b"sb.y-1"),
        (6, "sa.x", b"sa.x-0"),
    ]
    fields = [_source_fields(h) for _, _, _, h in rows]
    assert [f[:5] for f in fields] == [
        ["SA", "1", ">", ">", "sa.x"],
        ["SA", "2", ">", ">", "sa.x"],
        ["SA", "3", ">", ">", "sa.x"],
        ["SB", "1", ">", ">", "sb.y"],
        ["SB", "2", ">", ">", "sb.y"],
        ["SA", "4", ">", ">", "sa.x"],
    ]
    assert all(len(f) == 6 and len(f[5]) == 8 for f in fields)
    assert len({f[5] for f in fields if f[0] == "SA"}) == 1
    assert {f[5] for f in fields if f[0] == "SA"} != {f[5] for f in fields if f[0] == "SB"}
    assert [h["N"] for _, _, _, h in rows] == ["0", "1", "2", "0", "1", "0"]

    body = await info(nc, "SMERGE")
    # nats-server lists sources in map order: compare them sorted.
    blocks = sorted(body["sources"], key=lambda b: str(b["name"]))
    assert [list(b) for b in blocks] == [["name", "lag", "seq", "active"]] * 2
    assert [(b["name"], b["lag"], b["seq"]) for b in blocks] == [("SA", 0, 4), ("SB", 0, 2)]
    assert "subjects" not in body["config"]
    listed = await api(nc, "STREAM.LIST", {"subject": ""})
    entry = next(s for s in listed["streams"] if s["config"]["name"] == "SMERGE")
    assert sorted((b["name"], b["seq"]) for b in entry["sources"]) == [("SA", 4), ("SB", 2)]


async def test_sources_filters_and_transforms(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="SFA", subjects=["sfa.>"])
    await js.add_stream(name="SFB", subjects=["sfb.>"])
    for subject in ("sfa.keep", "sfa.drop", "sfb.1", "sfb.2", "sfa.keep"):
        await js.publish(subject, subject.encode())
    sources = [
        StreamSource(name="SFA", filter_subject="sfa.keep"),
        StreamSource(
            name="SFB", subject_transforms=[SubjectTransform(src="sfb.*", dest="b.{{wildcard(1)}}")]
        ),
    ]
    await js.add_stream(StreamConfig(name="SFT", subjects=["local.>"], sources=sources))
    await wait_messages(nc, "SFT", 4)
    await js.publish("local.own", b"own")
    await wait_messages(nc, "SFT", 5)
    rows = await stored(nc, "SFT")
    by_subject = sorted((subj, data) for _, subj, data, _ in rows)
    assert by_subject == [
        ("b.1", b"sfb.1"),
        ("b.2", b"sfb.2"),
        ("local.own", b"own"),
        ("sfa.keep", b"sfa.keep"),
        ("sfa.keep", b"sfa.keep"),
    ]
    headers = {data: _source_fields(h)[:5] for _, _, data, h in rows if h}
    assert headers[b"sfb.2"] == ["SFB", "2", "sfb.*", "b.{{wildcard(1)}}", "sfb.2"]
    assert headers[b"sfa.keep"] == ["SFA", "3", "sfa.keep", ">", "sfa.keep"]
    blocks = {b["name"]: b for b in (await info(nc, "SFT"))["sources"]}
    assert blocks["SFA"]["filter_subject"] == "sfa.keep"
    assert blocks["SFB"]["subject_transforms"] == [{"src": "sfb.*", "dest": "b.{{wildcard(1)}}"}]


async def test_source_of_a_sourced_stream_replaces_the_header(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="SCA", subjects=["sca.>"])
    await js.add_stream(StreamConfig(name="SCB", sources=[StreamSource(name="SCA")]))
    await js.add_stream(StreamConfig(name="SCC", sources=[StreamSource(name="SCB")]))
    await _publish(nc, "sca.m", 2)
    await wait_messages(nc, "SCC", 2)
    rows = await stored(nc, "SCC")
    assert [_source_fields(h)[:5] for _, _, _, h in rows] == [
        ["SCB", "1", ">", ">", "sca.m"],
        ["SCB", "2", ">", ">", "sca.m"],
    ]


async def test_sources_start_sequence_and_bad_configs(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="SSA", subjects=["ssa.>"])
    await _publish(nc, "ssa.v", 5)
    await js.add_stream(
        StreamConfig(name="SSS", sources=[StreamSource(name="SSA", opt_start_seq=4)])
    )
    await wait_messages(nc, "SSS", 2)
    assert [_source_fields(h)[1] for _, _, _, h in await stored(nc, "SSS")] == ["4", "5"]

    bad = [
        ({"name": "SB1", "sources": [{"name": "SSA"}, {"name": "SSA"}]}, 10140),
        ({"name": "SB1", "sources": [{"name": "S.A"}]}, 10141),
        (
            {
                "name": "SB1",
                "sources": [
                    {
                        "name": "SSA",
                        "filter_subject": "ssa.v",
                        "subject_transforms": [{"src": "ssa.w", "dest": "w"}],
                    }
                ],
            },
            10144,
        ),
    ]
    for body, code in bad:
        reply = await api(nc, "STREAM.CREATE.SB1", body)
        assert reply["error"]["err_code"] == code, body


async def test_sources_can_be_added_by_update(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="SUA", subjects=["sua.>"])
    await js.add_stream(name="SUB", subjects=["sub.>"])
    await _publish(nc, "sua.m", 2)
    await _publish(nc, "sub.m", 2)
    await js.add_stream(StreamConfig(name="SUT", sources=[StreamSource(name="SUA")]))
    await wait_messages(nc, "SUT", 2)
    reply = await api(
        nc, "STREAM.UPDATE.SUT", {"name": "SUT", "sources": [{"name": "SUA"}, {"name": "SUB"}]}
    )
    assert "error" not in reply, reply
    await wait_messages(nc, "SUT", 4)
    await _publish(nc, "sua.m", 1)
    await wait_messages(nc, "SUT", 5)
    rows = await stored(nc, "SUT")
    assert sorted(_source_fields(h)[0] + _source_fields(h)[1] for _, _, _, h in rows) == [
        "SUA1",
        "SUA2",
        "SUA3",
        "SUB1",
        "SUB2",
    ]


# --- restarts ----------------------------------------------------------------------------


@pytest.fixture
def lone_server(js_server: ServerProcess) -> Iterator[ServerProcess]:
    """A server of the module's kind that this test may restart."""
    srv = ServerProcess(js_server.kind, jetstream=True)
    srv.start()
    try:
        yield srv
    finally:
        srv.cleanup()


def _origins(rows: list[tuple[int, str, bytes, dict[str, str]]]) -> list[tuple[str, int]]:
    out = []
    for _, _, _, hdrs in rows:
        fields = _source_fields(hdrs)
        out.append((fields[0], int(fields[1])))
    return out


async def test_sources_resume_after_a_clean_restart(lone_server: ServerProcess) -> None:
    nc = await nats.connect(lone_server.url, allow_reconnect=False)
    js = nc.jetstream()
    await js.add_stream(name="RA", subjects=["ra.>"])
    await js.add_stream(name="RB", subjects=["rb.>"])
    await _publish(nc, "ra.m", 3)
    await _publish(nc, "rb.m", 2)
    await js.add_stream(
        StreamConfig(name="RS", sources=[StreamSource(name="RA"), StreamSource(name="RB")])
    )
    await wait_messages(nc, "RS", 5)
    await nc.close()

    lone_server.restart()
    nc = await nats.connect(lone_server.url, allow_reconnect=False)
    try:
        await _publish(nc, "rb.m", 2)
        await _publish(nc, "ra.m", 1)
        await wait_messages(nc, "RS", 8, timeout=20)
        await asyncio.sleep(0.5)
        rows = await stored(nc, "RS")
        assert sorted(_origins(rows)) == [
            ("RA", 1),
            ("RA", 2),
            ("RA", 3),
            ("RA", 4),
            ("RB", 1),
            ("RB", 2),
            ("RB", 3),
            ("RB", 4),
        ]
        assert [r[0] for r in rows] == list(range(1, 9))
    finally:
        await nc.close()


async def test_sources_survive_kill_9_while_origins_are_written(headwater: ServerProcess) -> None:
    nc = await nats.connect(headwater.url, allow_reconnect=False)
    js = nc.jetstream()
    await js.add_stream(name="KA", subjects=["ka.>"])
    await js.add_stream(name="KB", subjects=["kb.>"], storage="file")
    await js.add_stream(
        StreamConfig(name="KS", sources=[StreamSource(name="KA"), StreamSource(name="KB")])
    )
    stop = asyncio.Event()

    async def writer(subject: str) -> None:
        n = 0
        while not stop.is_set():
            try:
                await js.publish(subject, b"%d" % n)
            except Exception:
                return  # the server is gone
            n += 1

    tasks = [asyncio.create_task(writer(s)) for s in ("ka.w", "kb.w")]
    await wait_messages(nc, "KS", 150, timeout=30)
    headwater.kill()
    stop.set()
    await asyncio.gather(*tasks)
    await nc.close()

    headwater.restart()
    nc = await nats.connect(headwater.url, allow_reconnect=False)
    try:
        await _publish(nc, "ka.w", 3)
        await _publish(nc, "kb.w", 3)
        total = sum([(await info(nc, s))["state"]["messages"] for s in ("KA", "KB")])
        await wait_messages(nc, "KS", total, timeout=20)
        await asyncio.sleep(0.5)
        got = _origins(await stored(nc, "KS"))
        assert len(got) == len(set(got)) == total, "a message was sourced twice or lost"
        for name in ("KA", "KB"):
            last = (await info(nc, name))["state"]["last_seq"]
            assert sorted(seq for n, seq in got if n == name) == list(range(1, last + 1))
    finally:
        await nc.close()


async def test_origin_hides_the_consumers_sources_run_on_it(nc: Client) -> None:
    """nats-server leaves the ``direct`` consumers of mirrors and sources out of consumer
    listings and counts on the origin; so do we."""
    js = nc.jetstream()
    await js.add_stream(name="HIDDEN_O", subjects=["hidden.o"])
    await js.publish("hidden.o", b"1")
    await js.add_stream(StreamConfig(name="HIDDEN_S", sources=[StreamSource(name="HIDDEN_O")]))
    await js.add_stream(StreamConfig(name="HIDDEN_M", mirror=StreamSource(name="HIDDEN_O")))
    await wait_messages(nc, "HIDDEN_S", 1)
    await wait_messages(nc, "HIDDEN_M", 1)
    await js.add_consumer("HIDDEN_O", durable_name="SEEN")
    names = await api(nc, "CONSUMER.NAMES.HIDDEN_O")
    assert names["consumers"] == ["SEEN"] and names["total"] == 1
    listed = await api(nc, "CONSUMER.LIST.HIDDEN_O")
    assert [c["name"] for c in listed["consumers"]] == ["SEEN"]
    assert (await info(nc, "HIDDEN_O"))["state"]["consumer_count"] == 1
