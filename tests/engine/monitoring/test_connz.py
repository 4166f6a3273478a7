"""/connz: per-connection records, options, sorting, paging, closed connections."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from headwater.server.monitoring.connz import ConnzOptions, closed_record, connz
from headwater.server.monitoring.params import BadRequest, Query
from headwater.server.node import Server
from support.wire import WireClient

CONNECT = {"name": "probe", "lang": "python3", "version": "9.9.9"}


async def wait_until(predicate: Any, timeout: float = 2.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


async def connect(node: Server, **connect: Any) -> WireClient:
    client = await WireClient.connect(node.port, {**CONNECT, **connect})
    await client.send("PING\r\n")
    await client.expect("PONG")
    return client


async def test_connection_record_fields_and_counters(node: Server) -> None:
    sub = await connect(node)
    await sub.send("SUB a 1\r\nSUB b q 2\r\nPING\r\n")
    await sub.expect("PONG")
    pub = await connect(node, name="")
    await pub.send("PUB a 4\r\nabcd\r\nPUB a 2\r\nxy\r\nPING\r\n")
    await pub.expect("PONG")
    await sub.msg()
    await sub.msg()
    doc = connz(node)
    assert doc["server_id"] == node.server_id
    assert doc["num_connections"] == doc["total"] == 2
    assert doc["offset"] == 0 and doc["limit"] == 1024
    first, second = doc["connections"]
    assert first["cid"] < second["cid"]
    assert first["kind"] == "Client" and first["type"] == "nats"
    assert first["ip"] == "127.0.0.1" and isinstance(first["port"], int)
    assert first["name"] == "probe" and first["lang"] == "python3"
    assert first["version"] == "9.9.9"
    assert first["subscriptions"] == 2
    assert (first["in_msgs"], first["in_bytes"]) == (0, 0)
    assert (first["out_msgs"], first["out_bytes"]) == (2, 6)
    assert (second["in_msgs"], second["in_bytes"]) == (2, 6)
    assert (second["out_msgs"], second["out_bytes"]) == (0, 0)
    assert "name" not in second  # empty strings are left out, as in nats-server
    assert first["pending_bytes"] == 0
    for key in ("start", "last_activity"):
        assert first[key].endswith("Z")
    assert first["uptime"] == "0s" and first["idle"] == "0s"
    assert first["rtt"].endswith("s")
    assert "subscriptions_list" not in first
    assert "stop" not in first and "reason" not in first
    await sub.close()
    await pub.close()


async def test_subscription_lists(node: Server) -> None:
    client = await connect(node)
    await client.send("SUB a.* 1\r\nSUB b grp 2\r\nUNSUB 2 5\r\nPING\r\n")
    await client.expect("PONG")
    listed = connz(node, ConnzOptions(subs=True))["connections"][0]
    assert sorted(listed["subscriptions_list"]) == ["a.*", "b"]
    detail = connz(node, ConnzOptions(subs_detail=True))["connections"][0]
    assert "subscriptions_list" not in detail
    by_sid = {d["sid"]: d for d in detail["subscriptions_list_detail"]}
    assert by_sid["1"] == {"subject": "a.*", "sid": "1", "msgs": 0, "cid": detail["cid"]}
    assert by_sid["2"]["qgroup"] == "grp" and by_sid["2"]["max"] == 5
    await client.close()


async def test_sorting(node: Server) -> None:
    clients = [await connect(node) for _ in range(3)]
    busy, subscriber = clients[1], clients[2]
    await subscriber.send("SUB x 1\r\nSUB y 2\r\nSUB z 3\r\nPING\r\n")
    await subscriber.expect("PONG")
    await busy.send("PUB x 10\r\n0123456789\r\nPUB x 1\r\n0\r\nPUB none 1\r\n0\r\nPING\r\n")
    await busy.expect("PONG")
    await subscriber.msg()
    await subscriber.msg()
    cids = {name: c for name, c in zip(("quiet", "busy", "sub"), sorted(node.clients), strict=True)}

    def order(sort: str) -> list[int]:
        return [c["cid"] for c in connz(node, ConnzOptions(sort=sort))["connections"]]

    assert order("cid") == [cids["quiet"], cids["busy"], cids["sub"]]
    assert order("subs")[0] == cids["sub"]
    assert order("msgs_from")[0] == cids["busy"]
    assert order("bytes_from")[0] == cids["busy"]
    assert order("msgs_to")[0] == cids["sub"]
    assert order("bytes_to")[0] == cids["sub"]
    # Most recent activity first for "last"; longest idle first for "idle".
    node.clients[cids["quiet"]].last_activity -= 100
    assert order("last")[-1] == cids["quiet"]
    assert order("idle")[0] == cids["quiet"]
    # Shortest uptime first.
    node.clients[cids["busy"]].start -= 1000
    assert order("uptime")[-1] == cids["busy"]
    node.clients[cids["sub"]].rtt = 0.5
    assert order("rtt")[0] == cids["sub"]
    for c in clients:
        await c.close()


def test_bad_options_are_refused() -> None:
    with pytest.raises(BadRequest, match="invalid sorting option: nope"):
        ConnzOptions(sort="nope")
    with pytest.raises(BadRequest, match="sort by stop only valid on closed connections"):
        ConnzOptions(sort="stop")
    with pytest.raises(BadRequest, match="sort by reason only valid on closed"):
        ConnzOptions(sort="reason", state="all")
    with pytest.raises(BadRequest, match="Error decoding state for weird"):
        ConnzOptions.from_query(Query.parse("state=weird"))
    with pytest.raises(BadRequest, match="'limit'"):
        ConnzOptions.from_query(Query.parse("limit=ten"))


def test_options_from_query() -> None:
    opts = ConnzOptions.from_query(Query.parse("subs=detail&offset=-3&limit=0&state=ANY"))
    assert opts.subs_detail and not opts.subs
    assert (opts.offset, opts.limit, opts.state) == (0, 1024, "all")
    opts = ConnzOptions.from_query(Query.parse("subs=1&cid=7&limit=50&auth=true&sort=msgs_to"))
    assert opts.subs and opts.auth and opts.sort == "msgs_to"
    assert (opts.cid, opts.limit) == (7, 1)  # one connection asked for: the limit is 1


async def test_paging_and_cid(node: Server) -> None:
    clients = [await connect(node) for _ in range(5)]
    cids = sorted(node.clients)
    page = connz(node, ConnzOptions(offset=1, limit=2))
    assert [c["cid"] for c in page["connections"]] == cids[1:3]
    assert page["num_connections"] == 2 and page["total"] == 5
    past_end = connz(node, ConnzOptions(offset=10))
    assert past_end["connections"] == [] and past_end["num_connections"] == 0
    one = connz(node, ConnzOptions.from_query(Query.parse(f"cid={cids[3]}")))
    assert [c["cid"] for c in one["connections"]] == [cids[3]]
    assert one["limit"] == 1 and one["total"] == 5
    missing = connz(node, ConnzOptions(cid=10_000))
    assert missing["connections"] == []
    for c in clients:
        await c.close()


async def test_closed_connections(node: Server) -> None:
    keep = await connect(node)
    gone = await connect(node)
    gone_cid = max(node.clients)
    await gone.close()
    await wait_until(lambda: gone_cid not in node.clients)
    closed = connz(node, ConnzOptions(state="closed"))
    assert closed["total"] == 1
    (entry,) = closed["connections"]
    assert entry["cid"] == gone_cid
    assert entry["reason"] == "Client Closed"
    both = connz(node, ConnzOptions(state="all"))
    assert both["total"] == 2
    assert {c["cid"] for c in both["connections"]} == set(node.clients) | {gone_cid}
    assert connz(node)["total"] == 1
    await keep.close()


async def test_closed_record_keeps_what_connz_shows(node: Server) -> None:
    client = await connect(node)
    await client.send("SUB a 1\r\nSUB b g 2\r\nPING\r\n")
    await client.expect("PONG")
    await client.send("PUB a 3\r\nabc\r\n")
    await client.msg()
    live = node.clients[max(node.clients)]
    record = closed_record(live, stop=live.start + 61)
    record["reason"] = "Slow Consumer (Pending Bytes)"
    node.closed_clients = [record, {"cid": 999, "reason": "Stale Connection"}]
    doc = connz(node, ConnzOptions(state="closed", subs_detail=True, sort="reason"))
    full, minimal = doc["connections"]
    assert full["cid"] == live.cid and full["reason"] == "Slow Consumer (Pending Bytes)"
    assert full["stop"].endswith("Z")
    assert full["uptime"] == "1m1s"
    assert (full["in_msgs"], full["out_msgs"], full["in_bytes"], full["out_bytes"]) == (1, 1, 3, 3)
    assert full["name"] == "probe" and full["subscriptions"] == 2
    subjects = {d["subject"]: d for d in full["subscriptions_list_detail"]}
    assert subjects["a"]["msgs"] == 1 and subjects["b"]["qgroup"] == "g"
    assert all(d["cid"] == live.cid for d in subjects.values())
    # A bare record (what older servers kept) still renders.
    assert minimal["cid"] == 999 and minimal["reason"] == "Stale Connection"
    assert "stop" not in minimal
    by_stop = connz(node, ConnzOptions(state="closed", sort="stop"))["connections"]
    assert [c["cid"] for c in by_stop] == [live.cid, 999]
    await client.close()


async def test_auth_shows_and_filters_users(node: Server) -> None:
    a = await connect(node)
    b = await connect(node)
    first, second = sorted(node.clients)
    node.clients[first].user = "alice"
    node.clients[second].user = "bob"
    plain = connz(node)["connections"]
    assert all("authorized_user" not in c for c in plain)
    shown = connz(node, ConnzOptions(auth=True))["connections"]
    assert [c["authorized_user"] for c in shown] == ["alice", "bob"]
    only_bob = connz(node, ConnzOptions(auth=True, user="bob"))["connections"]
    assert [c["cid"] for c in only_bob] == [second]
    await a.close()
    await b.close()


async def test_pending_bytes_counts_queued_output(node: Server) -> None:
    client = await connect(node)
    live = node.clients[max(node.clients)]
    live.out.append(b"x" * 100)
    live.out_size += 100
    assert connz(node)["connections"][0]["pending_bytes"] == 100
    assert connz(node, ConnzOptions(sort="pending"))["connections"][0]["cid"] == live.cid
    live.out.clear()
    live.out_size = 0
    await client.close()
