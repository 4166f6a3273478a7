"""Operation histories of client workloads, and the checkers that judge them (Jepsen style).

A :class:`History` records what clients did: each operation's process, kind, arguments,
invoke and completion times (``time.monotonic_ns``), outcome and result. The outcome is
``ok`` (it happened, with this result), ``fail`` (it certainly did not take effect) or
``info`` (unknown: a timeout, a dropped connection; it may take effect, even later).

Three checkers read such records; none needs a server, root or the network:

- :func:`check_publishes` (acknowledged publishes): given the ids whose publish was
  acknowledged, those whose outcome is unknown, and the ids read back from the stream, it
  reports acknowledged ids that are missing (lost), ids stored more than once (despite
  ``Nats-Msg-Id`` deduplication) and ids stored that no publish could explain.
- :func:`check_kv` (linearizability of a JetStream KV register, per key; keys are
  independent, so checking each alone is enough): ``get`` (a value and its revision, or
  absent), ``put`` (any state; the revision it returns is the new one) and ``update`` with an
  expected revision (0: the key must be absent), which fails with "wrong last sequence" when
  the key's revision differs. Revisions are stream sequences, so they grow along the
  linearization. The search is Wing & Gong's with the memoisation of Lowe and Porcupine
  (a set of (operations linearized, state) already explored). An operation of unknown
  outcome has no return: it may take effect at any point after its invocation, or never.
  The search is bounded in steps and answers ``unknown`` rather than run forever.
- :func:`check_consumer_acks`: a message whose ``ack_sync`` completed is never delivered
  again to that durable consumer by a fetch issued after the ack completed.

Workloads must write values unique per write (``<process>-<n>``): a value read back then
names the one write that made it, which gives an unknown-outcome write the revision a
later read saw.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

OK, FAIL, INFO = "ok", "fail", "info"


@dataclass
class Op:
    """One operation. ``complete_ns`` stays None while it runs; ``result`` is the value it
    returned (``ok``) or what went wrong (``fail``/``info``)."""

    index: int
    process: str
    kind: str
    args: dict[str, Any]
    invoke_ns: int
    complete_ns: int | None = None
    outcome: str | None = None
    result: Any = None


class History:
    """An append-only record of operations; safe to use from several tasks and threads."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self._lock = threading.Lock()

    def invoke(self, process: str, kind: str, **args: Any) -> Op:
        with self._lock:
            op = Op(len(self.ops), process, kind, args, time.monotonic_ns())
            self.ops.append(op)
        return op

    def complete(self, op: Op, outcome: str, result: Any = None) -> Op:
        if outcome not in (OK, FAIL, INFO):
            raise ValueError(f"outcome must be ok, fail or info, not {outcome!r}")
        if op.outcome is not None:
            raise ValueError(f"operation {op.index} completed twice")
        op.complete_ns, op.outcome, op.result = time.monotonic_ns(), outcome, result
        return op

    def add(
        self,
        process: str,
        kind: str,
        invoke_ns: int,
        complete_ns: int | None,
        outcome: str,
        result: Any = None,
        **args: Any,
    ) -> Op:
        """Record a finished operation with times given (hand-made histories in tests)."""
        with self._lock:
            op = Op(len(self.ops), process, kind, args, invoke_ns, complete_ns, outcome, result)
            self.ops.append(op)
        return op

    def ok(self, op: Op, result: Any = None) -> Op:
        return self.complete(op, OK, result)

    def fail(self, op: Op, result: Any = None) -> Op:
        return self.complete(op, FAIL, result)

    def info(self, op: Op, result: Any = None) -> Op:
        return self.complete(op, INFO, result)

    def of_kind(self, *kinds: str) -> list[Op]:
        return [op for op in self.ops if op.kind in kinds]

    def counts(self, *kinds: str) -> dict[str, int]:
        """Outcomes of the operations of ``kinds`` (all when none given); an operation still
        running counts as ``info``."""
        ops = self.of_kind(*kinds) if kinds else self.ops
        return dict(Counter(op.outcome or INFO for op in ops))

    def to_json(self) -> str:
        """The record as JSON lines (one operation a line), to keep beside a failing run."""
        return "\n".join(json.dumps(asdict(op), default=repr) for op in self.ops) + "\n"


# --- A: acknowledged publishes -------------------------------------------------------------


@dataclass
class PublishReport:
    acked: int
    unknown: int
    stored: int
    lost: list[str] = field(default_factory=list)
    duplicates: dict[str, int] = field(default_factory=dict)
    unexpected: list[str] = field(default_factory=list)
    unknown_stored: int = 0

    @property
    def valid(self) -> bool:
        return not (self.lost or self.duplicates or self.unexpected)

    def summary(self) -> str:
        return (
            f"acked={self.acked} unknown={self.unknown} stored={self.stored} "
            f"unknown_stored={self.unknown_stored} lost={len(self.lost)} "
            f"duplicates={len(self.duplicates)} unexpected={len(self.unexpected)}"
        )


def publish_outcomes(history: History, kind: str = "publish") -> tuple[set[str], set[str]]:
    """The ids (``args["id"]``) acknowledged, and those whose outcome is unknown. An id
    published several times (retries) is acknowledged if any attempt was."""
    acked: set[str] = set()
    unknown: set[str] = set()
    for op in history.of_kind(kind):
        if op.outcome == OK:
            acked.add(op.args["id"])
        elif op.outcome != FAIL:
            unknown.add(op.args["id"])
    return acked, unknown - acked


def check_publishes(
    acked: Iterable[str], stored: Sequence[str], unknown: Iterable[str] = ()
) -> PublishReport:
    """Compare what was acknowledged with what the stream holds (``stored``: the id of every
    message read back, in stream order). A definitely failed id found stored counts as
    unexpected: only acknowledged and unknown ids may be there."""
    acked_set, unknown_set = set(acked), set(unknown) - set(acked)
    seen = Counter(stored)
    return PublishReport(
        acked=len(acked_set),
        unknown=len(unknown_set),
        stored=len(stored),
        lost=sorted(acked_set - seen.keys()),
        duplicates={i: n for i, n in sorted(seen.items()) if n > 1},
        unexpected=sorted(seen.keys() - acked_set - unknown_set),
        unknown_stored=len(unknown_set & seen.keys()),
    )


# --- B: linearizability of a KV register ----------------------------------------------------

_INFINITY = float("inf")
REFUSED = "wrong last sequence"
"""How the result of a failed ``update`` begins when the server refused it because the key's
revision was not the expected one (10071; nats-server's text goes on with the revision it
found): an observation of the state. A failed update with any other result (no
responders, say) only means it took no effect."""
UNSEEN = "<unseen>"
"""The value of a state made by a write no read ever saw: every such write is alike to the
rest of the history (no read can match it, no update can expect its unknown revision)."""

State = tuple[str, int | None] | None
"""None: the key is absent; else (value, revision), the revision None when unknown."""


@dataclass(frozen=True)
class KvOp:
    """A KV operation on one key, as the checker sees it.

    ``kind`` is ``get``, ``put`` or ``update``; ``value`` the value written; ``expected`` the
    revision an update expects (0: absent); ``read`` what a get returned ((value, revision)
    or None); ``revision`` what a write returned; ``outcome`` ok, fail (an update refused for
    a wrong last sequence) or info.
    """

    index: int
    kind: str
    invoke_ns: int
    complete_ns: float
    outcome: str
    value: str | None = None
    expected: int | None = None
    read: tuple[str, int] | None = None
    revision: int | None = None


@dataclass
class KeyVerdict:
    key: str
    verdict: str  # "ok", "fail" or "unknown"
    ops: int
    steps: int
    stuck_at: int | None = None
    """For ``fail``: the history index of the operation the deepest partial linearization
    could not get past."""
    linearized: int = 0
    """For ``fail``: how many operations that deepest partial linearization held."""


@dataclass
class KvReport:
    keys: list[KeyVerdict]

    @property
    def verdict(self) -> str:
        verdicts = {k.verdict for k in self.keys}
        return "fail" if "fail" in verdicts else "unknown" if "unknown" in verdicts else "ok"

    def summary(self) -> str:
        per_key = " ".join(f"{k.key}:{k.verdict}({k.ops} ops)" for k in self.keys)
        return f"kv={self.verdict} {per_key}"


def _matches(state: State, read: tuple[str, int] | None) -> bool:
    if read is None or state is None:
        return read is None and state is None
    return state == (read[0], read[1]) and state[0] != UNSEEN


def _precondition(state: State, expected: int) -> bool:
    """Whether an update expecting ``expected`` finds the key as it expects."""
    if expected == 0:
        return state is None
    return state is not None and state[1] == expected


def _grows(state: State, revision: int | None) -> bool:
    """Revisions are stream sequences: a write's is above the one it replaces."""
    if state is None or state[1] is None or revision is None:
        return True
    return revision > state[1]


def _step(state: State, op: KvOp, seen: dict[str, int]) -> list[State]:
    """The states ``op`` can leave when applied to ``state``, in the order worth trying
    first; empty when it cannot happen there."""
    if op.kind == "get":
        return [state] if _matches(state, op.read) else []
    assert op.value is not None
    if op.outcome == OK:
        written: State = (op.value, op.revision)
        if not _grows(state, op.revision):
            return []
        if op.kind == "update" and not _precondition(state, op.expected or 0):
            return []
        return [written]
    if op.outcome == FAIL:  # an update refused: the revision was not the expected one
        return [] if _precondition(state, op.expected or 0) else [state]
    # Unknown: it never took effect (so far), or it did, as a successful write would.
    revision = seen.get(op.value)
    applied: State = (op.value, revision) if revision is not None else (UNSEEN, None)
    can_apply = _grows(state, revision) and (
        op.kind == "put" or _precondition(state, op.expected or 0)
    )
    if not can_apply:
        return [state]
    # A write some read saw has to happen at some point: try that first.
    return [applied, state] if revision is not None else [state, applied]


class _Node:
    __slots__ = ("call", "match", "next", "op", "prev")

    def __init__(self, op: int = -1, call: bool = False) -> None:
        self.op = op
        self.call = call
        self.match: _Node | None = None
        self.prev: _Node | None = None
        self.next: _Node | None = None


def _lift(call: _Node) -> None:
    """Take ``call`` and its return out of the event list."""
    for node in (call, call.match):
        assert node is not None and node.prev is not None
        node.prev.next = node.next
        if node.next is not None:
            node.next.prev = node.prev


def _unlift(call: _Node) -> None:
    for node in (call.match, call):  # reverse order of removal
        assert node is not None and node.prev is not None
        node.prev.next = node
        if node.next is not None:
            node.next.prev = node


def _events(ops: Sequence[KvOp]) -> _Node:
    """A doubly linked list of call and return events in time order, under a head node. At
    equal times calls come first: operations that touch count as concurrent."""
    order = sorted(
        itertools.chain.from_iterable(
            ((op.invoke_ns, 0, i), (op.complete_ns, 1, i)) for i, op in enumerate(ops)
        )
    )
    head = prev = _Node()
    calls: dict[int, _Node] = {}
    for _, kind, i in order:
        node = _Node(i, kind == 0)
        if kind == 0:
            calls[i] = node
        else:
            node.match, calls[i].match = calls[i], node
        prev.next, node.prev = node, prev
        prev = node
    return head


def check_key(key: str, ops: Sequence[KvOp], max_steps: int = 300_000) -> KeyVerdict:
    """Whether one key's history is linearizable (Wing & Gong's search, memoised)."""
    values = [op.value for op in ops if op.kind != "get"]
    if len(values) != len(set(values)):
        raise ValueError(f"{key}: a value written twice (values must be unique per write)")
    seen: dict[str, int] = {}
    for op in ops:
        if op.kind == "get" and op.read is not None:
            seen[op.read[0]] = op.read[1]
        elif op.kind != "get" and op.outcome == OK and op.value is not None:
            assert op.revision is not None
            seen[op.value] = op.revision
    head = _events(ops)
    state: State = None
    linearized = 0
    explored: set[tuple[int, State]] = set()
    stack: list[tuple[_Node, State]] = []
    entry = head.next
    steps = 0
    deepest, stuck_at = -1, None
    while head.next is not None:
        steps += 1
        if steps > max_steps:
            return KeyVerdict(key, "unknown", len(ops), steps)
        assert entry is not None
        if entry.call:
            bit = 1 << entry.op
            for after in _step(state, ops[entry.op], seen):
                if (linearized | bit, after) not in explored:
                    explored.add((linearized | bit, after))
                    stack.append((entry, state))
                    state, linearized = after, linearized | bit
                    _lift(entry)
                    entry = head.next
                    break
            else:
                entry = entry.next
            continue
        # A return reached before its call was linearized: undo the last choice.
        depth = linearized.bit_count()
        if depth > deepest:
            deepest, stuck_at = depth, ops[entry.op].index
        if not stack:
            return KeyVerdict(key, "fail", len(ops), steps, stuck_at, deepest)
        entry, state = stack.pop()
        linearized &= ~(1 << entry.op)
        _unlift(entry)
        # Stay on this call: states it can leave that were not tried yet are tried next.
    return KeyVerdict(key, "ok", len(ops), steps)


def kv_ops(history: History, key: str) -> list[KvOp]:
    """The operations of ``history`` on ``key`` that the checker needs.

    Recorded as kinds ``get`` (result: ``[value, revision]``, or None when absent), ``put``
    (args ``key``, ``value``; result: the revision) and ``update`` (args ``key``, ``value``,
    ``expected``; result: the revision). A failed get or put is left out (it took no
    effect), and so is a failed update whose result does not begin with :data:`REFUSED`, and a
    get of
    unknown outcome (it saw nothing anyone knows).
    """
    out = []
    for op in history.of_kind("get", "put", "update"):
        if op.args.get("key") != key:
            continue
        outcome = op.outcome or INFO
        refused = op.kind == "update" and str(op.result).startswith(REFUSED)
        no_effect = outcome == FAIL and not refused
        if no_effect or (op.kind == "get" and outcome == INFO):
            continue
        done: float = op.complete_ns if outcome != INFO and op.complete_ns else _INFINITY
        if op.kind == "get":
            read = tuple(op.result) if op.result is not None else None
            out.append(KvOp(op.index, "get", op.invoke_ns, done, OK, read=read))  # type: ignore[arg-type]
        else:
            revision = op.result if outcome == OK else None
            out.append(
                KvOp(
                    op.index,
                    op.kind,
                    op.invoke_ns,
                    done,
                    outcome,
                    value=op.args["value"],
                    expected=op.args.get("expected"),
                    revision=revision,
                )
            )
    return out


def check_kv(history: History, keys: Iterable[str], max_steps: int = 300_000) -> KvReport:
    """Check every key of ``keys`` on its own."""
    return KvReport([check_key(k, kv_ops(history, k), max_steps) for k in keys])


# --- C: consumer acks -----------------------------------------------------------------------


@dataclass
class AckReport:
    fetches: int
    delivered: int
    """Distinct stream sequences delivered."""
    redelivered: int
    """Deliveries of a sequence already delivered (allowed while it is not acked)."""
    acked: int
    violations: list[tuple[int, int, int]] = field(default_factory=list)
    """(stream sequence, the ack's completion, the later fetch's invocation), in ns."""

    @property
    def valid(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        return (
            f"fetches={self.fetches} delivered={self.delivered} "
            f"redelivered={self.redelivered} acked={self.acked} "
            f"violations={len(self.violations)}"
        )


def check_consumer_acks(history: History) -> AckReport:
    """Kinds ``fetch`` (result: a list of ``[stream_seq, num_delivered]``) and ``ack`` (args
    ``seq``; an ``ok`` outcome means ``ack_sync`` was answered). A fetch issued after an ack
    of one of its sequences completed breaks the rule; one issued before may still carry it
    (the delivery can cross the ack)."""
    acked_at: dict[int, int] = {}
    for op in history.of_kind("ack"):
        if op.outcome == OK and op.complete_ns is not None:
            seq = op.args["seq"]
            acked_at[seq] = min(acked_at.get(seq, op.complete_ns), op.complete_ns)
    fetches = [op for op in history.of_kind("fetch") if op.outcome == OK]
    seen: set[int] = set()
    redelivered = 0
    violations = []
    for op in sorted(fetches, key=lambda o: o.invoke_ns):
        for seq, _delivered in op.result or ():
            if seq in seen:
                redelivered += 1
            seen.add(seq)
            if seq in acked_at and acked_at[seq] < op.invoke_ns:
                violations.append((seq, acked_at[seq], op.invoke_ns))
    return AckReport(len(fetches), len(seen), redelivered, len(acked_at), violations)
