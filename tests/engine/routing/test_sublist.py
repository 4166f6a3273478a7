"""Tests for headwater.server.routing.sublist."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any

import pytest

from headwater.server.routing.subjects import subject_matches
from headwater.server.routing.sublist import (
    CACHE_MAX,
    CACHE_SWEEP,
    EMPTY_RESULT,
    PATCH_LIMIT,
    InvalidSubjectError,
    Sublist,
    SublistResult,
)


@dataclass
class Sub:
    """Equal-by-value and unhashable (eq=True drops __hash__), like a real subscription."""

    subject: str
    queue: str | None = None
    sid: str = ""


def ids(subs: Any) -> list[int]:
    return sorted(id(s) for s in subs)


def groups(result: SublistResult) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for group in result.qsubs:
        assert group, "empty queue group tuple"
        name = group[0].queue
        assert all(s.queue == name for s in group), "mixed queue names in one group"
        assert name not in out, f"queue group {name!r} split in two"
        out[name] = ids(group)
    return out


def expected(subs: list[Sub], subject: str) -> tuple[list[int], dict[str, list[int]]]:
    """Brute force: every subscription's filter tested with subject_matches."""
    plain = [s for s in subs if not s.queue and subject_matches(s.subject, subject)]
    grouped: dict[str, list[Sub]] = {}
    for s in subs:
        if s.queue and subject_matches(s.subject, subject):
            grouped.setdefault(s.queue, []).append(s)
    return ids(plain), {k: ids(v) for k, v in grouped.items()}


def check(sl: Sublist, subs: list[Sub], subject: str) -> None:
    result = sl.match(subject)
    got = (ids(result.psubs), groups(result))
    assert got == expected(subs, subject), subject


def check_cache_index(sl: Sublist) -> None:
    """The cached-subject trie must list exactly the cached subjects."""
    keys: list[str] = []
    stack = [sl._ckeys]
    while stack:
        level = stack.pop()
        for tok, child in level.items():
            if tok:
                assert child, "empty level left in the cached-subject trie"
                stack.append(child)
            else:
                keys.append(child)
    assert sorted(keys) == sorted(sl._cache)


# --------------------------------------------------------------------------- basics


def test_literal_match() -> None:
    sl = Sublist()
    a, b = Sub("foo.bar"), Sub("foo.baz")
    sl.insert(a)
    sl.insert(b)
    assert sl.match("foo.bar").psubs == (a,)
    assert sl.match("foo.baz").psubs == (b,)
    assert sl.match("foo") is EMPTY_RESULT
    assert sl.match("foo.bar.baz") is EMPTY_RESULT
    assert sl.count == 2


def test_partial_wildcard() -> None:
    sl = Sublist()
    subs = [Sub("foo.*"), Sub("*.bar"), Sub("*.*"), Sub("foo.*.baz"), Sub("*")]
    for s in subs:
        sl.insert(s)
    assert ids(sl.match("foo.bar").psubs) == ids(subs[:3])
    assert ids(sl.match("foo.qux").psubs) == ids([subs[0], subs[2]])
    assert ids(sl.match("foo.x.baz").psubs) == ids([subs[3]])
    assert ids(sl.match("foo").psubs) == ids([subs[4]])
    assert sl.match("foo.x.y") is EMPTY_RESULT


def test_full_wildcard() -> None:
    sl = Sublist()
    gt, foo_gt, foo_bar_gt, star_gt = Sub(">"), Sub("foo.>"), Sub("foo.bar.>"), Sub("*.>")
    for s in (gt, foo_gt, foo_bar_gt, star_gt):
        sl.insert(s)
    assert ids(sl.match("foo").psubs) == ids([gt])
    assert ids(sl.match("foo.bar").psubs) == ids([gt, foo_gt, star_gt])
    assert ids(sl.match("foo.bar.baz").psubs) == ids([gt, foo_gt, foo_bar_gt, star_gt])
    assert ids(sl.match("other.x.y.z").psubs) == ids([gt, star_gt])


def test_wildcard_characters_inside_tokens_are_literal() -> None:
    sl = Sublist()
    star_tok, gt_tok = Sub("foo*"), Sub("a.b>")
    sl.insert(star_tok)
    sl.insert(gt_tok)
    assert sl.match("foo*").psubs == (star_tok,)
    assert sl.match("foox") is EMPTY_RESULT
    assert sl.match("a.b>").psubs == (gt_tok,)
    assert sl.match("a.bc") is EMPTY_RESULT


def test_published_wildcard_tokens_match_only_wildcard_subs() -> None:
    # Non-pedantic clients may PUB to "foo.*"; nats-server treats "*" as token text there.
    sl = Sublist()
    lit, pwc, fwc = Sub("foo.bar"), Sub("foo.*"), Sub("foo.>")
    for s in (lit, pwc, fwc):
        sl.insert(s)
    assert ids(sl.match("foo.*").psubs) == ids([pwc, fwc])
    assert ids(sl.match("foo.>").psubs) == ids([pwc, fwc])


def test_queue_groups_grouped_by_name() -> None:
    sl = Sublist()
    q1a, q1b = Sub("work.a", "q1"), Sub("work.*", "q1")
    q2 = Sub("work.>", "q2")
    plain = Sub("work.a")
    for s in (q1a, q1b, q2, plain):
        sl.insert(s)
    result = sl.match("work.a")
    assert result.psubs == (plain,)
    assert groups(result) == {"q1": ids([q1a, q1b]), "q2": ids([q2])}
    assert result.fanout() == 3
    only_wild = sl.match("work.b")
    assert only_wild.psubs == ()
    assert groups(only_wild) == {"q1": ids([q1b]), "q2": ids([q2])}


def test_empty_queue_name_is_a_plain_subscription() -> None:
    sl = Sublist()
    s = Sub("foo", "")
    sl.insert(s)
    assert sl.match("foo").psubs == (s,)
    assert sl.match("foo").qsubs == ()
    assert sl.remove(s)


def test_identity_not_equality() -> None:
    sl = Sublist()
    a, b = Sub("foo", sid="1"), Sub("foo", sid="1")
    assert a == b
    sl.insert(a)
    sl.insert(b)
    assert sl.count == 2
    assert ids(sl.match("foo").psubs) == ids([a, b])
    assert sl.remove(a)
    assert sl.match("foo").psubs == (b,)
    assert not sl.remove(a)
    assert sl.remove(b)
    assert sl.count == 0


def test_duplicate_insert_is_ignored() -> None:
    sl = Sublist()
    a, q = Sub("foo.*"), Sub("foo.*", "g")
    for _ in range(3):
        sl.insert(a)
        sl.insert(q)
    assert sl.count == 2
    assert sl.stats()["num_inserts"] == 2
    result = sl.match("foo.x")
    assert result.psubs == (a,)
    assert result.qsubs == ((q,),)


def test_remove() -> None:
    sl = Sublist()
    subs = [Sub("a.b"), Sub("a.*"), Sub("a.>"), Sub("a.b", "q"), Sub("*.b", "q")]
    for s in subs:
        sl.insert(s)
    assert not sl.remove(Sub("a.b"))  # equal value, different object
    assert not sl.remove(Sub("x.y"))
    assert not sl.remove(Sub("a.b", "other"))
    assert not sl.remove(Sub("a..b"))
    assert not sl.remove(Sub("a.>.b"))
    for i, s in enumerate(subs):
        assert sl.remove(s)
        assert not sl.remove(s)
        check(sl, subs[i + 1 :], "a.b")
    assert sl.count == 0
    assert sl.match("a.b") is EMPTY_RESULT
    # Removing everything prunes the trie back to an empty root.
    assert sl._root.is_empty()


@pytest.mark.parametrize("subject", ["", "foo..bar", ".foo", "foo.", "foo.>.bar", ">.foo"])
def test_insert_rejects_malformed_subjects(subject: str) -> None:
    sl = Sublist()
    with pytest.raises(InvalidSubjectError):
        sl.insert(Sub(subject))
    assert sl.count == 0
    assert sl._root.is_empty()


@pytest.mark.parametrize("subject", ["", "foo..bar", ".foo", "foo.", "."])
def test_match_of_malformed_subject_is_empty_and_not_cached(subject: str) -> None:
    sl = Sublist()
    sl.insert(Sub(">"))
    sl.insert(Sub("*.*"))
    assert sl.match(subject) is EMPTY_RESULT
    assert sl.stats()["num_cache"] == 0


def test_all_lists_every_subscription() -> None:
    sl = Sublist()
    subs = [Sub("a"), Sub("a.b"), Sub("*"), Sub(">"), Sub("a.*", "q"), Sub("a.*", "q")]
    for s in subs:
        sl.insert(s)
    assert ids(sl.all()) == ids(subs)
    sl.remove(subs[0])
    assert ids(sl.all()) == ids(subs[1:])


# --------------------------------------------------------------------------- results and cache


def test_result_is_immutable() -> None:
    sl = Sublist()
    sl.insert(Sub("foo"))
    result = sl.match("foo")
    with pytest.raises(AttributeError):
        result.psubs = ()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del result.qsubs
    assert isinstance(result.psubs, tuple)
    assert isinstance(result.qsubs, tuple)
    assert bool(result)
    assert not EMPTY_RESULT


def test_cached_result_is_not_mutated_by_later_changes() -> None:
    sl = Sublist()
    a = Sub("foo.bar")
    sl.insert(a)
    first = sl.match("foo.bar")
    b, q = Sub("foo.*"), Sub("foo.bar", "q")
    sl.insert(b)
    sl.insert(q)
    assert first.psubs == (a,)
    assert first.qsubs == ()
    second = sl.match("foo.bar")
    assert ids(second.psubs) == ids([a, b])
    assert second.qsubs == ((q,),)
    sl.remove(a)
    assert ids(second.psubs) == ids([a, b])
    assert sl.match("foo.bar").psubs == (b,)


def test_cache_hits_and_stats() -> None:
    sl = Sublist()
    subs = [Sub("foo.bar"), Sub("foo.*"), Sub("foo.bar", "q1"), Sub("foo.*", "q2")]
    for s in subs:
        sl.insert(s)
    r1 = sl.match("foo.bar")
    r2 = sl.match("foo.bar")
    assert r1 is r2
    sl.match("foo.baz")
    sl.match("nothing")
    sl.remove(subs[0])
    stats = sl.stats()
    assert set(stats) == {
        "num_subscriptions",
        "num_cache",
        "num_inserts",
        "num_removes",
        "num_matches",
        "cache_hit_rate",
        "max_fanout",
        "avg_fanout",
    }
    # The literal removal dropped only the "foo.bar" entry.
    assert stats["num_cache"] == 2
    assert stats["num_subscriptions"] == 3
    assert stats["num_inserts"] == 4
    assert stats["num_removes"] == 1
    assert stats["num_matches"] == 4
    assert stats["cache_hit_rate"] == pytest.approx(1 / 4)
    # foo.baz: foo.* plus group q2 -> 2; nothing -> 0.
    assert stats["max_fanout"] == 2
    assert stats["avg_fanout"] == pytest.approx(1.0)


def test_stats_empty() -> None:
    stats = Sublist().stats()
    assert stats["cache_hit_rate"] == 0.0
    assert stats["avg_fanout"] == 0.0
    assert stats["max_fanout"] == 0


def test_literal_change_touches_only_its_own_cache_entry() -> None:
    sl = Sublist()
    sl.insert(Sub("foo.*"))
    cached = {s: sl.match(s) for s in ("foo.a", "foo.b", "foo.c")}
    new = Sub("foo.a")
    sl.insert(new)
    assert sl.match("foo.b") is cached["foo.b"]
    assert sl.match("foo.c") is cached["foo.c"]
    patched = sl.match("foo.a")
    assert patched is not cached["foo.a"]
    assert new in patched.psubs
    sl.remove(new)
    assert sl.match("foo.b") is cached["foo.b"]
    assert sl.match("foo.c") is cached["foo.c"]
    assert new not in sl.match("foo.a").psubs


def test_wildcard_change_touches_only_matching_cache_entries() -> None:
    sl = Sublist()
    sl.insert(Sub(">"))
    subjects = ["_INBOX.x.1", "_INBOX.y.1", "orders.new", "orders.old.eu"]
    cached = {s: sl.match(s) for s in subjects}
    inbox = Sub("_INBOX.x.*")
    sl.insert(inbox)
    for s in subjects[1:]:
        assert sl.match(s) is cached[s]
    assert inbox in sl.match("_INBOX.x.1").psubs
    orders = Sub("orders.>")
    sl.insert(orders)
    assert sl.match("_INBOX.y.1") is cached["_INBOX.y.1"]
    assert orders in sl.match("orders.new").psubs
    assert orders in sl.match("orders.old.eu").psubs
    before = sl.match("_INBOX.y.1")
    sl.remove(inbox)
    assert sl.match("_INBOX.y.1") is before
    assert inbox not in sl.match("_INBOX.x.1").psubs
    check_cache_index(sl)


@pytest.mark.parametrize("op", ["insert", "remove"])
def test_broad_wildcard_change_empties_the_cache(op: str) -> None:
    sl = Sublist()
    broad = Sub("x.*")
    if op == "remove":
        sl.insert(broad)
    sl.insert(Sub("x.>"))
    sl.insert(Sub("y"))
    subjects = [f"x.{i}" for i in range(PATCH_LIMIT + 1)]
    for s in subjects:
        sl.match(s)
    other = sl.match("y")
    getattr(sl, op)(broad)
    assert sl.stats()["num_cache"] == 0
    check_cache_index(sl)
    for s in subjects:
        result = sl.match(s)
        assert (broad in result.psubs) is (op == "insert")
        assert len(result.psubs) == (2 if op == "insert" else 1)
    # Unrelated entries went too: "y" is recomputed, not served from the old cache.
    assert sl.match("y") is not other


@pytest.mark.parametrize("op", ["insert", "remove"])
def test_wildcard_change_at_patch_limit_keeps_other_entries(op: str) -> None:
    sl = Sublist()
    narrow = Sub("x.*")
    if op == "remove":
        sl.insert(narrow)
    sl.insert(Sub("y"))
    for i in range(PATCH_LIMIT):
        sl.match(f"x.{i}")
    other = sl.match("y")
    getattr(sl, op)(narrow)
    assert sl.match("y") is other
    for i in range(PATCH_LIMIT):
        assert (narrow in sl.match(f"x.{i}").psubs) is (op == "insert")
    check_cache_index(sl)


def test_cache_bound_uses_nats_server_limits() -> None:
    assert (CACHE_MAX, CACHE_SWEEP) == (1024, 256)
    sl = Sublist()
    sl.insert(Sub("load.*"))
    for i in range(CACHE_MAX):
        sl.match(f"load.{i}")
    assert sl.stats()["num_cache"] == CACHE_MAX
    sl.match("load.overflow")
    assert sl.stats()["num_cache"] == CACHE_SWEEP
    # The most recent entries survive the sweep.
    assert "load.overflow" in sl._cache
    assert "load.0" not in sl._cache
    check_cache_index(sl)


def test_cache_disabled() -> None:
    sl = Sublist(cache=False)
    a = Sub("foo.*")
    sl.insert(a)
    assert sl.match("foo.x").psubs == (a,)
    assert sl.match("foo.x").psubs == (a,)
    stats = sl.stats()
    assert stats["num_cache"] == 0
    assert stats["cache_hit_rate"] == 0.0
    assert stats["num_matches"] == 2


def test_bad_cache_bounds() -> None:
    with pytest.raises(ValueError):
        Sublist(cache_max=10, cache_sweep=10)


# --------------------------------------------------------------------------- randomized

TOKENS = ["a", "b", "c", "*"]  # "*" in a published subject is literal token text


def random_filter(rng: random.Random) -> str:
    n = rng.randint(1, 4)
    toks = [rng.choice(["a", "b", "c", "*"]) for _ in range(n)]
    if rng.random() < 0.25:
        toks[-1] = ">"
    return ".".join(toks)


def random_subject(rng: random.Random) -> str:
    n = rng.randint(1, 5)
    return ".".join(
        rng.choice(TOKENS) if rng.random() < 0.05 else rng.choice("abc") for _ in range(n)
    )


@pytest.mark.parametrize(
    ("seed", "options"),
    [
        (1, {}),
        (2, {}),
        (3, {"cache_max": 12, "cache_sweep": 4}),
        (4, {"cache_max": 12, "cache_sweep": 0}),
        (5, {"cache": False}),
    ],
)
def test_randomized_against_brute_force(seed: int, options: dict[str, Any]) -> None:
    rng = random.Random(seed)
    sl = Sublist(**options)
    live: list[Sub] = []
    probes = [random_subject(rng) for _ in range(64)]
    for step in range(1500):
        op = rng.random()
        if op < 0.45 or not live:
            queue = rng.choice([None, None, "q1", "q2"])
            sub = Sub(random_filter(rng), queue, sid=str(step))
            sl.insert(sub)
            live.append(sub)
        elif op < 0.8:
            sub = live.pop(rng.randrange(len(live)))
            assert sl.remove(sub)
            assert not sl.remove(sub)
        else:
            check(sl, live, random_subject(rng))
        assert sl.count == len(live)
        # The probes stay cached across changes, so a stale entry would show here.
        for subject in rng.sample(probes, 6):
            check(sl, live, subject)
        if step % 100 == 0:
            check_cache_index(sl)
            assert len(sl._cache) <= sl._cache_max
    for subject in probes:
        check(sl, live, subject)
    assert ids(sl.all()) == ids(live)
    for sub in live:
        assert sl.remove(sub)
    assert sl._root.is_empty()
    check_cache_index(sl)


# --------------------------------------------------------------------------- scale


def test_scale_100k_subscriptions() -> None:
    start = time.perf_counter()
    sl = Sublist()
    subs: list[Sub] = []
    for i in range(100_000):
        kind = i % 10
        if kind < 6:
            sub = Sub(f"foo.bar.{i}")
        elif kind == 6:
            sub = Sub(f"foo.*.{i % 500}")
        elif kind == 7:
            sub = Sub(f"svc.{i % 1000}.>")
        elif kind == 8:
            sub = Sub(f"work.{i % 100}.jobs", f"q{i % 7}")
        else:
            sub = Sub(f"_INBOX.{i}.*")
        sl.insert(sub)
        subs.append(sub)
    assert sl.count == 100_000

    r = sl.match("foo.bar.0")
    assert [s.subject for s in r.psubs] == ["foo.bar.0"]
    r = sl.match("foo.bar.16")
    assert sorted(s.subject for s in r.psubs) == ["foo.*.16"] * 200
    r = sl.match("work.8.jobs")
    assert r.psubs == ()
    assert sum(len(g) for g in r.qsubs) == 1000
    assert len(r.qsubs) == 7
    assert len(sl.match("svc.17.x.y").psubs) == 100
    assert sl.match("_INBOX.9.reply").psubs == (subs[9],)

    # Churn: remove and re-add a slice while matches keep the cache warm.
    for sub in subs[::7]:
        assert sl.remove(sub)
        sl.match(f"foo.bar.{id(sub) % 1000}")
    for sub in subs[::7]:
        sl.insert(sub)
    assert sl.count == 100_000
    check(sl, subs, "foo.bar.16")
    check(sl, subs, "work.8.jobs")
    check_cache_index(sl)

    for sub in subs:
        assert sl.remove(sub)
    assert sl.count == 0
    assert sl._root.is_empty()
    assert time.perf_counter() - start < 5.0
