"""Query-string parameters, decoded with nats-server's rules.

nats-server reads each parameter with Go's ``strconv`` (``ParseBool``, ``Atoi``,
``ParseUint``) and answers 400 with a plain-text message when one does not parse: ``Error
decoding <kind> for '<name>': `` and strconv's own error (the function, the input %q-quoted,
the reason), word for word here. An absent or empty parameter means the zero value. Only the
first value of a repeated parameter counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from urllib.parse import parse_qs

from headwater.server.jetstream.gojson import go_quote

# The spellings Go's strconv.ParseBool accepts.
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})

_INT64_MAX = (1 << 63) - 1
_UINT64_MAX = (1 << 64) - 1


class BadRequest(Exception):
    """A request the endpoint refuses; the message becomes the 400 response body."""


class Query:
    """The parsed query string of one request."""

    def __init__(self, values: Mapping[str, Sequence[str]] | None = None) -> None:
        self._values = dict(values or {})

    @classmethod
    def parse(cls, query: str) -> Query:
        return cls(parse_qs(query, keep_blank_values=True))

    def get(self, name: str) -> str:
        values = self._values.get(name)
        return values[0] if values else ""

    def boolean(self, name: str) -> bool:
        text = self.get(name)
        if not text:
            return False
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise _bad("boolean", name, "ParseBool", text, "invalid syntax")

    def integer(self, name: str) -> int:
        return self._number(name, -_INT64_MAX - 1, _INT64_MAX, "int", "Atoi")

    def unsigned(self, name: str) -> int:
        return self._number(name, 0, _UINT64_MAX, "uint64", "ParseUint")

    def _number(self, name: str, low: int, high: int, kind: str, func: str) -> int:
        text = self.get(name)
        if not text:
            return 0
        # Go accepts an optional sign and decimal digits only (no spaces, no underscores).
        body = text[1:] if text[0] in "+-" and kind == "int" else text
        if not body.isascii() or not body.isdigit():
            raise _bad(kind, name, func, text, "invalid syntax")
        value = int(text)
        if not low <= value <= high:
            raise _bad(kind, name, func, text, "value out of range")
        return value


def _bad(kind: str, name: str, func: str, text: str, reason: str) -> BadRequest:
    """nats-server's message: its own prefix, then strconv's ``*NumError`` text."""
    return BadRequest(
        f"Error decoding {kind} for '{name}': strconv.{func}: parsing {go_quote(text)}: {reason}"
    )
