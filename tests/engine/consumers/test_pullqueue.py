"""The waiting pull requests on their own: arrival order, max_waiting, expiry, heartbeats."""

from __future__ import annotations

from headwater.server.consumers.pullqueue import PullRequest, WaitQueue


def request(reply: str, expires_at: float = 0.0, heartbeat: float = 0.0) -> PullRequest:
    return PullRequest(reply, 1, 0, expires_at, False, heartbeat, last_sent=0.0)


def test_bounded_fifo() -> None:
    queue = WaitQueue(2)
    first, second = request("a"), request("b")
    queue.add(first)
    assert not queue.full()
    queue.add(second)
    assert queue.full() and len(queue) == 2
    assert queue.pop() is first
    assert queue.peek() is second and not queue.full()
    assert not WaitQueue(0).full()  # 0 = no limit


def test_expire_takes_out_only_the_expired_in_arrival_order() -> None:
    queue = WaitQueue(0)
    reqs = [request("a", 5.0), request("b"), request("c", 2.0), request("d", 9.0)]
    for req in reqs:
        queue.add(req)
    assert queue.expire(1.0) == []
    assert [r.reply for r in queue.expire(5.0)] == ["a", "c"]
    assert [r.reply for r in queue] == ["b", "d"]
    assert queue.peek() is reqs[1]


def test_heartbeats_due_are_marked_sent_and_next_deadline_follows() -> None:
    queue = WaitQueue(0)
    hb = request("hb", expires_at=50.0, heartbeat=5.0)
    plain = request("plain", expires_at=20.0)
    queue.add(hb)
    queue.add(plain)
    assert queue.next_deadline() == 5.0  # hb last sent at 0
    assert queue.heartbeats_due(4.0) == []
    assert queue.heartbeats_due(6.0) == [hb] and hb.last_sent == 6.0
    assert queue.next_deadline() == 11.0
    assert queue.heartbeats_due(30.0) == [hb]
    assert queue.next_deadline() == 20.0  # plain's expiry comes first now
    assert WaitQueue(0).next_deadline() == 0.0
