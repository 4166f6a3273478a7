"""Mirrors through nats-py, the same scenarios against Headwater and nats-server.

Each test asserts what both servers must produce: the mirrored messages (sequences, subjects,
payloads, headers), the mirror's state, the ``mirror`` block of STREAM.INFO (field presence
and deterministic values) and the reference's error codes. Streams are named per test (the
server is shared by the module).
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.js.api import ExternalStream, StreamConfig, StreamSource, SubjectTransform
from nats.js.errors import BadRequestError, NoStreamResponseError

from headwater.testing import ServerProcess
from support.replication import api, eventually, fetched, info, stored, times, wait_last_seq


async def _fill(nc: Client, stream: str, prefix: str, count: int, start: int = 0) -> None:
    js = nc.jetstream()
    for i in range(start, start + count):
        await js.publish(f"{prefix}.{i % 3}", b"payload-%d" % i, headers={"K": str(i)})


@pytest.mark.parametrize("storage", ["file", "memory"])
async def test_mirror_catches_up_then_follows_with_origin_sequences(
    nc: Client, storage: str
) -> None:
    js = nc.jetstream()
    origin, mirror = f"MO_{storage}", f"MM_{storage}"
    await js.add_stream(name=origin, subjects=[f"mo{storage}.>"], storage=storage)
    await _fill(nc, origin, f"mo{storage}", 12)
    await js.delete_msg(origin, 5)
    await js.add_stream(
        StreamConfig(name=mirror, storage=storage, mirror=StreamSource(name=origin))
    )
    await wait_last_seq(nc, mirror, 12)
    assert await stored(nc, mirror) == await stored(nc, origin)

    await _fill(nc, origin, f"mo{storage}", 5, start=12)
    await wait_last_seq(nc, mirror, 17)
    rows = await stored(nc, mirror)
    assert rows == await stored(nc, origin)
    assert [r[0] for r in rows] == [s for s in range(1, 18) if s != 5]

    assert await times(nc, mirror) == await times(nc, origin)  # the origin's timestamps
    body = await info(nc, mirror)
    state = body["state"]
    assert (state["messages"], state["first_seq"], state["last_seq"]) == (16, 1, 17)
    assert state["num_deleted"] == 1
    origin_state = (await info(nc, origin))["state"]
    assert (state["first_ts"], state["last_ts"]) == (
        origin_state["first_ts"],
        origin_state["last_ts"],
    )
    block = body["mirror"]
    assert list(block) == ["name", "lag", "active"]
    assert (block["name"], block["lag"]) == (origin, 0)
    assert 0 <= block["active"] < 5_000_000_000
    assert "subjects" not in body["config"]


@pytest.mark.parametrize("storage", ["file", "memory"])
async def test_mirror_of_thousands_while_the_origin_is_written(nc: Client, storage: str) -> None:
    """A mirror created on a long origin (several read batches, mostly plain messages, some
    with headers, gaps at batch edges) while the origin keeps taking messages ends with
    exactly the origin's messages, sequences and times."""
    js = nc.jetstream()
    origin, mirror, prefix = f"BO_{storage}", f"BM_{storage}", f"bo{storage}"
    await js.add_stream(name=origin, subjects=[f"{prefix}.>"], storage=storage)
    for i in range(5000):
        await nc.publish(
            f"{prefix}.{i % 5}", b"p%d" % i, headers={"H": str(i)} if i % 97 == 0 else None
        )
    await nc.flush()
    await wait_last_seq(nc, origin, 5000)
    for seq in (1, 2, 700, 2048, 2049, 4097, 4999):
        await js.delete_msg(origin, seq)

    async def writer() -> None:
        for i in range(300):
            await js.publish(f"{prefix}.w", b"w%d" % i, headers={"W": "1"} if i % 3 == 0 else None)

    task = asyncio.create_task(writer())
    await js.add_stream(
        StreamConfig(name=mirror, storage=storage, mirror=StreamSource(name=origin))
    )
    await task
    await wait_last_seq(nc, mirror, 5300, timeout=30)
    rows = await fetched(nc, mirror)
    assert rows == await fetched(nc, origin)
    assert len(rows) == 5293 and rows[0][0] == 3
    mirror_state = (await info(nc, mirror))["state"]
    origin_state = (await info(nc, origin))["state"]
    keys = ("messages", "bytes", "first_seq", "last_seq", "first_ts", "last_ts")
    assert {k: mirror_state[k] for k in keys} == {k: origin_state[k] for k in keys}


async def test_mirror_following_a_burst_of_plain_messages(nc: Client) -> None:
    """Messages that reach a following mirror through its consumer, mostly without headers
    (which a mirror stores in runs), some with: the mirror ends equal to the origin."""
    js = nc.jetstream()
    await js.add_stream(name="FO", subjects=["fo.>"])
    await js.add_stream(StreamConfig(name="FM", mirror=StreamSource(name="FO")))
    await eventually(lambda: _following(nc, "FM"), what="the mirror's consumer")
    for start in range(0, 3000, 500):
        for i in range(start, start + 500):
            await nc.publish(f"fo.{i % 4}", b"f%d" % i, headers={"H": "1"} if i % 97 == 0 else None)
        await nc.flush()
    await wait_last_seq(nc, "FO", 3000)
    await js.delete_msg("FO", 10)
    await js.publish("fo.last", b"after the delete")
    await wait_last_seq(nc, "FM", 3001, timeout=20)
    rows = await fetched(nc, "FM")
    origin_rows = await fetched(nc, "FO")
    # The delete came after the mirror had message 10: the mirror keeps it, as both servers do.
    assert [r for r in rows if r[0] != 10] == origin_rows
    assert rows[9][0] == 10 and rows[9][2] == b"f9"


@pytest.mark.parametrize("retention", ["interest", "workqueue"])
async def test_mirror_of_an_interest_or_work_queue_origin(nc: Client, retention: str) -> None:
    """On interest and work-queue origins the mirror's consumer is a consumer like any other:
    a work queue hands its messages to the mirror, an interest stream keeps them for its other
    consumer, and both count the mirror's consumer in ``consumer_count``."""
    js = nc.jetstream()
    origin, mirror = f"RO_{retention}", f"RM_{retention}"
    await js.add_stream(name=origin, subjects=[f"ro{retention}.>"], retention=retention)
    if retention == "interest":
        await js.add_consumer(origin, durable_name="OTHER")
    for i in range(5):
        await js.publish(f"ro{retention}.{i}", b"r%d" % i)
    await js.add_stream(StreamConfig(name=mirror, mirror=StreamSource(name=origin)))
    await wait_last_seq(nc, mirror, 5)
    await eventually(lambda: _following(nc, mirror), what="the mirror's consumer")
    assert [r[0] for r in await stored(nc, mirror)] == [1, 2, 3, 4, 5]
    kept = 5 if retention == "interest" else 0

    async def settled() -> bool:
        state = (await info(nc, origin))["state"]
        return (state["messages"], state["consumer_count"]) == (kept, 1 + (kept > 0))

    await eventually(settled, what=f"the {retention} origin's state")


async def _following(nc: Client, mirror: str) -> bool:
    """The mirror's consumer exists (STREAM.INFO reports activity)."""
    return (await info(nc, mirror)).get("mirror", {}).get("active", -1) >= 0


async def test_mirror_filter_keeps_origin_sequences(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="MFO", subjects=["mfo.>"])
    await _fill(nc, "MFO", "mfo", 9)
    await js.add_stream(
        StreamConfig(name="MFM", mirror=StreamSource(name="MFO", filter_subject="mfo.1"))
    )
    await wait_last_seq(nc, "MFM", 8)
    rows = await stored(nc, "MFM")
    assert [(seq, subj) for seq, subj, _, _ in rows] == [(2, "mfo.1"), (5, "mfo.1"), (8, "mfo.1")]
    state = (await info(nc, "MFM"))["state"]
    assert (state["messages"], state["first_seq"], state["last_seq"]) == (3, 2, 8)
    assert state["num_deleted"] == 4
    assert (await info(nc, "MFM"))["mirror"]["filter_subject"] == "mfo.1"
    origin_times = await times(nc, "MFO")
    assert await times(nc, "MFM") == {seq: origin_times[seq] for seq in (2, 5, 8)}


async def test_mirror_with_limits_of_its_own(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="MLO", subjects=["mlo.>"])
    await _fill(nc, "MLO", "mlo", 6)
    await js.add_stream(StreamConfig(name="MLM", max_msgs=3, mirror=StreamSource(name="MLO")))
    await wait_last_seq(nc, "MLM", 6)
    await _fill(nc, "MLO", "mlo", 2, start=6)
    await wait_last_seq(nc, "MLM", 8)
    origin = {row[0]: row for row in await stored(nc, "MLO")}
    assert await stored(nc, "MLM") == [origin[6], origin[7], origin[8]]


async def test_mirror_subject_transforms(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="MTO", subjects=["mto.>"])
    await _fill(nc, "MTO", "mto", 6)
    transforms = [
        SubjectTransform(src="mto.0", dest="zero.x"),
        SubjectTransform(src="mto.1", dest="one.x"),
    ]
    await js.add_stream(
        StreamConfig(name="MTM", mirror=StreamSource(name="MTO", subject_transforms=transforms))
    )
    await wait_last_seq(nc, "MTM", 5)
    rows = await stored(nc, "MTM")
    assert [(s, subj) for s, subj, _, _ in rows] == [
        (1, "zero.x"),
        (2, "one.x"),
        (4, "zero.x"),
        (5, "one.x"),
    ]
    block = (await info(nc, "MTM"))["mirror"]
    assert block["subject_transforms"] == [
        {"src": "mto.0", "dest": "zero.x"},
        {"src": "mto.1", "dest": "one.x"},
    ]


async def test_mirror_start_sequence_and_time(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="MSO", subjects=["mso.>"])
    await _fill(nc, "MSO", "mso", 4)
    await asyncio.sleep(0.05)
    cut = datetime.datetime.now(datetime.UTC)
    await asyncio.sleep(0.05)
    await _fill(nc, "MSO", "mso", 3, start=4)
    await js.add_stream(
        StreamConfig(name="MSSEQ", mirror=StreamSource(name="MSO", opt_start_seq=3))
    )
    stamp = cut.isoformat().replace("+00:00", "Z")
    await js.add_stream(
        StreamConfig(name="MSTIME", mirror=StreamSource(name="MSO", opt_start_time=stamp))
    )
    await wait_last_seq(nc, "MSSEQ", 7)
    await wait_last_seq(nc, "MSTIME", 7)
    assert [r[0] for r in await stored(nc, "MSSEQ")] == [3, 4, 5, 6, 7]
    assert [r[0] for r in await stored(nc, "MSTIME")] == [5, 6, 7]
    state = (await info(nc, "MSSEQ"))["state"]
    assert (state["first_seq"], state["messages"]) == (3, 5)


async def test_mirror_rules_and_error_codes(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="MRO", subjects=["mro.>"])
    await js.add_stream(name="MRX", subjects=["mrx.>"])
    bad = [
        ({"name": "MR1", "mirror": {"name": "MRO"}, "subjects": ["mr1"]}, 10034),
        ({"name": "MR1", "mirror": {"name": "MRO"}, "sources": [{"name": "MRX"}]}, 10031),
        ({"name": "MR1", "mirror": {"name": "MRO"}, "first_seq": 5}, 10143),
        ({"name": "MR1", "mirror": {"name": "M.R"}}, 10142),
        (
            {
                "name": "MR1",
                "mirror": {
                    "name": "MRO",
                    "filter_subject": "mro.a",
                    "subject_transforms": [{"src": "mro.b", "dest": "b"}],
                },
            },
            10150,
        ),
    ]
    for body, code in bad:
        reply = await api(nc, "STREAM.CREATE.MR1", body)
        assert reply["error"]["err_code"] == code, body

    await js.add_stream(StreamConfig(name="MRM", mirror=StreamSource(name="MRO")))
    reply = await api(nc, "STREAM.UPDATE.MRM", {"name": "MRM", "mirror": {"name": "MRX"}})
    assert reply["error"]["err_code"] == 10055
    reply = await api(
        nc, "STREAM.UPDATE.MRM", {"name": "MRM", "mirror": {"name": "MRO"}, "subjects": ["q"]}
    )
    assert reply["error"]["err_code"] == 10034

    # A mirror takes no publishes: nothing listens on a subject for it, and a publish that
    # names it lands on the origin, which refuses the expectation.
    with pytest.raises(BadRequestError) as refused:
        await js.publish("mro.1", b"x", stream="MRM")
    assert refused.value.err_code == 10060
    with pytest.raises(NoStreamResponseError):
        await js.publish("MRM", b"x", timeout=1)


async def test_mirror_promoted_by_removing_the_mirror(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="MPO", subjects=["mpo.>"])
    await _fill(nc, "MPO", "mpo", 3)
    await js.add_stream(StreamConfig(name="MPM", mirror=StreamSource(name="MPO")))
    await wait_last_seq(nc, "MPM", 3)

    reply = await api(nc, "STREAM.UPDATE.MPM", {"name": "MPM", "subjects": ["mpm.>"]})
    assert "error" not in reply, reply
    assert "mirror" not in reply["config"]
    body = await info(nc, "MPM")
    assert "mirror" not in body
    assert body["config"]["subjects"] == ["mpm.>"]
    ack = await js.publish("mpm.own", b"mine")
    assert (ack.stream, ack.seq) == ("MPM", 4)
    await _fill(nc, "MPO", "mpo", 2, start=3)
    await asyncio.sleep(0.5)
    assert [r[0] for r in await stored(nc, "MPM")] == [1, 2, 3, 4]


async def test_mirror_of_missing_origin_reports_the_error(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="MNM", mirror=StreamSource(name="NOWHERE")))

    async def report() -> dict[str, object]:
        return (await info(nc, "MNM"))["mirror"]  # type: ignore[no-any-return]

    for _ in range(60):
        block = await report()
        if "error" in block:
            break
        await asyncio.sleep(0.05)
    assert block == {
        "name": "NOWHERE",
        "lag": 0,
        "active": -1,
        "error": {"code": 404, "err_code": 10059, "description": "stream not found"},
    }


async def test_mirror_of_kv_bucket_serves_the_same_keys(nc: Client) -> None:
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="mkv", history=2)
    await kv.put("a", b"1")
    await kv.put("a", b"2")
    await kv.put("b", b"x")
    await kv.delete("b")
    await js.add_stream(StreamConfig(name="MKV", mirror=StreamSource(name="KV_mkv")))
    await wait_last_seq(nc, "MKV", 4)
    rows = await stored(nc, "MKV")
    assert rows == await stored(nc, "KV_mkv")
    assert rows[-1][3] == {"KV-Operation": "DEL"}


# --- restarts ----------------------------------------------------------------------------


@pytest.fixture
def lone_server(js_server: ServerProcess) -> Iterator[ServerProcess]:
    """A server of the module's kind that this test may stop and restart."""
    srv = ServerProcess(js_server.kind, jetstream=True)
    srv.start()
    try:
        yield srv
    finally:
        srv.cleanup()


async def test_mirror_resumes_after_a_clean_restart(lone_server: ServerProcess) -> None:
    nc = await nats.connect(lone_server.url, allow_reconnect=False)
    js = nc.jetstream()
    await js.add_stream(name="RO", subjects=["ro.>"])
    await _fill(nc, "RO", "ro", 6)
    await js.add_stream(StreamConfig(name="RM", mirror=StreamSource(name="RO")))
    await wait_last_seq(nc, "RM", 6)
    await nc.close()

    lone_server.restart()
    nc = await nats.connect(lone_server.url, allow_reconnect=False)
    try:
        await _fill(nc, "RO", "ro", 4, start=6)
        await wait_last_seq(nc, "RM", 10, timeout=20)
        assert await stored(nc, "RM") == await stored(nc, "RO")
    finally:
        await nc.close()


async def test_mirror_survives_kill_9_while_origin_is_written(headwater: ServerProcess) -> None:
    """Reliability target: the mirror of a stream being written, its server killed and
    restarted, ends with exactly the origin's messages (sequences, payloads, headers)."""
    nc = await nats.connect(headwater.url, allow_reconnect=False)
    js = nc.jetstream()
    await js.add_stream(name="KO", subjects=["ko.>"])
    await js.add_stream(StreamConfig(name="KM", mirror=StreamSource(name="KO")))
    stop = asyncio.Event()
    sent = 0

    async def writer() -> None:
        nonlocal sent
        while not stop.is_set():
            try:
                await js.publish(f"ko.{sent % 4}", b"w%d" % sent, headers={"I": str(sent)})
            except Exception:
                return  # the server is gone
            sent += 1

    task = asyncio.create_task(writer())
    await wait_last_seq(nc, "KM", 200, timeout=30)
    headwater.kill()
    stop.set()
    await task
    await nc.close()

    headwater.restart()
    nc = await nats.connect(headwater.url, allow_reconnect=False)
    try:
        await _fill(nc, "KO", "ko", 20, start=10_000)
        last = (await info(nc, "KO"))["state"]["last_seq"]
        await wait_last_seq(nc, "KM", last, timeout=20)
        origin_rows = await stored(nc, "KO")
        assert await stored(nc, "KM") == origin_rows
        assert [r[0] for r in origin_rows] == list(range(1, last + 1))
    finally:
        await nc.close()


async def test_mirror_killed_during_its_catch_up_resumes_exactly(headwater: ServerProcess) -> None:
    """kill -9 while a new mirror copies a long origin in place: after the restart the mirror
    goes on from what reached its store and ends with exactly the origin's messages."""
    total = 150_000
    nc = await nats.connect(headwater.url, allow_reconnect=False, pending_size=64 * 1024 * 1024)
    js = nc.jetstream()
    await js.add_stream(name="CO", subjects=["co.>"])
    for start in range(0, total, 5000):
        for i in range(start, start + 5000):
            await nc.publish(
                f"co.{i % 7}", b"c%d" % i, headers={"I": "x"} if i % 501 == 0 else None
            )
        await nc.flush()
    await wait_last_seq(nc, "CO", total, timeout=60)
    await js.add_stream(StreamConfig(name="CM", mirror=StreamSource(name="CO")))

    async def copying() -> bool:
        return (await info(nc, "CM"))["state"]["messages"] > 0

    await eventually(copying, timeout=20, what="the mirror to start copying")
    headwater.kill()
    await nc.close()

    headwater.restart()
    nc = await nats.connect(headwater.url, allow_reconnect=False)
    try:
        kept = (await info(nc, "CM"))["state"]["messages"]
        assert 0 < kept < total, "the kill should land in the middle of the copy"
        await wait_last_seq(nc, "CM", total, timeout=60)
        assert await fetched(nc, "CM") == await fetched(nc, "CO")
    finally:
        await nc.close()


@pytest.mark.slow
async def test_mirror_recovers_when_its_origin_consumer_vanishes(
    headwater: ServerProcess,
) -> None:
    """The origin side loses the mirror's consumer (as when the origin restarts): idle
    heartbeats stop, the mirror notices the stall and recreates it from its position."""
    nc = await nats.connect(headwater.url, allow_reconnect=False)
    try:
        js = nc.jetstream()
        await js.add_stream(name="VO", subjects=["vo.>"])
        # The mirror's consumer on the origin is hidden from CONSUMER.NAMES (as nats-server
        # hides it); its CREATED advisory names it.
        created = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.CREATED.VO.>")
        await js.add_stream(StreamConfig(name="VM", mirror=StreamSource(name="VO")))
        await _fill(nc, "VO", "vo", 3)
        await wait_last_seq(nc, "VM", 3)
        advisory = await created.next_msg(timeout=5)
        assert (await api(nc, "CONSUMER.NAMES.VO"))["consumers"] == []
        await js.delete_consumer("VO", advisory.subject.rsplit(".", 1)[1])
        await _fill(nc, "VO", "vo", 3, start=3)
        await wait_last_seq(nc, "VM", 6, timeout=40)
        assert await stored(nc, "VM") == await stored(nc, "VO")
    finally:
        await nc.close()


# --- origins behind another API prefix -----------------------------------------------------

_HUB_ACCOUNTS = """
accounts {
  HUB: {
    jetstream: enabled
    users: [{user: hub, password: hub}]
    exports: [
      {service: "$JS.API.CONSUMER.CREATE.>"}
      {service: "$JS.API.CONSUMER.DELETE.>"}
      {service: "$JS.FC.>"}
      {stream: "dlv.>"}
    ]
  }
  APP: {
    jetstream: enabled
    users: [{user: app, password: app}]
    imports: [
      {service: {account: HUB, subject: "$JS.API.CONSUMER.CREATE.>"},
       to: "$JS.hub.API.CONSUMER.CREATE.>"}
      {service: {account: HUB, subject: "$JS.API.CONSUMER.DELETE.>"},
       to: "$JS.hub.API.CONSUMER.DELETE.>"}
      {service: {account: HUB, subject: "$JS.FC.>"}}
      {stream: {account: HUB, subject: "dlv.>"}}
    ]
  }
}
"""


@pytest.fixture(params=["headwater", "nats"], ids=["headwater", "nats-server"])
def hub_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProcess]:
    """A server where the origin is reached through ``$JS.hub.API``.

    nats-server: the origin lives in account HUB, which exports its consumer API; account APP
    imports it as ``$JS.hub.API`` (the reference's cross-account setup). Headwater has one
    JetStream account, so there the origin is in the same account and the server runs with
    JetStream domain ``hub``, whose API prefix is ``$JS.hub.API``: the mirror still creates
    its consumer through that prefix and receives on the ``external.deliver`` prefix.
    """
    conf = tmp_path / "hub.conf"
    text = f'host: 127.0.0.1\nport: -1\njetstream {{\n  store_dir: "{tmp_path / "js"}"\n'
    if request.param == "headwater":
        text += "  domain: hub\n}\n"
    else:
        text += "}\n" + _HUB_ACCOUNTS
    conf.write_text(text)
    srv = ServerProcess(request.param, args=["-c", str(conf)])
    srv.start()
    try:
        yield srv
    finally:
        srv.cleanup()


async def test_mirror_and_source_of_an_origin_behind_another_api_prefix(
    hub_server: ServerProcess,
) -> None:
    auth: dict[str, dict[str, str]] = {"hub": {}, "app": {}}
    if hub_server.kind == "nats":
        auth = {
            "hub": {"user": "hub", "password": "hub"},
            "app": {"user": "app", "password": "app"},
        }
    hub = await nats.connect(hub_server.url, allow_reconnect=False, **auth["hub"])
    app = await nats.connect(hub_server.url, allow_reconnect=False, **auth["app"])
    try:
        await hub.jetstream().add_stream(name="XO", subjects=["xo.>"])
        await _fill(hub, "XO", "xo", 4)
        external = ExternalStream(api="$JS.hub.API", deliver="dlv")
        js = app.jetstream()
        await js.add_stream(
            StreamConfig(name="XM", mirror=StreamSource(name="XO", external=external))
        )
        await js.add_stream(
            StreamConfig(name="XS", sources=[StreamSource(name="XO", external=external)])
        )
        await wait_last_seq(app, "XM", 4)
        await wait_last_seq(app, "XS", 4)
        await _fill(hub, "XO", "xo", 2, start=4)
        await wait_last_seq(app, "XM", 6)
        await wait_last_seq(app, "XS", 6)
        origin = await stored(hub, "XO")
        assert await stored(app, "XM") == origin
        sourced = await stored(app, "XS")
        assert [(s, subj, data) for s, subj, data, _ in sourced] == [r[:3] for r in origin]
        names = {h["Nats-Stream-Source"].split(" ")[0] for _, _, _, h in sourced}
        assert names == {"XO:bTMUkJQk"}  # name:hash(api), as the reference writes it
        block = (await info(app, "XM"))["mirror"]
        assert block["external"] == {"api": "$JS.hub.API", "deliver": "dlv"}
        assert (block["name"], block["lag"]) == ("XO", 0)
        block = (await info(app, "XS"))["sources"][0]
        assert (block["external"], block["seq"]) == ({"api": "$JS.hub.API", "deliver": "dlv"}, 6)
    finally:
        await hub.close()
        await app.close()
