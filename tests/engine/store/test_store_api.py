"""The StreamStore contract; every test runs once against the memory and once the file store."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from headwater.server.store import (
    ByteBudget,
    MaxBytesExceeded,
    MaxMsgsExceeded,
    MaxMsgsPerSubjectExceeded,
    MsgTooLarge,
    StorageFull,
    StoreError,
    StoreLimits,
    StreamStore,
)
from headwater.server.store.base import StoreClosed

MakeStore = Callable[..., StreamStore]

HDR = b"NATS/1.0\r\nA: b\r\n\r\n"


def fill(store: StreamStore, subjects: list[str], n: int, data: bytes = b"x") -> None:
    for i in range(n):
        store.store_msg(subjects[i % len(subjects)], b"", data)


def seqs_of(store: StreamStore, filter: str = ">") -> list[int]:
    out, seq = [], 0
    while (msg := store.load_next(filter, seq + 1)) is not None:
        out.append(msg.seq)
        seq = msg.seq
    return out


# ------------------------------------------------------------------ append and load


def test_sequences_are_contiguous_and_messages_round_trip(store: StreamStore) -> None:
    a = store.store_msg("orders.new", HDR, b"one")
    b = store.store_msg("orders.new", b"", b"two")
    assert (a[0], b[0]) == (1, 2)
    assert a[1] <= b[1]
    msg = store.load_msg(1)
    assert msg is not None
    assert (msg.subject, msg.seq, msg.hdr, msg.data, msg.ts) == ("orders.new", 1, HDR, b"one", a[1])
    assert store.load_msg(3) is None
    assert store.load_msg(0) is None
    store.check()


def test_first_seq_config(make_store: MakeStore) -> None:
    store = make_store(first_seq=100)
    st = store.state()
    assert (st.first_seq, st.last_seq, st.msgs) == (100, 99, 0)
    assert store.store_msg("a", b"", b"")[0] == 100
    store.check()


def test_byte_accounting_matches_reference(store: StreamStore, kind: str) -> None:
    store.store_msg("world", b"", b"hello world!")  # 12-byte payload
    store.store_msg("world", HDR, b"hello world!")
    st = store.state()
    if kind == "file":
        assert st.bytes == 47 + (47 + 4 + len(HDR))
    else:
        assert st.bytes == (5 + 12 + 16) + (5 + len(HDR) + 12 + 16)


def test_state_tracks_first_last_and_gaps(store: StreamStore) -> None:
    fill(store, ["a", "b", "c"], 9)
    assert store.remove_msg(4)
    assert store.remove_msg(5, erase=False)
    assert not store.remove_msg(5)
    assert not store.remove_msg(99)
    st = store.state(deleted_details=True)
    assert (st.msgs, st.first_seq, st.last_seq, st.num_deleted, st.num_subjects) == (7, 1, 9, 2, 3)
    assert st.deleted == [4, 5]
    assert store.state().deleted is None
    store.remove_msg(1)
    store.remove_msg(2)
    first = store.load_msg(3)
    assert first is not None
    st = store.state()
    assert (st.first_seq, st.first_ts, st.num_deleted) == (3, first.ts, 2)
    store.check()


def test_removing_everything_moves_first_past_last(store: StreamStore) -> None:
    fill(store, ["a"], 3)
    for seq in (3, 1, 2):
        store.remove_msg(seq)
    st = store.state()
    assert (st.msgs, st.bytes, st.first_ts, st.num_deleted) == (0, 0, 0, 0)
    assert (st.first_seq, st.last_seq) == (4, 3)
    assert store.store_msg("a", b"", b"")[0] == 4
    store.check()


# ------------------------------------------------------------------ filtered reads


def test_load_next_with_filters(store: StreamStore) -> None:
    for subj in ["foo.a", "foo.b", "bar.a", "foo.a.x", "foo.b", "baz"]:
        store.store_msg(subj, b"", subj.encode())
    assert seqs_of(store, ">") == [1, 2, 3, 4, 5, 6]
    assert seqs_of(store, "") == [1, 2, 3, 4, 5, 6]
    assert seqs_of(store, "foo.*") == [1, 2, 5]
    assert seqs_of(store, "foo.>") == [1, 2, 4, 5]
    assert seqs_of(store, "*.a") == [1, 3]
    assert seqs_of(store, "foo.b") == [2, 5]
    assert seqs_of(store, "nope") == []
    assert seqs_of(store, "foo*") == []  # not a wildcard token: a literal subject
    msg = store.load_next("foo.b", 3)
    assert msg is not None and msg.seq == 5
    assert store.load_next("foo.b", 6) is None


def test_load_next_many_subjects_wildcard(store: StreamStore) -> None:
    for i in range(60):
        store.store_msg(f"kv.k{i % 20}", b"", b"v")
        store.store_msg(f"other.k{i % 20}", b"", b"v")
    got = seqs_of(store, "kv.*")
    assert got == list(range(1, 121, 2))
    msg = store.load_next("kv.>", 50)
    assert msg is not None and msg.seq == 51


def test_load_last_and_prev(store: StreamStore) -> None:
    for subj in ["a.1", "a.2", "b.1", "a.1", "b.2"]:
        store.store_msg(subj, b"", subj.encode())
    last = store.load_last("a.1")
    assert last is not None and last.seq == 4
    last = store.load_last("a.*")
    assert last is not None and last.seq == 4
    last = store.load_last(">")
    assert last is not None and last.seq == 5
    assert store.load_last("zzz") is None
    prev = store.load_prev("a.1", 3)
    assert prev is not None and prev.seq == 1
    prev = store.load_prev("b.*", 4)
    assert prev is not None and prev.seq == 3
    assert store.load_prev("b.*", 2) is None
    store.remove_msg(4)
    last = store.load_last("a.1")
    assert last is not None and last.seq == 1
    store.check()


def test_subject_state_pending_and_last(store: StreamStore) -> None:
    for subj in ["a.1", "a.2", "b.1", "a.1", "b.2", "a.1"]:
        store.store_msg(subj, b"", b"")
    assert store.subject_state(">") == {"a.1": 3, "a.2": 1, "b.1": 1, "b.2": 1}
    assert store.subject_state("a.*") == {"a.1": 3, "a.2": 1}
    assert store.subject_state("a.1") == {"a.1": 3}
    assert store.subjects_last("a.*") == {"a.1": 6, "a.2": 2}
    assert store.num_pending(">", 1) == 6
    assert store.num_pending(">", 4) == 3
    assert store.num_pending("a.1", 2) == 2
    assert store.num_pending("a.*", 3) == 2
    assert store.num_pending("a.*", 1, last_per_subject=True) == 2
    assert store.num_pending(">", 5, last_per_subject=True) == 2
    assert store.num_pending("b.*", 7) == 0
    store.remove_msg(6)
    assert store.subjects_last("a.1") == {"a.1": 4}
    assert store.num_pending("a.1", 1) == 2
    store.check()


def test_pending_with_many_partial_subjects(store: StreamStore) -> None:
    for i in range(100):
        store.store_msg(f"s.{i % 25}", b"", b"")
    assert store.num_pending("s.*", 51) == 50
    assert store.num_pending("s.*", 51, last_per_subject=True) == 25
    assert store.num_pending("s.*", 90, last_per_subject=True) == 11


def test_seq_from_time(store: StreamStore) -> None:
    stamps = [store.store_msg("a", b"", b"")[1] for _ in range(5)]
    assert store.seq_from_time(0) == 1
    assert store.seq_from_time(stamps[2]) <= 3
    assert store.seq_from_time(stamps[4] + 1) == 6


# ------------------------------------------------------------------ purge and compact


def test_purge_all_keeps_sequence(store: StreamStore) -> None:
    fill(store, ["a", "b"], 10)
    assert store.purge() == 10
    st = store.state()
    assert (st.msgs, st.first_seq, st.last_seq, st.bytes) == (0, 11, 10, 0)
    assert store.store_msg("a", b"", b"")[0] == 11
    store.check()


def test_purge_up_to_sequence(store: StreamStore) -> None:
    fill(store, ["a", "b"], 10)
    assert store.purge(seq=4) == 3
    assert store.state().first_seq == 4
    assert store.purge(seq=1) == 0
    store.check()


def test_purge_keep_newest(store: StreamStore) -> None:
    fill(store, ["a", "b"], 10)
    assert store.purge(keep=3) == 7
    assert seqs_of(store) == [8, 9, 10]
    assert store.purge(keep=5) == 0
    store.check()


def test_purge_by_subject(store: StreamStore) -> None:
    fill(store, ["a.1", "a.2", "b"], 12)
    assert store.purge("a.*") == 8
    assert seqs_of(store) == [3, 6, 9, 12]
    assert store.state().first_seq == 3
    store.check()


def test_purge_by_subject_keep_and_seq(store: StreamStore) -> None:
    fill(store, ["a", "b"], 12)  # a at odd seqs 1..11
    assert store.purge("a", keep=2) == 4
    assert seqs_of(store, "a") == [9, 11]
    assert store.purge("b", seq=7) == 3  # b at 2, 4, 6 go
    assert seqs_of(store, "b") == [8, 10, 12]
    assert store.purge("nope") == 0
    store.check()


def test_compact(store: StreamStore) -> None:
    fill(store, ["a"], 10)
    assert store.compact(6) == 5
    assert store.state().first_seq == 6
    assert store.compact(3) == 0
    assert store.compact(50) == 5
    st = store.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (0, 50, 49)
    assert store.store_msg("a", b"", b"")[0] == 50
    store.check()


def test_skip_msgs_and_set_first_seq(store: StreamStore) -> None:
    store.skip_msgs(1, 5)
    st = store.state()
    assert (st.first_seq, st.last_seq, st.msgs) == (6, 5, 0)
    assert store.store_msg("a", b"", b"")[0] == 6
    store.skip_msgs(7, 3)
    assert store.store_msg("a", b"", b"")[0] == 10
    assert store.state(deleted_details=True).deleted == [7, 8, 9]
    with pytest.raises(StoreError):
        store.skip_msgs(5, 1)
    assert store.set_first_seq(1000) == 2
    st = store.state()
    assert (st.first_seq, st.last_seq, st.msgs) == (1000, 999, 0)
    with pytest.raises(StoreError):
        store.set_first_seq(10)
    store.check()


def test_store_msg_at_a_given_time(store: StreamStore) -> None:
    """A replicated stream stores each message at the time its leader gave it, on every
    replica: the time is taken as given, kept monotonic as any other, and what max_age and
    TTLs measure from."""
    base = 1_700_000_000 * 10**9
    assert store.store_msg("a", b"", b"1", ts_ns=base) == (1, base)
    assert store.store_msg("a", b"", b"2", ttl_ns=10**9, ts_ns=base + 5) == (2, base + 5)
    # Earlier than the last message: the last message's time, as for a clock stepping back.
    assert store.store_msg("a", b"", b"3", ts_ns=base - 1) == (3, base + 5)
    assert store.expire(now_ns=base + 10**9 + 4) == 0
    assert store.expire(now_ns=base + 10**9 + 5) == 1  # the TTL counts from the given time
    assert [m.ts for m in (store.load_msg(1), store.load_msg(3)) if m] == [base, base + 5]
    store.check()


# ------------------------------------------------------------------ limits


def test_max_msgs_discard_old(make_store: MakeStore) -> None:
    store = make_store(limits=StoreLimits(max_msgs=3))
    fill(store, ["a", "b"], 10)
    assert seqs_of(store) == [8, 9, 10]
    store.check()


def test_max_msgs_discard_new(make_store: MakeStore) -> None:
    store = make_store(limits=StoreLimits(max_msgs=3, discard="new"))
    fill(store, ["a"], 3)
    with pytest.raises(MaxMsgsExceeded) as err:
        store.store_msg("a", b"", b"")
    assert str(err.value) == "maximum messages exceeded"
    assert err.value.kind == "max_msgs"
    assert store.state().last_seq == 3
    store.check()


def test_max_bytes_discard_old(make_store: MakeStore, kind: str) -> None:
    per = 30 + 1 + 10 if kind == "file" else 1 + 10 + 16
    store = make_store(limits=StoreLimits(max_bytes=per * 4))
    fill(store, ["a"], 10, data=b"0123456789")
    st = store.state()
    assert (st.msgs, st.bytes, st.first_seq) == (4, per * 4, 7)
    store.check()


def test_max_bytes_discard_new(make_store: MakeStore, kind: str) -> None:
    store = make_store(limits=StoreLimits(max_bytes=200, discard="new"))
    with pytest.raises(MaxBytesExceeded) as err:
        for _ in range(100):
            store.store_msg("a", b"", b"0123456789")
    assert str(err.value) == "maximum bytes exceeded"
    # Upstream's check is ``bytes + new >= max_bytes`` where the file store counts only the new
    # payload (so it can end a record's overhead above the limit) and the memory store its size.
    st = store.state()
    if kind == "file":
        assert (st.msgs, st.bytes) == (5, 5 * 41)
    else:
        assert (st.msgs, st.bytes) == (7, 7 * 27)
    store.check()


def test_max_msgs_per_subject(make_store: MakeStore) -> None:
    store = make_store(limits=StoreLimits(max_msgs_per_subject=2))
    fill(store, ["a", "b", "c"], 12)
    assert store.subject_state(">") == {"a": 2, "b": 2, "c": 2}
    assert seqs_of(store) == [7, 8, 9, 10, 11, 12]
    store.check()


def test_per_subject_limit_replaces_under_discard_new(make_store: MakeStore) -> None:
    store = make_store(limits=StoreLimits(max_msgs=2, max_msgs_per_subject=1, discard="new"))
    store.store_msg("a", b"", b"1")
    store.store_msg("b", b"", b"1")
    store.store_msg("a", b"", b"2")  # at a's limit: replaces a instead of failing max_msgs
    assert seqs_of(store) == [2, 3]
    with pytest.raises(MaxMsgsExceeded):
        store.store_msg("c", b"", b"1")
    store.check()


def test_discard_new_per_subject(make_store: MakeStore) -> None:
    limits = StoreLimits(max_msgs_per_subject=1, discard="new", discard_new_per_subject=True)
    store = make_store(limits=limits)
    store.store_msg("a", b"", b"1")
    with pytest.raises(MaxMsgsPerSubjectExceeded) as err:
        store.store_msg("a", b"", b"2")
    assert str(err.value) == "maximum messages per subject exceeded"
    store.store_msg("b", b"", b"1")
    store.check()


def test_max_msg_size(make_store: MakeStore) -> None:
    store = make_store(limits=StoreLimits(max_msg_size=10))
    store.store_msg("a", b"", b"0123456789")
    with pytest.raises(MsgTooLarge):
        store.store_msg("a", b"", b"0123456789x")
    with pytest.raises(MsgTooLarge):
        store.store_msg("a", b"12345", b"123456")


def test_storage_budget_shared(make_store: MakeStore) -> None:
    budget = ByteBudget(limit=300)
    one = make_store("one", budget=budget)
    two = make_store("two", budget=budget)
    one.store_msg("a", b"", b"x" * 100)
    two.store_msg("a", b"", b"x" * 100)
    with pytest.raises(StorageFull) as err:
        one.store_msg("a", b"", b"x" * 100)
    assert err.value.kind == "storage_full"
    assert budget.used == one.state().bytes + two.state().bytes
    one.purge()
    assert budget.used == two.state().bytes
    one.store_msg("a", b"", b"x" * 100)


def test_update_limits_trims_immediately(store: StreamStore) -> None:
    fill(store, ["a", "b"], 20)
    store.update_limits(StoreLimits(max_msgs_per_subject=3))
    assert store.subject_state(">") == {"a": 3, "b": 3}
    store.update_limits(StoreLimits(max_msgs=4))
    assert seqs_of(store) == [17, 18, 19, 20]
    store.update_limits(StoreLimits(max_msgs=2, discard="new"))  # discard new never trims
    assert store.state().msgs == 4
    assert store.limits.discard == "new"
    store.check()


def test_limit_removals_call_hook_with_reason(make_store: MakeStore) -> None:
    store = make_store(limits=StoreLimits(max_msgs=2, max_msgs_per_subject=1))
    seen: list[tuple[int, str, str]] = []
    store.on_remove = lambda seq, subj: seen.append((seq, subj, store.removal_reason))
    store.store_msg("a", b"", b"")
    store.store_msg("a", b"", b"")
    store.store_msg("b", b"", b"")
    store.store_msg("c", b"", b"")
    store.remove_msg(4)  # explicit removals are not reported
    assert seen == [(1, "a", "max_msgs_per_subject"), (2, "a", "max_msgs")]


# ------------------------------------------------------------------ expiry


def test_max_age_expiry(make_store: MakeStore) -> None:
    store = make_store(limits=StoreLimits(max_age=1_000))
    seen: list[tuple[int, str]] = []
    store.on_remove = lambda seq, subj: seen.append((seq, store.removal_reason))
    stamps = [store.store_msg("a", b"", b"")[1] for _ in range(3)]
    assert store.next_expiry() == stamps[0] + 1_000
    assert store.expire(stamps[0] + 999) == 0
    assert store.expire(stamps[1] + 1_000) == sum(ts <= stamps[1] for ts in stamps)
    assert all(reason == "max_age" for _, reason in seen)
    remaining = store.state().msgs
    assert remaining == sum(1 for ts in stamps if ts > stamps[1])
    assert store.expire(stamps[2] + 1_000) == remaining
    assert store.next_expiry() is None
    store.check()


def test_ttl_expiry_and_never(make_store: MakeStore) -> None:
    store = make_store(limits=StoreLimits(max_age=10_000))
    _, t1 = store.store_msg("a", b"", b"ttl", ttl_ns=500)
    _, t2 = store.store_msg("b", b"", b"never", ttl_ns=-1)
    _, t3 = store.store_msg("c", b"", b"plain")
    assert store.next_expiry() == t1 + 500
    reasons: list[str] = []
    store.on_remove = lambda seq, subj: reasons.append(store.removal_reason)
    assert store.expire(t1 + 500) == 1
    assert reasons == ["ttl"]
    assert store.next_expiry() == t3 + 10_000  # the "never" message does not count
    assert store.expire(t3 + 20_000) == 1
    assert [m for m in seqs_of(store)] == [2]
    assert store.next_expiry() is None
    assert t2 >= t1
    store.check()


def test_ttl_without_max_age(store: StreamStore) -> None:
    _, ts = store.store_msg("a", b"", b"", ttl_ns=1_000)
    store.store_msg("b", b"", b"")
    assert store.next_expiry() == ts + 1_000
    store.remove_msg(1)
    assert store.next_expiry() is None
    assert store.expire(ts + 10**12) == 0
    store.check()


# ------------------------------------------------------------------ lifecycle


def test_closed_store_refuses_writes(make_store: MakeStore) -> None:
    store = make_store()
    store.store_msg("a", b"", b"")
    store.close()
    with pytest.raises(StoreClosed):
        store.store_msg("a", b"", b"")
    store.close()  # idempotent


async def test_durable_and_aclose(make_store: MakeStore) -> None:
    store = make_store()
    store.store_msg("a", b"", b"1")
    await store.durable()
    await store.aclose()
    with pytest.raises(StoreClosed):
        store.store_msg("a", b"", b"")


def test_delete(make_store: MakeStore) -> None:
    store = make_store(budget=ByteBudget(-1))
    fill(store, ["a"], 5)
    store.delete()
    assert store.state().msgs == 0


def test_both_stores_implement_the_protocol(store: StreamStore) -> None:
    assert isinstance(store, StreamStore)


def test_check_catches_broken_invariants(store: StreamStore) -> None:
    fill(store, ["a", "b"], 6)
    store.check()
    store._idx.bytes += 1  # type: ignore[attr-defined]
    with pytest.raises(AssertionError, match="sizes != bytes"):
        store.check()
    store._idx.bytes -= 1  # type: ignore[attr-defined]
    store._idx.subjects.count[0] += 1  # type: ignore[attr-defined]
    with pytest.raises(AssertionError, match="count of"):
        store.check()
