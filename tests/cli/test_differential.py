"""The same CLI commands against Headwater and nats-server must print the same JSON and the
same errors: the CLI adds nothing server-specific, so any difference is the engine's."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytestmark = pytest.mark.differential

#: Fields that legitimately differ: server versions in metadata, timestamps, leaders.
VOLATILE = {"metadata", "created", "ts", "cluster", "first_ts", "last_ts", "last_active", "time"}


def stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [stable(item) for item in value]
    return value


SCRIPT: list[tuple[str, ...]] = [
    ("stream", "add", "ORDERS", "--subjects", "ORDERS.*", "--ack", "--max-msgs=-1",
     "--max-bytes=-1", "--max-age=1y", "--storage", "file", "--retention", "limits",
     "--max-msg-size=-1", "--discard=old"),
    ("consumer", "add", "ORDERS", "NEW", "--filter", "ORDERS.received", "--ack", "explicit",
     "--pull", "--deliver", "all", "--max-deliver", "20", "--sample", "100"),
    ("consumer", "add", "ORDERS", "MONITOR", "--filter", "", "--ack", "none", "--target",
     "monitor.ORDERS", "--deliver", "last", "--replay", "instant"),
    ("pub", "ORDERS.received", "order {{Count}}", "--count", "3", "-J"),
    ("consumer", "next", "ORDERS", "NEW", "--count", "2"),
    ("stream", "info", "ORDERS"),
    ("consumer", "info", "ORDERS", "NEW"),
    ("stream", "edit", "ORDERS", "--max-msgs", "100", "--description", "orders"),
    ("stream", "get", "ORDERS", "2"),
    ("stream", "cp", "ORDERS", "ORDCOPY", "--data"),
    ("stream", "purge", "ORDERS", "--force", "--keep", "1"),
    ("stream", "ls"),
    ("consumer", "ls", "ORDERS"),
    ("kv", "add", "CFG", "--history", "3"),
    ("kv", "put", "CFG", "k", "v1"),
    ("kv", "history", "CFG", "k"),
]  # fmt: skip

FAILURES: list[tuple[str, ...]] = [
    ("stream", "info", "NOPE"),
    ("consumer", "info", "ORDERS", "NOPE"),
    ("stream", "edit", "ORDERS", "--storage", "memory"),
    ("stream", "add", "ORDERS", "--subjects", "other"),
    ("stream", "add", "OVERLAP", "--subjects", "ORDERS.new"),
    ("consumer", "edit", "ORDERS", "NEW", "--deliver", "new"),
    ("consumer", "add", "ORDERS", "NEW", "--filter", "ORDERS.x"),
    ("stream", "get", "ORDERS", "999"),
    ("pub", "ORDERS.x", "y", "-J", "-H", "Nats-Expected-Last-Sequence:1"),
]


def parsed(args: tuple[str, ...], text: str) -> Any:
    """One JSON document, or JSON lines for commands that print one object per message."""
    if args[0] == "pub" or args[:2] == ("consumer", "next"):
        # The ack subject in ``reply`` carries a server-chosen timestamp.
        lines = [json.loads(line) for line in text.splitlines()]
        return [{k: v for k, v in line.items() if k != "reply"} for line in lines]
    return json.loads(text)


def test_same_json_from_both_servers(cli_pair):
    ours, theirs = cli_pair
    for args in SCRIPT:
        a = parsed(args, ours.ok(*args, "--json").stdout)
        b = parsed(args, theirs.ok(*args, "--json").stdout)
        assert stable(a) == stable(b), args


def test_same_errors_from_both_servers(cli_pair):
    ours, theirs = cli_pair
    for args in FAILURES:
        a, b = ours.fails(*args), theirs.fails(*args)
        assert a.stderr == b.stderr, args
