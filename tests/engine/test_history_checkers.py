"""The history checkers of ``headwater.testing_history``, on hand-made histories.

Each checker is shown to pass good histories and, above all, to FAIL bad ones: a checker
that never fails proves nothing about the runs it judges (tests/faults/test_histories.py).
Times are small integers (ns); ``None`` as a completion means the outcome is unknown.
"""

from __future__ import annotations

import random

import pytest

from headwater.testing_history import (
    FAIL,
    INFO,
    OK,
    REFUSED,
    History,
    check_consumer_acks,
    check_kv,
    check_publishes,
    kv_ops,
    publish_outcomes,
)

# --- helpers -------------------------------------------------------------------------------


def get(h: History, t0: int, t1: int | None, read: tuple[str, int] | None, key: str = "k"):
    outcome = INFO if t1 is None else OK
    h.add("p", "get", t0, t1, outcome, list(read) if read else None, key=key)


def put(h: History, t0: int, t1: int | None, value: str, rev: int | None, key: str = "k"):
    outcome = INFO if t1 is None else OK
    h.add("p", "put", t0, t1, outcome, rev, key=key, value=value)


def update(
    h: History,
    t0: int,
    t1: int | None,
    value: str,
    expected: int,
    rev: int | None,
    *,
    refused: bool = False,
    key: str = "k",
):
    outcome = INFO if t1 is None else FAIL if refused else OK
    result = REFUSED if refused else rev
    h.add("p", "update", t0, t1, outcome, result, key=key, value=value, expected=expected)


def verdict(h: History, keys: tuple[str, ...] = ("k",), max_steps: int = 300_000) -> str:
    return check_kv(h, keys, max_steps).verdict


# --- B: KV linearizability: good histories --------------------------------------------------


def test_sequential_history_is_linearizable() -> None:
    h = History()
    get(h, 0, 1, None)
    put(h, 2, 3, "a", 1)
    get(h, 4, 5, ("a", 1))
    update(h, 6, 7, "b", 1, 2)
    update(h, 8, 9, "c", 1, None, refused=True)
    get(h, 10, 11, ("b", 2))
    update(h, 12, 13, "d", 0, None, refused=True)  # create: the key exists
    assert verdict(h) == "ok"


def test_a_read_concurrent_with_a_write_may_see_either_value() -> None:
    for seen in (("a", 1), ("b", 2)):
        h = History()
        put(h, 0, 1, "a", 1)
        put(h, 2, 10, "b", 2)
        get(h, 3, 9, seen)
        get(h, 11, 12, ("b", 2))
        assert verdict(h) == "ok", seen


def test_reads_may_order_concurrent_writes_against_their_invocation_order() -> None:
    h = History()
    put(h, 0, 10, "a", 2)  # invoked first, linearized second
    put(h, 1, 9, "b", 1)
    get(h, 11, 12, ("a", 2))
    assert verdict(h) == "ok"


def test_unknown_write_may_never_happen_or_happen_late() -> None:
    h = History()
    put(h, 0, 1, "a", 1)
    put(h, 2, None, "lost?", None)  # never seen
    get(h, 3, 4, ("a", 1))
    update(h, 5, None, "late", 1, None)  # seen long after it was sent
    get(h, 6, 7, ("a", 1))
    get(h, 100, 101, ("late", 2))
    assert verdict(h) == "ok"


def test_unknown_write_can_explain_a_refused_update() -> None:
    h = History()
    put(h, 0, 1, "a", 1)
    put(h, 2, None, "unseen", None)
    update(h, 3, 4, "b", 1, None, refused=True)
    assert verdict(h) == "ok"


def test_update_failed_for_another_reason_took_no_effect() -> None:
    h = History()
    put(h, 0, 1, "a", 1)
    h.add("p", "update", 2, 3, FAIL, "no responders", key="k", value="b", expected=1)
    get(h, 4, 5, ("a", 1))
    assert verdict(h) == "ok"


def test_keys_are_checked_each_on_its_own() -> None:
    h = History()
    put(h, 0, 1, "a", 1, key="x")
    put(h, 2, 3, "b", 2, key="y")
    get(h, 4, 5, ("a", 1), key="x")
    get(h, 6, 7, ("b", 2), key="y")
    report = check_kv(h, ("x", "y"))
    assert report.verdict == "ok", report.summary()
    assert [len(kv_ops(h, k)) for k in ("x", "y")] == [2, 2]


# --- B: KV linearizability: bad histories ---------------------------------------------------


def test_stale_read_fails() -> None:
    h = History()
    put(h, 0, 1, "a", 1)
    put(h, 2, 3, "b", 2)
    get(h, 4, 5, ("a", 1))  # b was acknowledged before this read began
    report = check_kv(h, ("k",))
    assert report.verdict == "fail"
    assert report.keys[0].stuck_at is not None


def test_stale_read_after_a_concurrent_read_saw_the_new_value_fails() -> None:
    h = History()
    put(h, 0, 1, "a", 1)
    put(h, 2, 20, "b", 2)
    get(h, 3, 4, ("b", 2))  # b visible...
    get(h, 5, 6, ("a", 1))  # ...then gone again, while b's put was still running
    assert verdict(h) == "fail"


def test_lost_update_fails() -> None:
    # Two clients read revision 1 and both compare-and-set from it: one must be refused.
    h = History()
    put(h, 0, 1, "a", 1)
    get(h, 2, 3, ("a", 1))
    get(h, 2, 3, ("a", 1))
    update(h, 4, 8, "b", 1, 2)
    update(h, 5, 9, "c", 1, 3)
    assert verdict(h) == "fail"


def test_lost_update_with_a_blind_put_overwritten_fails() -> None:
    h = History()
    put(h, 0, 1, "a", 1)
    update(h, 2, 3, "b", 1, 2)
    put(h, 4, 5, "c", 3)
    get(h, 6, 7, ("b", 2))  # c is lost
    assert verdict(h) == "fail"


def test_refused_update_that_should_have_succeeded_fails() -> None:
    h = History()
    put(h, 0, 1, "a", 1)
    update(h, 2, 3, "b", 1, None, refused=True)
    assert verdict(h) == "fail"


def test_create_of_an_existing_key_that_succeeds_fails() -> None:
    h = History()
    put(h, 0, 1, "a", 1)
    update(h, 2, 3, "b", 0, 2)
    assert verdict(h) == "fail"


def test_read_of_a_value_never_written_fails() -> None:
    h = History()
    put(h, 0, 1, "a", 1)
    get(h, 2, 3, ("ghost", 7))
    assert verdict(h) == "fail"


def test_read_before_the_write_was_invoked_fails() -> None:
    h = History()
    get(h, 0, 1, ("a", 1))
    put(h, 2, None, "a", None)  # unknown outcome, but invoked after the read returned
    assert verdict(h) == "fail"


def test_absent_after_an_acknowledged_write_fails() -> None:
    h = History()
    put(h, 0, 1, "a", 1)
    get(h, 2, 3, None)
    assert verdict(h) == "fail"


def test_revision_going_backwards_fails() -> None:
    h = History()
    put(h, 0, 1, "a", 5)
    put(h, 2, 3, "b", 3)
    assert verdict(h) == "fail"


def test_wrong_revision_in_a_read_fails() -> None:
    h = History()
    put(h, 0, 1, "a", 1)
    get(h, 2, 3, ("a", 2))
    assert verdict(h) == "fail"


def test_a_value_written_twice_is_refused() -> None:
    h = History()
    put(h, 0, 1, "a", 1)
    put(h, 2, 3, "a", 2)
    with pytest.raises(ValueError, match="unique"):
        check_kv(h, ("k",))


def test_search_is_bounded_and_says_unknown() -> None:
    # Many writes of unknown outcome, and a stale read at the end: finding that nothing
    # explains it takes an exponential search, which the bound cuts short.
    h = History()
    put(h, 0, 1, "a", 1)
    for n in range(16):
        put(h, 2 + n, None, f"u{n}", None)
    put(h, 30, 31, "b", 100)
    get(h, 40, 41, ("a", 1))
    report = check_kv(h, ("k",), max_steps=2000)
    assert report.verdict == "unknown", report.summary()
    assert report.keys[0].steps > 2000


# --- B: random histories of a real register -------------------------------------------------


def register_history(rng: random.Random, n: int, clients: int) -> History:
    """A history of ``clients`` clients on one atomic register: every operation takes effect
    at an instant inside its interval, so the history is linearizable by construction."""
    h = History()
    state: tuple[str, int] | None = None
    rev = 0
    free = [0] * clients  # when each client may invoke next
    events = []
    for i in range(n):
        c = rng.randrange(clients)
        invoke = free[c] + rng.randrange(1, 5)
        point = invoke + rng.randrange(1, 5)
        complete = point + rng.randrange(1, 5)
        free[c] = complete
        events.append((point, invoke, complete, c, i))
    for _point, invoke, complete, c, i in sorted(events):
        kind = rng.choice(["get", "put", "update"])
        value = f"c{c}-{i}"
        if kind == "get":
            get(h, invoke, complete, state)
        elif kind == "put":
            rev += 1
            state = (value, rev)
            put(h, invoke, complete, value, rev)
        else:
            expected = state[1] if state and rng.random() < 0.6 else rng.randrange(0, rev + 2)
            if (expected == 0 and state is None) or (state and state[1] == expected):
                rev += 1
                state = (value, rev)
                update(h, invoke, complete, value, expected, rev)
            else:
                update(h, invoke, complete, value, expected, None, refused=True)
    return h


@pytest.mark.parametrize("seed", range(20))
def test_random_register_histories_pass(seed: int) -> None:
    h = register_history(random.Random(seed), 200, 4)
    report = check_kv(h, ("k",))
    assert report.verdict == "ok", (seed, report.summary())


@pytest.mark.parametrize("seed", range(20))
def test_random_histories_with_one_stale_read_planted_fail(seed: int) -> None:
    rng = random.Random(seed)
    h = register_history(rng, 200, 4)
    # Plant a stale read: a read, after everything, of a value overwritten long before.
    writes = [op for op in h.ops if op.kind in ("put", "update") and op.outcome == OK]
    assert len(writes) >= 3, seed  # every seed here makes about a hundred
    old = rng.choice(writes[:-2])
    end = max(op.complete_ns or 0 for op in h.ops)
    get(h, end + 1, end + 2, (old.args["value"], old.result))
    assert check_kv(h, ("k",)).verdict == "fail", seed


# --- A: acknowledged publishes --------------------------------------------------------------


def test_publishes_all_there_once_pass() -> None:
    report = check_publishes({"a", "b"}, ["a", "u1", "b"], unknown={"u1", "u2"})
    assert report.valid, report.summary()
    assert (report.acked, report.unknown, report.unknown_stored) == (2, 2, 1)


def test_lost_duplicate_and_unexpected_publishes_are_found() -> None:
    report = check_publishes({"a", "b", "c"}, ["a", "b", "b", "x"], unknown={"u"})
    assert not report.valid
    assert report.lost == ["c"]
    assert report.duplicates == {"b": 2}
    assert report.unexpected == ["x"]


def test_publish_outcomes_count_retries_and_failures() -> None:
    h = History()
    h.add("p", "publish", 0, 1, INFO, "timeout", id="a")
    h.add("p", "publish", 2, 3, OK, 1, id="a")  # the retry was acknowledged
    h.add("p", "publish", 4, 5, INFO, "timeout", id="b")
    h.add("p", "publish", 6, 7, FAIL, "no responders", id="c")
    acked, unknown = publish_outcomes(h)
    assert (acked, unknown) == ({"a"}, {"b"})
    # a failed publish found in the stream is unexpected
    assert check_publishes(acked, ["a", "c"], unknown).unexpected == ["c"]


# --- C: consumer acks -----------------------------------------------------------------------


def test_redelivery_before_the_ack_completed_is_allowed() -> None:
    h = History()
    h.add("c", "fetch", 0, 1, OK, [[1, 1], [2, 1]])
    h.add("c", "ack", 2, 10, OK, seq=1)
    h.add("c", "fetch", 5, 6, OK, [[1, 2]])  # issued while the ack was under way
    h.add("c", "ack", 11, 12, INFO, "timeout", seq=2)
    h.add("c", "fetch", 13, 14, OK, [[2, 2]])  # the ack of 2 was never confirmed
    report = check_consumer_acks(h)
    assert report.valid, report.summary()
    assert (report.delivered, report.redelivered, report.acked) == (2, 2, 1)


def test_redelivery_after_a_completed_ack_sync_fails() -> None:
    h = History()
    h.add("c", "fetch", 0, 1, OK, [[1, 1]])
    h.add("c", "ack", 2, 3, OK, seq=1)
    h.add("c", "fetch", 4, 5, OK, [[1, 2]])
    report = check_consumer_acks(h)
    assert not report.valid
    assert report.violations == [(1, 3, 4)]


def test_history_records_live_operations() -> None:
    h = History()
    op = h.invoke("p0", "put", key="k", value="v")
    h.ok(op, 1)
    with pytest.raises(ValueError, match="twice"):
        h.ok(op, 2)
    with pytest.raises(ValueError, match="outcome"):
        h.complete(h.invoke("p0", "get", key="k"), "maybe")
    assert op.complete_ns is not None and op.complete_ns >= op.invoke_ns
    assert h.counts() == {OK: 1, INFO: 1}
    assert h.to_json().count("\n") == 2
