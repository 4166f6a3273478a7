"""Sublist micro-benchmark: prints per-operation timings at 100k subscriptions.

Run: ``python bench/sublist_bench.py [--subs N]``. No asserts; the figures are for reading.

Targets (from the routing brief): cached match is a dict lookup; an uncached match on a
4-token subject well under 50 µs; insert and remove under 20 µs each.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from headwater.server.routing.subjects import subject_matches, valid_subject
from headwater.server.routing.sublist import Sublist


@dataclass(eq=False)
class Sub:
    subject: str
    queue: str | None = None


def make_subs(n: int) -> list[Sub]:
    """A mix of literals, `*` and `>` wildcards at several depths, and queue groups."""
    subs: list[Sub] = []
    for i in range(n):
        kind = i % 20
        j = i // 20  # spreads each kind's K values evenly
        if kind < 10:
            subs.append(Sub(f"foo.bar.{i}"))
        elif kind < 13:
            subs.append(Sub(f"svc.{j % 1000}.evt.{i}"))
        elif kind < 15:
            subs.append(Sub(f"foo.*.{i % 5000}"))
        elif kind == 15:
            subs.append(Sub(f"svc.{j % 1000}.>"))
        elif kind == 16:
            subs.append(Sub(f"*.{j % 1000}.evt.*"))
        elif kind < 19:
            subs.append(Sub(f"work.{j % 100}.jobs.*", f"q{(j // 100) % 8}"))
        else:
            subs.append(Sub(f"_INBOX.{i}.*"))
    return subs


def per_op_us(fn: Callable[[], int]) -> float:
    """Run ``fn`` (which returns how many operations it did); µs per operation."""
    gc.collect()
    start = time.perf_counter_ns()
    ops = fn()
    return (time.perf_counter_ns() - start) / ops / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--subs", type=int, default=100_000)
    args = parser.parse_args()
    rng = random.Random(7)
    n = args.subs
    subs = make_subs(n)

    sl = Sublist()
    raw = Sublist(cache=False)

    def build() -> int:
        for s in subs:
            sl.insert(s)
        return len(subs)

    print(f"subscriptions: {n:,}")
    print(f"insert (empty cache, building the index): {per_op_us(build):8.2f} µs/op")
    for s in subs:
        raw.insert(s)

    families = {
        "svc.K.evt.J (4 tok: literal + svc.K.> + *.K.evt.*)": lambda: (
            f"svc.{rng.randrange(1000)}.evt.{rng.randrange(n)}"
        ),
        "work.K.jobs.J (4 tok: 8 queue groups)": lambda: (
            f"work.{rng.randrange(100)}.jobs.{rng.randrange(10**6)}"
        ),
        "foo.bar.I (3 tok: literal + foo.*.I)": lambda: f"foo.bar.{rng.randrange(n)}",
        "nomatch.a.b.c (4 tok, no interest)": lambda: f"nomatch.{rng.randrange(10**6)}.b.c",
    }

    print("\nuncached match, cache disabled (pure trie walk + result build):")
    for label, gen in families.items():
        subjects = [gen() for _ in range(20_000)]
        fanout = sum(raw.match(s).fanout() for s in subjects[:500]) / 500

        def run(subjects: list[str] = subjects) -> int:
            m = raw.match
            for s in subjects:
                m(s)
            return len(subjects)

        print(f"  {label:55s} {per_op_us(run):8.2f} µs/op  (avg fanout {fanout:.1f})")

    print("\nuncached match, cache enabled (distinct subjects: includes cache fill + sweeps):")
    for label, gen in families.items():
        subjects = [gen() for _ in range(20_000)]

        def run_cached(subjects: list[str] = subjects) -> int:
            m = sl.match
            for s in subjects:
                m(s)
            return len(subjects)

        print(f"  {label:55s} {per_op_us(run_cached):8.2f} µs/op")

    hot = [gen() for gen in families.values() for _ in range(100)]
    for s in hot:
        sl.match(s)

    def cached() -> int:
        m = sl.match
        for _ in range(200):
            for s in hot:
                m(s)
        return 200 * len(hot)

    print(f"\ncached match ({len(hot)} hot subjects): {per_op_us(cached) * 1000:8.1f} ns/op")

    # Churn against a full cache: the cached subjects overlap the changed subscriptions.
    warm = [f"foo.bar.{i}" for i in range(0, n, max(1, n // 600))] + [
        f"svc.{k}.evt.{k}" for k in range(400)
    ]
    kinds: dict[str, list[Sub]] = {
        "literal foo.bar.I": [s for s in subs if s.subject.startswith("foo.bar.")],
        "literal svc.K.evt.I": [
            s for s in subs if s.subject.startswith("svc.") and "*" not in s.subject
        ],
        "wildcard foo.*.I": [s for s in subs if s.subject.startswith("foo.*")],
        "wildcard svc.K.>": [s for s in subs if s.subject.endswith(".>")],
        "wildcard *.K.evt.*": [s for s in subs if s.subject.startswith("*.")],
        "queue work.K.jobs.*": [s for s in subs if s.queue],
        "wildcard _INBOX.I.*": [s for s in subs if s.subject.startswith("_INBOX.")],
    }
    print("\nchurn with a warm cache (remove then re-insert; µs per operation):")
    for label, pool in kinds.items():
        sample = rng.sample(pool, min(2000, len(pool)))
        for s in warm:
            sl.match(s)
        ncache = sl.stats()["num_cache"]

        def remove(sample: list[Sub] = sample) -> int:
            for s in sample:
                sl.remove(s)
            return len(sample)

        def insert(sample: list[Sub] = sample) -> int:
            for s in sample:
                sl.insert(s)
            return len(sample)

        r_us = per_op_us(remove)
        for s in warm:
            sl.match(s)
        i_us = per_op_us(insert)
        print(f"  {label:24s} remove {r_us:7.2f}  insert {i_us:7.2f}   (cache {ncache} entries)")

    # A broad wildcard matches every cached svc.K.evt.K subject. Past PATCH_LIMIT matches
    # the sublist empties its cache rather than fixing each entry, so the cost is mostly
    # CPython freeing ~1000 cached results. Timed one operation at a time (median), the
    # cache re-warmed before each.
    def one(op: Callable[[Sub], object], sub: Sub) -> float:
        for s in warm:
            sl.match(s)
        start = time.perf_counter_ns()
        op(sub)
        return (time.perf_counter_ns() - start) / 1000

    few = [Sub("svc.*.evt.*") for _ in range(21)]
    hit = sum(1 for s in sl._cache if s.startswith("svc."))
    ins = statistics.median(one(sl.insert, b) for b in few)
    rem = statistics.median(one(sl.remove, b) for b in few)
    print(
        f"  {'broad svc.*.evt.*':24s} remove {rem:7.2f}  insert {ins:7.2f}   "
        f"(median; each against {hit} matching cached subjects: empties the cache)"
    )

    def burst() -> int:
        for b in few:
            sl.insert(b)
        for b in few:
            sl.remove(b)
        return 2 * len(few)

    for s in warm:
        sl.match(s)
    print(f"  {'broad, back-to-back':24s} {per_op_us(burst):7.2f} µs/op (only the first pays)")

    subjects = [f"a.{i % 50}.c.{i}" for i in range(50_000)]
    filters = ["a.*.c.>", "a.1.c.*", "*.*.*.*", "a.>", "b.*"]

    def fn_matches() -> int:
        for f in filters:
            for s in subjects:
                subject_matches(f, s)
        return len(filters) * len(subjects)

    def fn_valid() -> int:
        for s in subjects:
            valid_subject(s)
        return len(subjects)

    print(f"\nsubject_matches (wildcard filter): {per_op_us(fn_matches) * 1000:8.1f} ns/op")
    print(f"valid_subject:                     {per_op_us(fn_valid) * 1000:8.1f} ns/op")

    print("\nstats():")
    for key, value in sl.stats().items():
        print(f"  {key:18s} {value}")


if __name__ == "__main__":
    main()
