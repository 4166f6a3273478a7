"""Consumer bookkeeping on a real memory store with a recording client: what gets delivered,
ack floors, redelivery and the saved-state round trip."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import msgspec

from headwater.server.consumers import state
from headwater.server.consumers.consumer import Consumer
from headwater.server.jetstream.consumerconfig import ConsumerConfig
from headwater.server.store import StoreConfig, open_store


class Sublist:
    def match(self, subject: str) -> bool:
        return True


class Server:
    """What a consumer asks of the server: is anybody listening, and the match to keep."""

    sublist = Sublist()
    interest_epoch = 0

    def match(self, subject: str) -> bool:
        return True


@dataclass
class Client:
    sent: list[tuple[str, bytes, str, bytes | None]] = field(default_factory=list)
    server: Any = field(default_factory=Server)

    def subscribe(self, subject: str, handler: Any, queue: str | None = None) -> object:
        return object()

    def unsubscribe(self, sub: object) -> None:
        return None

    def publish(
        self,
        subject: str,
        payload: bytes,
        reply: str = "",
        hdr: bytes | None = None,
        shown_subject: str | None = None,
        targets: object = None,
    ) -> int:
        self.sent.append((subject, payload, reply, hdr))
        return 1


@dataclass
class Stream:
    name: str = "S"
    client: Client = field(default_factory=Client)
    store: Any = field(default_factory=lambda: open_store(StoreConfig("S", storage="memory")))
    config: Any = field(default_factory=lambda: type("C", (), {"retention": "limits"})())
    done: list[int] = field(default_factory=list)
    hungry: set[Any] = field(default_factory=set)

    @property
    def lseq(self) -> int:
        return int(self.store.state().last_seq)

    def consumer_done(self, seq: int, consumer: Any) -> None:
        self.done.append(seq)


def make(n: int, **cfg: Any) -> tuple[Stream, Consumer]:
    stream = Stream()
    for i in range(n):
        stream.store.store_msg(f"s.{i}", b"", b"m%d" % (i + 1))
    base = ConsumerConfig(durable_name="D", ack_policy="explicit", ack_wait=30_000_000_000)
    consumer = Consumer(stream, "D", msgspec.structs.replace(base, **cfg), 0)  # type: ignore[arg-type]
    consumer.start(fresh=True)
    return stream, consumer


def deliver(consumer: Consumer, n: int) -> list[int]:
    out = []
    for _ in range(n):
        item = consumer.next_message()
        assert item is not None
        consumer.deliver("inbox", *item)
        out.append(item[0].seq)
    return out


async def test_explicit_ack_floor_moves_over_contiguous_acks() -> None:
    _, c = make(4)
    assert deliver(c, 4) == [1, 2, 3, 4]
    c.process_ack(2, 2)
    assert (c.adflr, c.asflr, len(c.pending)) == (0, 0, 3)
    c.process_ack(1, 1)
    assert (c.adflr, c.asflr) == (2, 2)
    c.process_ack(4, 4)
    c.process_ack(3, 3)
    assert (c.adflr, c.asflr, c.pending) == (4, 4, {})
    c.stop(deleted=False)


async def test_ack_all_acks_everything_below() -> None:
    _, c = make(3, ack_policy="all")
    deliver(c, 3)
    c.process_ack(2, 2)
    assert list(c.pending) == [3]
    assert (c.adflr, c.asflr) == (2, 2)
    c.stop(deleted=False)


async def test_nak_queues_redelivery_with_higher_count() -> None:
    stream, c = make(2)
    deliver(c, 2)
    c.process_nak(1, 1, 0)
    item = c.next_message()
    assert item is not None and (item[0].seq, item[1]) == (1, 2)
    c.deliver("inbox", *item)
    assert c.rdc == {1: 2} and c.dseq == 3
    reply = stream.client.sent[-1][2]
    assert reply.startswith("$JS.ACK.S.D.2.1.3.")
    c.stop(deleted=False)


async def test_ack_wait_expiry_redelivers_and_max_deliver_stops() -> None:
    _, c = make(1, ack_wait=50_000_000, max_deliver=2)
    exhausted: list[tuple[int, int]] = []
    c.on_max_deliveries = lambda _c, seq, dc: exhausted.append((seq, dc))
    deliver(c, 1)
    await asyncio.sleep(0.12)
    assert list(c.rdq) == [1]
    assert deliver(c, 1) == [1]
    await asyncio.sleep(0.12)
    assert list(c.rdq) == [1] and exhausted == []
    # Exhaustion is noticed when the message would go out a third time.
    assert c.next_message() is None
    assert exhausted == [(1, 2)]
    assert (c.pending, c.rdc) == ({}, {1: 2})
    c.stop(deleted=False)


async def test_state_round_trip() -> None:
    stream, c = make(3)
    deliver(c, 3)
    c.process_ack(1, 1)
    saved = state.snapshot(c)
    c.stop(deleted=False)
    other = Consumer(stream, "D", c.config, 0)  # type: ignore[arg-type]
    state.restore(other, saved)
    assert (other.dseq, other.sseq, other.adflr, other.asflr) == (3, 4, 1, 1)
    assert list(other.pending) == [2, 3]
    assert other.num_pending() == 0


async def test_retention_hook_only_for_interest_and_workqueue() -> None:
    stream, c = make(3)
    deliver(c, 3)
    c.process_ack(1, 1)
    assert stream.done == []
    stream.config.retention = "interest"
    c.process_ack(2, 2)
    assert stream.done == [2]
    c.stop(deleted=False)


async def test_pending_count_in_ack_subjects_follows_new_messages() -> None:
    stream, c = make(3, filter_subject="s.*")
    deliver(c, 1)
    assert stream.client.sent[-1][2].endswith(".2")
    stream.store.store_msg("s.x", b"", b"late")
    stream.store.store_msg("other", b"", b"not for this consumer")
    stream.store.store_msg("s.y", b"", b"later")
    deliver(c, 1)
    assert stream.client.sent[-1][2].endswith(".3")
    assert c.num_pending() == c.num_pending(fresh=True) == 3
    deliver(c, 3)
    assert stream.client.sent[-1][2].endswith(".0")
    assert c.num_pending(fresh=True) == 0
    c.stop(deleted=False)


async def test_read_ahead_skips_messages_removed_after_they_were_read() -> None:
    stream, c = make(6)
    assert deliver(c, 1) == [1]
    assert [m.seq for m in c._ahead] == [1, 2, 3, 4, 5, 6]  # one batched read
    stream.store.remove_msg(3)
    stream.store.remove_msg(4)
    assert deliver(c, 3) == [2, 5, 6]
    assert c.next_message() is None
    stream.store.store_msg("s.new", b"", b"late")
    assert deliver(c, 1) == [7]  # appended after the buffer ran dry: read again
    c.stop(deleted=False)


async def test_read_ahead_is_dropped_when_the_filter_changes() -> None:
    _, c = make(6)
    assert deliver(c, 1) == [1]
    c.config = msgspec.structs.replace(c.config, filter_subject="s.5")
    c.filters = c._filters()
    assert deliver(c, 1) == [6]  # s.5 is message 6; buffered s.1 .. s.4 are not it
    c.stop(deleted=False)


async def test_unget_returns_the_same_message_next() -> None:
    _, c = make(3)
    item = c.next_message()
    assert item is not None and item[0].seq == 1
    c.put_back(item[0].seq, item[1])
    assert deliver(c, 3) == [1, 2, 3]
    c.stop(deleted=False)
