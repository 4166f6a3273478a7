"""/subsz: sublist statistics, the optional list, paging and the test-subject filter."""

from __future__ import annotations

import pytest

from headwater.server.monitoring.params import BadRequest, Query
from headwater.server.monitoring.subsz import SubszOptions, subsz
from headwater.server.node import Server
from support.wire import WireClient

STATS = (
    "num_subscriptions",
    "num_cache",
    "num_inserts",
    "num_removes",
    "num_matches",
    "cache_hit_rate",
    "max_fanout",
    "avg_fanout",
)


async def subscribed(node: Server) -> WireClient:
    client = await WireClient.connect(node.port, {})
    await client.send("SUB orders.* 1\r\nSUB orders.new workers 2\r\nSUB other 3\r\nUNSUB 3\r\n")
    await client.send("SUB audit.> 4\r\nUNSUB 4 10\r\nPING\r\n")
    await client.expect("PONG")
    return client


async def test_statistics_without_list(node: Server) -> None:
    client = await subscribed(node)
    publisher = await WireClient.connect(node.port, {})
    # Separate reads, so the two publishes are not routed as one batch (one match).
    for _ in range(2):
        await publisher.send("PUB orders.new 1\r\nx\r\nPING\r\n")
        await publisher.expect("PONG")
    await publisher.close()
    doc = subsz(node)
    assert doc["server_id"] == node.server_id and doc["now"].endswith("Z")
    assert list(doc)[2:10] == list(STATS)
    assert doc["num_subscriptions"] == 3
    assert doc["num_inserts"] == 4 and doc["num_removes"] == 1
    assert doc["num_matches"] == 2
    assert doc["cache_hit_rate"] == 0.5
    # orders.* plus the queue group: two deliveries per message.
    assert doc["max_fanout"] == 2
    assert isinstance(doc["avg_fanout"], int | float)
    assert (doc["total"], doc["offset"], doc["limit"]) == (0, 0, 1024)
    assert "subscriptions_list" not in doc
    await client.close()


async def test_listing_does_not_move_the_match_counters(node: Server) -> None:
    client = await subscribed(node)
    before = subsz(node)
    listed = subsz(node, SubszOptions(subs=True, test="orders.new"))
    assert listed["num_matches"] == before["num_matches"]
    await client.close()


async def test_subscription_list(node: Server) -> None:
    client = await subscribed(node)
    cid = max(node.clients)
    doc = subsz(node, SubszOptions(subs=True))
    assert doc["total"] == 3
    assert [d["sid"] for d in doc["subscriptions_list"]] == ["1", "2", "4"]
    first, queue, limited = doc["subscriptions_list"]
    assert first == {
        "account": "$G",
        "account_tag": "$G",
        "subject": "orders.*",
        "sid": "1",
        "msgs": 0,
        "cid": cid,
    }
    assert queue["qgroup"] == "workers"
    assert limited["max"] == 10
    await client.close()


async def test_test_subject_filters_to_what_a_publish_would_reach(node: Server) -> None:
    client = await subscribed(node)
    doc = subsz(node, SubszOptions.from_query(Query.parse("subs=1&test=orders.new")))
    assert sorted(d["subject"] for d in doc["subscriptions_list"]) == ["orders.*", "orders.new"]
    assert doc["total"] == 2
    deep = subsz(node, SubszOptions(subs=True, test="audit.a.b"))
    assert [d["subject"] for d in deep["subscriptions_list"]] == ["audit.>"]
    none = subsz(node, SubszOptions(subs=True, test="nothing.here"))
    assert none["total"] == 0 and "subscriptions_list" not in none
    await client.close()


async def test_paging(node: Server) -> None:
    client = await subscribed(node)
    doc = subsz(node, SubszOptions.from_query(Query.parse("subs=1&offset=1&limit=1")))
    assert doc["total"] == 3 and (doc["offset"], doc["limit"]) == (1, 1)
    assert [d["sid"] for d in doc["subscriptions_list"]] == ["2"]
    await client.close()


@pytest.mark.parametrize("subject", ["orders.*", "a.>", "a..b", ""])
def test_test_subject_must_be_publishable(subject: str) -> None:
    if not subject:
        assert SubszOptions.from_query(Query.parse("test=")).test == ""
        return
    with pytest.raises(BadRequest, match="invalid test subject"):
        SubszOptions(test=subject)
