"""Reading and deleting single messages: STREAM.MSG.GET, DIRECT.GET and STREAM.MSG.DELETE."""

from __future__ import annotations

import json

import nats
import pytest
from nats.aio.client import Client
from nats.js.errors import APIError, NotFoundError


async def fill(nc: Client, stream: str, subjects: list[str], **config: object) -> None:
    js = nc.jetstream()
    await js.add_stream(name=stream, subjects=[f"{subjects[0].split('.')[0]}.>"], **config)
    for i, subject in enumerate(subjects):
        await js.publish(subject, b"m%d" % (i + 1), headers={"X-N": str(i + 1)})


@pytest.mark.parametrize("direct", [False, True], ids=["api", "direct"])
async def test_get_by_sequence_last_and_next(nc: Client, direct: bool) -> None:
    name = f"GET_{int(direct)}"
    prefix = f"get{int(direct)}"
    await fill(nc, name, [f"{prefix}.a", f"{prefix}.b", f"{prefix}.a"], allow_direct=direct)
    js = nc.jetstream()
    msg = await js.get_msg(name, 2, direct=direct)
    assert (msg.subject, msg.seq, msg.data) == (f"{prefix}.b", 2, b"m2")
    assert msg.headers is not None and msg.headers["X-N"] == "2"
    last = await js.get_last_msg(name, f"{prefix}.a", direct=direct)
    assert (last.seq, last.data) == (3, b"m3")
    nxt = await js.get_msg(name, 2, subject=f"{prefix}.a", next=True, direct=direct)
    assert nxt.seq == 3
    with pytest.raises(NotFoundError):
        await js.get_msg(name, 99, direct=direct)
    with pytest.raises(NotFoundError):
        await js.get_last_msg(name, f"{prefix}.zzz", direct=direct)


async def test_direct_get_wire_format(nc: Client) -> None:
    await fill(nc, "DWIRE", ["dw.a", "dw.b", "dw.a"], allow_direct=True)
    got = await nc.request("$JS.API.DIRECT.GET.DWIRE", b'{"seq":1}', timeout=5)
    assert got.data == b"m1"
    assert got.headers is not None
    assert [k for k in got.headers if k.startswith("Nats-")] == [
        "Nats-Stream",
        "Nats-Subject",
        "Nats-Sequence",
        "Nats-Time-Stamp",
    ]
    assert got.headers["X-N"] == "1"
    by_subject = await nc.request("$JS.API.DIRECT.GET.DWIRE.dw.a", b"", timeout=5)
    assert by_subject.headers is not None and by_subject.headers["Nats-Sequence"] == "3"
    missing = await nc.request("$JS.API.DIRECT.GET.DWIRE", b'{"seq":42}', timeout=5)
    assert missing.headers is not None
    assert (missing.headers["Status"], missing.headers["Description"]) == (
        "404",
        "Message Not Found",
    )
    for body, description in (
        (b"", "Empty Request"),
        (b"{nope", "Malformed Request"),
        (b'{"seq":1,"last_by_subj":"dw.a"}', "Bad Request"),
    ):
        bad = await nc.request("$JS.API.DIRECT.GET.DWIRE", body, timeout=5)
        assert bad.headers is not None
        assert (bad.headers["Status"], bad.headers["Description"]) == ("408", description)
    with pytest.raises(nats.errors.NoRespondersError):
        await nc.request("$JS.API.DIRECT.GET.NO_SUCH_STREAM", b'{"seq":1}', timeout=5)


async def test_direct_get_batch(nc: Client) -> None:
    await fill(nc, "DBATCH", ["db.a", "db.b", "db.c"], allow_direct=True)
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish("$JS.API.DIRECT.GET.DBATCH", b'{"seq":1,"batch":2}', reply=inbox)
    got = [await sub.next_msg(timeout=5) for _ in range(3)]
    assert [m.data for m in got[:2]] == [b"m1", b"m2"]
    pending = [(m.headers or {}).get("Nats-Num-Pending") for m in got]
    assert pending == ["2", "1", "1"]
    assert got[2].headers is not None and got[2].headers["Status"] == "204"


async def test_msg_get_api_shape(nc: Client) -> None:
    await fill(nc, "SHAPE", ["shape.a"])
    reply = await nc.request("$JS.API.STREAM.MSG.GET.SHAPE", b'{"seq":1}', timeout=5)
    body = json.loads(reply.data)
    assert body["type"] == "io.nats.jetstream.api.v1.stream_msg_get_response"
    assert list(body["message"]) == ["subject", "seq", "hdrs", "data", "time"]
    for request in (b"", b"{}", b'{"seq":1,"last_by_subj":"shape.a"}'):
        reply = await nc.request("$JS.API.STREAM.MSG.GET.SHAPE", request, timeout=5)
        assert json.loads(reply.data)["error"]["err_code"] == 10003
    reply = await nc.request("$JS.API.STREAM.MSG.GET.SHAPE", b'{"seq":5}', timeout=5)
    assert json.loads(reply.data)["error"] == {
        "code": 404,
        "err_code": 10037,
        "description": "no message found",
    }


async def test_delete_msg(nc: Client) -> None:
    await fill(nc, "DEL", ["del.a", "del.b", "del.c", "del.d"])
    js = nc.jetstream()
    assert await js.delete_msg("DEL", 2)
    reply = await nc.request("$JS.API.STREAM.MSG.DELETE.DEL", b'{"seq":3,"no_erase":true}', 5)
    assert json.loads(reply.data) == {
        "type": "io.nats.jetstream.api.v1.stream_msg_delete_response",
        "success": True,
    }
    with pytest.raises(APIError) as info:
        await js.delete_msg("DEL", 2)
    assert (info.value.err_code, info.value.description) == (10043, "sequence 2 not found")
    with pytest.raises(APIError) as info:
        await js.delete_msg("DEL", 99)
    assert info.value.err_code == 10057
    state = (await js.stream_info("DEL")).state
    assert (state.messages, state.num_deleted, state.first_seq, state.last_seq) == (2, 2, 1, 4)
    await js.add_stream(name="NODEL", subjects=["nodel"], deny_delete=True)
    await js.publish("nodel", b"x")
    with pytest.raises(APIError) as info:
        await js.delete_msg("NODEL", 1)
    assert (info.value.err_code, info.value.description) == (10057, "message delete not permitted")
