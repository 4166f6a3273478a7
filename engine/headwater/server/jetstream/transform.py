"""Subject transforms: rewrite a subject matching ``src`` into ``dest``.

Streams use them twice: ``subject_transform`` rewrites a message's subject before it is stored,
and ``republish`` computes the subject a stored message is re-sent on. Destinations reference
the source's wildcards as ``$1``/``{{wildcard(1)}}`` and may use the mapping functions
``partition``, ``split``, ``splitfromleft``/``right`` and ``slicefromleft``/``right``; a trailing
``>`` carries the source's ``>`` tokens over. The configs were validated already
(:func:`.subject_rules.transform_error`), so compiling here cannot fail on a stored config.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["SubjectTransform"]

_FUNC = re.compile(r"^\{\{\s*([A-Za-z]+)\s*\((.*)\)\s*\}\}$")
_ARGS = re.compile(r",\s*")

Piece = Callable[[list[str]], str]
"""Renders one destination token from the wildcard values captured by the source."""


def _fnv32a(data: bytes) -> int:
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def _literal(token: str) -> Piece:
    return lambda _wild: token


def _wildcard(index: int) -> Piece:
    return lambda wild: wild[index - 1]


def _partition(buckets: int, indexes: list[int]) -> Piece:
    def render(wild: list[str]) -> str:
        key = "".join(wild[i - 1] for i in indexes).encode()
        return str(_fnv32a(key) % buckets)

    return render


def _split(index: int, delim: str) -> Piece:
    def render(wild: list[str]) -> str:
        return ".".join(part for part in wild[index - 1].split(delim) if part)

    return render


def _split_at(index: int, pos: int, from_right: bool) -> Piece:
    def render(wild: list[str]) -> str:
        value = wild[index - 1]
        cut = len(value) - pos if from_right else pos
        if pos <= 0 or cut <= 0 or cut >= len(value):
            return value
        return value[:cut] + "." + value[cut:]

    return render


def _slice(index: int, size: int, from_right: bool) -> Piece:
    def render(wild: list[str]) -> str:
        value = wild[index - 1]
        if size <= 0 or size >= len(value):
            return value
        if from_right:
            head = len(value) % size
            parts = [value[:head]] if head else []
            parts += [value[i : i + size] for i in range(head, len(value), size)]
        else:
            parts = [value[i : i + size] for i in range(0, len(value), size)]
        return ".".join(parts)

    return render


def _compile_token(token: str) -> Piece:
    if len(token) > 1 and token[0] == "$" and token[1:].isdigit():
        return _wildcard(int(token[1:]))
    found = _FUNC.match(token)
    if found is None:
        return _literal(token)
    name = found.group(1).lower()
    args = _ARGS.split(found.group(2).strip())
    if name == "wildcard":
        return _wildcard(int(args[0]))
    if name == "partition":
        return _partition(int(args[0]), [int(a) for a in args[1:]])
    if name == "split":
        return _split(int(args[0]), args[1])
    if name in ("splitfromleft", "splitfromright"):
        return _split_at(int(args[0]), int(args[1]), name.endswith("right"))
    if name in ("slicefromleft", "slicefromright"):
        return _slice(int(args[0]), int(args[1]), name.endswith("right"))
    return _literal(token)


class SubjectTransform:
    """A compiled ``src -> dest`` mapping; :meth:`match` gives None when ``src`` does not match."""

    __slots__ = ("_dest", "_fwc", "_src")

    def __init__(self, src: str, dest: str) -> None:
        self._src = (src or ">").split(".")
        dest_tokens = dest.split(".")
        self._fwc = dest_tokens[-1] == ">"
        if self._fwc:
            dest_tokens = dest_tokens[:-1]
        self._dest = [_compile_token(t) for t in dest_tokens]

    def match(self, subject: str) -> str | None:
        tokens = subject.split(".")
        src = self._src
        wild: list[str] = []
        rest: list[str] = []
        for i, pattern in enumerate(src):
            if pattern == ">":
                if i >= len(tokens):
                    return None
                rest = tokens[i:]
                break
            if i >= len(tokens):
                return None
            if pattern == "*":
                wild.append(tokens[i])
            elif pattern != tokens[i]:
                return None
        else:
            if len(tokens) != len(src):
                return None
        out = [piece(wild) for piece in self._dest]
        if self._fwc:
            out.extend(rest)
        return ".".join(out)

    def apply(self, subject: str) -> str:
        """The transformed subject, or ``subject`` itself when it does not match ``src``."""
        mapped = self.match(subject)
        return subject if mapped is None else mapped
