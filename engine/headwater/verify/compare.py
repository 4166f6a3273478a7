"""``--compare A B``: do two backups hold the same messages (origin vs mirror, before vs
after)?

Each side's archive is streamed by one task into rows ``(seq, subject, payload digest, header
digest)``; Spark joins the two sides on the sequence (a full outer join, shuffled, so it scales past
memory) and classifies every sequence that differs. The digests are XXH3-64, the archive's own
checksum function. Faults inside an archive are the verification's to report: a side's rows
stop at its first fault. (Plain RDDs rather than DataFrames: the rows are Python tuples
either way, and this avoids SQL planning and code generation, seconds on a small job.)
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from headwater.archive import ArchivedMessage, ArchiveError, open_archive
from headwater.archive.format import checksum
from headwater.verify.backupdir import archive_path
from headwater.verify.findings import MAX_FINDINGS_PER_KIND, Finding, Kind

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["Comparison", "compare_backups", "message_rows"]

_SIGN = 1 << 63


def _signed(digest: int) -> int:
    """A u64 digest as the i64 Spark's LongType holds (same bits)."""
    return digest - (1 << 64) if digest >= _SIGN else digest


def message_rows(side: str, directory: str) -> Iterator[tuple[str, int, str, int, int]]:
    """``(side, seq, subject, payload digest, header digest)`` for each message record, of
    an archive in either format (a nats-server archive against a Headwater one too: the
    stream's name and config, which a nats-server archive takes from ``backup.json``, are
    not compared)."""
    try:
        with open(archive_path(directory), "rb") as fh:
            for record in open_archive(fh, "", {}).records():
                if type(record) is ArchivedMessage:
                    yield (
                        side,
                        record.seq,
                        record.subject,
                        _signed(checksum(record.data)),
                        _signed(checksum(record.hdr)),
                    )
    except (ArchiveError, OSError):
        return


@dataclass
class Comparison:
    a: str
    b: str
    differences: dict[str, int] = field(default_factory=dict)
    """Kind -> number of sequences that differ that way."""
    findings: list[Finding] = field(default_factory=list)
    """Up to ``MAX_FINDINGS_PER_KIND`` examples per kind, lowest sequences first."""

    @property
    def identical(self) -> bool:
        return not self.differences

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "identical": self.identical,
            "differences": dict(self.differences),
            "findings": [f.to_dict() for f in self.findings],
        }


def compare_backups(
    spark: SparkSession, a: str, b: str, limit: int = MAX_FINDINGS_PER_KIND
) -> Comparison:
    """Sequences, subjects, payloads and headers of backup ``b`` against backup ``a``;
    findings name ``b`` (the mirror, or the later backup). One Spark job: the join, then
    per kind a count and the ``limit`` lowest sequences, merged on the executors."""
    sc = spark.sparkContext

    def keyed(side: str, directory: str) -> Any:
        # One task per side, each archive read once: (seq, (subject, payload, headers)).
        return sc.parallelize([(side, directory)], 1).flatMap(
            lambda task: ((r[1], r[2:]) for r in message_rows(*task))
        )

    partitions = max(2, sc.defaultParallelism)
    summary = (
        keyed("a", a)
        .fullOuterJoin(keyed("b", b), partitions)
        .flatMap(_classify)
        .combineByKey(
            lambda d: _Tally.of(d, limit),
            lambda t, d: t.add(d),
            lambda t, u: t.merge(u),
            partitions,
        )
        .collect()
    )
    result = Comparison(a, b, {str(k): t.count for k, t in sorted(summary)})
    for kind, tally in sorted(summary):
        for seq, a_subject, b_subject in heapq.nsmallest(limit, tally.examples):
            detail = _describe(kind, seq, a_subject, b_subject, a, b)
            result.findings.append(Finding(b, str(kind), detail, seq=seq))
        if tally.count > limit:
            result.findings.append(
                Finding(b, str(kind), f"{tally.count - limit} more {kind} differences with {a}")
            )
    return result


_Side = tuple[str, int, int]
"""(subject, payload digest, header digest) of one message."""


def _classify(
    item: tuple[int, tuple[_Side | None, _Side | None]],
) -> Iterator[tuple[str, tuple[int, str, str]]]:
    seq, (left, right) = item
    if left is None:
        kind = Kind.COMPARE_EXTRA
    elif right is None:
        kind = Kind.COMPARE_MISSING
    elif left[0] != right[0]:
        kind = Kind.COMPARE_SUBJECT
    elif left[1] != right[1]:
        kind = Kind.COMPARE_PAYLOAD
    elif left[2] != right[2]:
        kind = Kind.COMPARE_HEADERS
    else:
        return
    yield str(kind), (seq, left[0] if left else "", right[0] if right else "")


class _Tally:
    """How many differences of one kind, and the ``limit`` with the lowest sequences."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0
        self.examples: list[tuple[int, str, str]] = []

    @classmethod
    def of(cls, diff: tuple[int, str, str], limit: int) -> _Tally:
        return cls(limit).add(diff)

    def add(self, diff: tuple[int, str, str]) -> _Tally:
        self.count += 1
        self.examples.append(diff)
        if len(self.examples) > 2 * self.limit:
            self.examples = heapq.nsmallest(self.limit, self.examples)
        return self

    def merge(self, other: _Tally) -> _Tally:
        self.count += other.count
        self.examples = heapq.nsmallest(self.limit, self.examples + other.examples)
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        # Shipped between executors: send only the examples that can still be reported.
        examples = heapq.nsmallest(self.limit, self.examples)
        return (_rebuild_tally, (self.limit, self.count, examples))


def _rebuild_tally(limit: int, count: int, examples: list[tuple[int, str, str]]) -> _Tally:
    tally = _Tally(limit)
    tally.count = count
    tally.examples = examples
    return tally


def _describe(kind: str, seq: int, a_subject: str, b_subject: str, a: str, b: str) -> str:
    if kind == Kind.COMPARE_EXTRA:
        return f"message {seq} ({b_subject}) is in {b} but not in {a}"
    if kind == Kind.COMPARE_MISSING:
        return f"message {seq} ({a_subject}) is in {a} but not in {b}"
    if kind == Kind.COMPARE_SUBJECT:
        return f"message {seq}: subject {a_subject} in {a}, {b_subject} in {b}"
    what = "payload" if kind == Kind.COMPARE_PAYLOAD else "headers"
    return f"message {seq} ({a_subject}): {what} differ from {a}"
