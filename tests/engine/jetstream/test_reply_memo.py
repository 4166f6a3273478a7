"""The one-shot subject memo of :class:`headwater.server.node.Server` (publish acks, acks).

Every result it gives must equal a full sublist match, whatever subscriptions exist under the
prefix it remembers, and must not survive a subscribe or unsubscribe.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from headwater.server.config.settings import Settings
from headwater.server.node import REPLY_MEMO_MAX, ReplyMemo, Server
from headwater.server.routing.subjects import subject_matches
from headwater.server.routing.sublist import Sublist, SublistResult


@dataclass(eq=False)
class Sub:
    subject: str
    queue: str | None = None
    sid: str = ""


def matched(result: SublistResult) -> set[str]:
    names = {s.subject for s in result.psubs}
    names.update(f"{s.queue}:{s.subject}" for group in result.qsubs for s in group)
    return names


def brute(subs: list[Sub], subject: str) -> set[str]:
    return {
        (f"{s.queue}:{s.subject}" if s.queue else s.subject)
        for s in subs
        if subject_matches(s.subject, subject)
    }


FILTERS = [
    "_INBOX.abc.*",
    "_INBOX.abc.>",
    "_INBOX.abc.7",
    "_INBOX.*.7",
    "_INBOX.*.*",
    "_INBOX.abc.*.x",
    ">",
    "_INBOX.>",
    "$JS.ACK.S.C.>",
    "$JS.ACK.S.*.1.>",
    "$JS.ACK.S.C.1.5.5.9.0",
    "$JS.ACK.*.C.*.*.*.*.*",
]

SUBJECTS = [
    "_INBOX.abc.1",
    "_INBOX.abc.7",
    "_INBOX.abc.8",
    "_INBOX.abc.7.x",
    "_INBOX.abc.1.x",
    "_INBOX.xyz.7",
    "_INBOX.xyz.9",
    "_INBOX.abc",
    "_INBOX.abc..1",
    "_INBOX.abc.",
    "$JS.ACK.S.C.1.5.5.9.0",
    "$JS.ACK.S.C.1.6.6.9.0",
    "$JS.ACK.S.C.2.6.6.9.0",
    "$JS.ACK.S.D.1.6.6.9.0",
    "$JS.ACK.S",
    "$JS.ACK.S.C",
]


def test_memo_agrees_with_the_sublist_for_random_subscription_sets() -> None:
    rng = random.Random(7)
    for _ in range(200):
        sublist = Sublist()
        memo = ReplyMemo(sublist)
        subs = [
            Sub(f, rng.choice([None, None, "q"])) for f in rng.sample(FILTERS, rng.randint(0, 6))
        ]
        for sub in subs:
            sublist.insert(sub)
        # Twice in a random order: the second pass is served from the memo where it applies.
        for subject in rng.sample(SUBJECTS, len(SUBJECTS)) * 2:
            assert matched(memo.match(subject)) == brute(subs, subject), (subs, subject)


def test_a_literal_subscription_under_a_prefix_is_not_memoized_away() -> None:
    sublist = Sublist()
    memo = ReplyMemo(sublist)
    wild, literal = Sub("_INBOX.abc.*"), Sub("_INBOX.abc.7")
    sublist.insert(wild)
    sublist.insert(literal)
    assert matched(memo.match("_INBOX.abc.1")) == {"_INBOX.abc.*"}
    assert matched(memo.match("_INBOX.abc.7")) == {"_INBOX.abc.*", "_INBOX.abc.7"}
    assert matched(memo.match("_INBOX.abc.2")) == {"_INBOX.abc.*"}


def test_the_token_count_is_part_of_the_key() -> None:
    sublist = Sublist()
    memo = ReplyMemo(sublist)
    sublist.insert(Sub("_INBOX.abc.*"))
    assert matched(memo.match("_INBOX.abc.1")) == {"_INBOX.abc.*"}
    assert matched(memo.match("_INBOX.abc.1.2")) == set()
    assert matched(memo.match("_INBOX.abc.3")) == {"_INBOX.abc.*"}


def test_the_memo_stays_bounded() -> None:
    sublist = Sublist()
    memo = ReplyMemo(sublist)
    sublist.insert(Sub("_INBOX.>"))
    for n in range(REPLY_MEMO_MAX + 10):
        assert matched(memo.match(f"_INBOX.c{n}.1")) == {"_INBOX.>"}
    assert len(memo._entries) <= REPLY_MEMO_MAX


class Receiver:
    """A minimal receiver: records what the server delivers to it."""

    echo = True

    def __init__(self) -> None:
        self.got: list[tuple[str, bytes]] = []

    def deliver(
        self, sub: object, subject: str, reply: str, hdr: bytes | None, payload: bytes
    ) -> None:
        self.got.append((subject, payload))


@dataclass(eq=False)
class ClientSub:
    client: Receiver
    subject: str
    queue: str | None = None
    sid: str = ""


def test_server_routes_one_shot_subjects_through_subscription_changes() -> None:
    server = Server(Settings())
    sender, inbox, exact = Receiver(), Receiver(), Receiver()
    wild = ClientSub(inbox, "_INBOX.abc.*")
    server.subscribe(wild)
    assert server.route(sender, "_INBOX.abc.1", "", None, b"a", 1) == 1
    assert server.route(sender, "_INBOX.abc.2", "", None, b"b", 1) == 1
    # A literal subscription arriving later must be seen (the memo is emptied by it) ...
    literal = ClientSub(exact, "_INBOX.abc.3")
    server.subscribe(literal)
    assert server.route(sender, "_INBOX.abc.3", "", None, b"c", 1) == 2
    assert exact.got == [("_INBOX.abc.3", b"c")]
    # ... and so must an unsubscribe.
    server.unsubscribe(wild)
    assert server.route(sender, "_INBOX.abc.4", "", None, b"d", 1) == 0
    assert inbox.got == [("_INBOX.abc.1", b"a"), ("_INBOX.abc.2", b"b"), ("_INBOX.abc.3", b"c")]
