"""The consumer's helpers use its public methods only (issue 15: one owner per piece of
state): no ``_private`` attribute of the consumer is reached from pull, push, timers or the
ack state, so each invariant is kept in one place."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from headwater.server.consumers import consumer as consumer_module

HELPERS = ["pull.py", "push.py", "timers.py", "ackstate.py", "pullqueue.py"]


def consumer_privates(source: str) -> list[str]:
    """``c._x`` / ``consumer._x`` / ``self.c._x`` accesses in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("c", "consumer"):
            found.append(f"{owner.id}.{node.attr}")
        elif isinstance(owner, ast.Attribute) and owner.attr == "c":
            found.append(f"self.c.{node.attr}")
    return found


def test_the_check_finds_private_access() -> None:
    found = consumer_privates("c._next()\nself.c._unget(1)\nc.kick()")
    assert found == ["c._next", "self.c._unget"]


@pytest.mark.parametrize("name", HELPERS)
def test_helpers_use_public_consumer_methods_only(name: str) -> None:
    source = (Path(consumer_module.__file__).parent / name).read_text()
    assert consumer_privates(source) == []
