"""A replicated stream's consumer records (``jetstream.groupconsumers``), applied alike.

Two streams of one in-process server stand for two replicas with no service behind their
records (nothing runs live): fed the same ops they keep the same records, a new consumer's
first state is placed by its deliver policy against the stream at its entry, and a snapshot
carries the records whole.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import orjson
import pytest
from engine.jetstream.conftest import in_process

from headwater.server.jetstream import groupops
from headwater.server.jetstream.groupconsumers import GroupConsumers
from headwater.server.jetstream.groupops import ConsumerAdd, ConsumerDelete, ConsumerState
from headwater.server.jetstream.stream import Stream


@pytest.fixture
async def replicas(tmp_path: Path) -> AsyncIterator[tuple[Stream, Stream]]:
    streams = [
        {"name": name, "subjects": [f"{name.lower()}.>"], "storage": "memory"}
        for name in ("A", "B")
    ]
    async with in_process(tmp_path / "js", *streams) as srv:
        yield srv.jetstream.streams["A"], srv.jetstream.streams["B"]


def _config(**fields: object) -> bytes:
    base = {"durable_name": "W", "deliver_policy": "all", "ack_policy": "explicit"}
    return orjson.dumps(base | fields)


def _publish(stream: Stream, n: int) -> None:
    now = time.time_ns()
    for i in range(n):
        groupops.apply(stream, groupops.Publish(f"{stream.name.lower()}.x", b"", b"m", now + i))


async def test_replicas_fed_the_same_ops_keep_the_same_records(
    replicas: tuple[Stream, Stream],
) -> None:
    a, b = replicas
    records = [GroupConsumers(a, None), GroupConsumers(b, None)]
    for stream in (a, b):
        _publish(stream, 3)
    created = time.time_ns()
    ops: list[groupops.ConsumerOp] = [
        ConsumerAdd("NEW", _config(durable_name="NEW", deliver_policy="new"), created),
        ConsumerAdd("ALL", _config(durable_name="ALL"), created),
    ]
    outcomes = [[r.apply(op) for op in ops] for r in records]
    assert outcomes == [[True, True], [True, True]]
    for r in records:
        first = orjson.loads(r.records["NEW"].state)
        assert first["sseq"] == 4, first  # after the three stored at its entry
        assert orjson.loads(r.records["ALL"].state)["sseq"] == 1
    assert records[0].capture() == records[1].capture()
    state = orjson.dumps({"dseq": 2, "sseq": 3, "adflr": 2, "asflr": 2, "pending": []})
    later: list[groupops.ConsumerOp] = [
        ConsumerState("ALL", state),
        ConsumerState("MISSING", state),
        ConsumerAdd("ALL", _config(durable_name="ALL", description="updated"), created),
        ConsumerDelete("NEW"),
        ConsumerDelete("NEW"),
    ]
    outcomes = [[r.apply(op) for op in later] for r in records]
    assert outcomes == [[True, False, True, True, False]] * 2
    for r in records:
        assert sorted(r.records) == ["ALL"]
        assert r.records["ALL"].state == state  # an update keeps the recorded state
        assert orjson.loads(r.records["ALL"].config)["description"] == "updated"
    assert records[0].capture() == records[1].capture()


async def test_a_snapshot_carries_the_records(replicas: tuple[Stream, Stream]) -> None:
    a, b = replicas
    source, target = GroupConsumers(a, None), GroupConsumers(b, None)
    source.apply(ConsumerAdd("ALL", _config(durable_name="ALL"), 5))
    target.apply(ConsumerAdd("OLD", _config(durable_name="OLD"), 1))
    rows = orjson.loads(orjson.dumps(source.capture()))  # through JSON, as a snapshot goes
    target.install(rows)
    assert target.capture() == source.capture()
    assert sorted(target.records) == ["ALL"]


async def test_a_config_that_does_not_decode_stops_the_replica(
    replicas: tuple[Stream, Stream],
) -> None:
    a, _ = replicas
    with pytest.raises(groupops.OpError):
        GroupConsumers(a, None).apply(ConsumerAdd("X", b"{not json", 1))


def test_the_consumer_ops_round_trip() -> None:
    for op in (
        ConsumerAdd("C", _config(), 7),
        ConsumerState("C", b'{"dseq":1}'),
        ConsumerDelete("C"),
    ):
        assert groupops.decode(groupops.encode(op)) == op


def _state(sseq: int, pending: list[int]) -> bytes:
    rows = [[seq, 1, 0] for seq in pending]
    return orjson.dumps({"dseq": 0, "sseq": sseq, "adflr": 0, "asflr": 0, "pending": rows})


async def test_interest_retention_is_decided_by_the_records_alike(
    replicas: tuple[Stream, Stream],
) -> None:
    """An interest stream's replicas drop a message once every consumer that wants it is
    done with it, by what the log recorded of each (not by live consumers, which only the
    leader runs): both replicas end alike."""
    ends = []
    for stream in replicas:
        stream.config = msgspec.structs.replace(stream.config, retention="interest")
        records = GroupConsumers(stream, None)
        prefix = stream.name.lower()
        only_a = _config(durable_name="A", filter_subject=f"{prefix}.s.a")
        records.apply(ConsumerAdd("A", only_a, 1))
        records.apply(ConsumerAdd("ALL", _config(durable_name="ALL"), 1))
        assert stream.interest_filters == [f"{prefix}.s.a", ""]
        now = time.time_ns()
        for i, subject in enumerate(("s.a", "s.b", "s.a")):
            groupops.apply(stream, groupops.Publish(f"{prefix}.{subject}", b"", b"m", now + i))
        # A took 1 and 3 and acked 1; ALL has 1..3 delivered, 2 pending.
        records.apply(ConsumerState("A", _state(4, [3])))
        assert stream.state().msgs == 3  # ALL still needs 1
        records.apply(ConsumerState("ALL", _state(4, [2])))
        assert [stream.store.load_msg(s) is None for s in (1, 2, 3)] == [True, False, False]
        records.apply(ConsumerDelete("ALL"))
        assert records.apply(groupops.DropUnneeded([1, 2, 3])) == 1  # 2: only ALL wanted it
        ends.append([stream.store.load_msg(s) is None for s in (1, 2, 3)])
    assert ends == [[True, True, False]] * 2
