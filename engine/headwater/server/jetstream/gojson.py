"""Decode JSON API requests the way the reference server's Go ``encoding/json`` does.

Clients see the decoder's behaviour in three places, so we copy it rather than Python's:

* **Which bodies are accepted.** Field names match case-insensitively when no exact match
  exists, the last duplicate wins, unknown fields are ignored, and ``null`` leaves a plain
  field at its zero value (but is an error for enum fields, whose custom unmarshalers reject
  it).
* **Which errors come first.** A wrong JSON type is remembered and decoding goes on (the first
  one is reported at the end); an enum unmarshal error stops decoding at once.
* **The error wording** after ``invalid JSON:`` (err_code 10025). Syntax messages are the ones
  nats-server 2.15 answers with (checked against the binary), e.g. ``unexpected end of JSON
  input`` for a truncated body.

Parsing itself is done by the C-accelerated :mod:`json` module with hooks that keep object
pairs in order and numbers as their source text; the slower Go-style scanner in
:func:`syntax_error` runs only when that parse has already failed, to word the error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "GoJSONError",
    "GoType",
    "Num",
    "Obj",
    "decode_struct",
    "go_quote",
    "loads",
    "syntax_error",
]


class GoJSONError(Exception):
    """A decode failure; ``message`` is what follows ``invalid JSON: `` in the API error."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Num(str):
    """A JSON number kept as its source text, so range errors can quote it as Go does."""

    __slots__ = ()


class Obj(list[tuple[str, Any]]):
    """A JSON object as its ordered ``(key, value)`` pairs, duplicates included."""

    __slots__ = ()


def _reject_constant(name: str) -> Any:
    # Python's json accepts NaN/Infinity; Go does not. Failing here sends us to the scanner.
    raise ValueError(name)


def loads(text: str) -> Any:
    """Parse ``text`` into ``Obj``/list/str/``Num``/bool/None, or raise ``GoJSONError``."""
    try:
        return json.loads(
            text,
            object_pairs_hook=Obj,
            parse_int=Num,
            parse_float=Num,
            parse_constant=_reject_constant,
        )
    except (ValueError, RecursionError) as exc:
        raise GoJSONError(syntax_error(text) or f"invalid JSON ({exc})") from None


# --- syntax errors -----------------------------------------------------------------------

_EOF = "unexpected end of JSON input"
_WS = " \t\n\r"
_DIGITS = "0123456789"
_HEX = "0123456789abcdefABCDEF"
_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_GO_ESCAPES["\v"] = "\\v"


def _quote_char(c: str) -> str:
    """Go's ``quoteChar``: a character in single quotes, escaped like ``strconv.Quote``."""
    if c == "'":
        return "'\\''"
    if c == '"':
        return "'\"'"
    if c == "\\":
        return "'\\\\'"
    if c in _GO_ESCAPES:
        return f"'{_GO_ESCAPES[c]}'"
    if ord(c) < 0x20 or ord(c) == 0x7F:
        return f"'\\x{ord(c):02x}'"
    return f"'{c}'"


class _Syntax(Exception):
    """A JSON syntax error, raised inside the decoder and reported in Go's wording."""


def _string_end(text: str, i: int) -> int:
    """Index just past the string starting at ``text[i] == '"'``."""
    n = len(text)
    j = i + 1
    while True:
        if j >= n:
            raise _Syntax(_EOF)
        c = text[j]
        if c == '"':
            return j + 1
        if c == "\\":
            if j + 1 >= n:
                raise _Syntax(_EOF)
            e = text[j + 1]
            if e in '"\\/bfnrt':
                j += 2
                continue
            if e == "u":
                digits = text[j + 2 : j + 6]
                if all(d in _HEX for d in digits):
                    if len(digits) < 4:
                        raise _Syntax(_EOF)
                    j += 6
                    continue
                raise _Syntax(f"invalid escape sequence `{text[j : j + 6]}` in string")
            raise _Syntax(f"invalid escape sequence `\\{e}` in string")
        if ord(c) < 0x20:
            raise _Syntax(f"invalid character {_quote_char(c)} in string")
        j += 1


def _digits_end(text: str, j: int) -> int:
    """Require at least one digit at ``j``; return the index after the run of digits."""
    if j >= len(text):
        raise _Syntax(_EOF)
    if text[j] not in _DIGITS:
        raise _Syntax(f"invalid character {_quote_char(text[j])} in numeric literal")
    while j < len(text) and text[j] in _DIGITS:
        j += 1
    return j


def _number_end(text: str, i: int) -> int:
    n = len(text)
    j = i + 1 if text[i] == "-" else i
    if j < n and text[j] == "0":
        j += 1
    else:
        j = _digits_end(text, j)
    if j < n and text[j] == ".":
        j = _digits_end(text, j + 1)
    if j < n and text[j] in "eE":
        j += 1
        if j < n and text[j] in "+-":
            j += 1
        j = _digits_end(text, j)
    return j


def _literal_end(text: str, i: int, word: str) -> int:
    for k in range(1, len(word)):
        if i + k >= len(text):
            raise _Syntax(_EOF)
        if text[i + k] != word[k]:
            c = _quote_char(text[i + k])
            raise _Syntax(f"invalid character {c} in literal {word} (expecting '{word[k]}')")
    return i + len(word)


def syntax_error(text: str) -> str | None:
    """The Go decoder's message for the first syntax error in ``text``, or None if valid."""
    try:
        _scan(text)
    except _Syntax as exc:
        return str(exc)
    return None


def _scan(text: str) -> None:
    n, i = len(text), 0
    stack: list[str] = []  # "o" object, "a" array
    state = "value"
    while True:
        while i < n and text[i] in _WS:
            i += 1
        if i >= n:
            if state == "end":
                return
            raise _Syntax(_EOF)
        c = text[i]
        if state == "end":
            raise _Syntax(f"invalid character {_quote_char(c)} after top-level value")
        if state in ("key", "key_or_end"):
            if c == "}" and state == "key_or_end":
                stack.pop()
                i, state = i + 1, _after_value(stack)
                continue
            if c != '"':
                raise _Syntax(
                    f"invalid character {_quote_char(c)} looking for beginning of object key string"
                )
            i, state = _string_end(text, i), "colon"
            continue
        if state == "colon":
            if c != ":":
                raise _Syntax(f"invalid character {_quote_char(c)} after object key")
            i, state = i + 1, "value"
            continue
        if state in ("obj_next", "arr_next"):
            closer, what = (
                ("}", "object key:value pair") if state == "obj_next" else ("]", "array element")
            )
            if c == ",":
                i, state = i + 1, "key" if state == "obj_next" else "value"
            elif c == closer:
                stack.pop()
                i, state = i + 1, _after_value(stack)
            else:
                raise _Syntax(f"invalid character {_quote_char(c)} after {what}")
            continue
        # state is "value" or "value_or_end" (just after "[")
        if c == "]" and state == "value_or_end":
            stack.pop()
            i, state = i + 1, _after_value(stack)
        elif c == "{":
            stack.append("o")
            i, state = i + 1, "key_or_end"
        elif c == "[":
            stack.append("a")
            i, state = i + 1, "value_or_end"
        else:
            i, state = _scalar_end(text, i), _after_value(stack)


def _scalar_end(text: str, i: int) -> int:
    c = text[i]
    if c == '"':
        return _string_end(text, i)
    if c == "-" or c in _DIGITS:
        return _number_end(text, i)
    for word in ("true", "false", "null"):
        if c == word[0]:
            return _literal_end(text, i, word)
    raise _Syntax(f"invalid character {_quote_char(c)} looking for beginning of value")


def _after_value(stack: list[str]) -> str:
    if not stack:
        return "end"
    return "obj_next" if stack[-1] == "o" else "arr_next"


# --- typed decoding ----------------------------------------------------------------------

_INT_RANGES = {
    "int": (-(2**63), 2**63 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "time.Duration": (-(2**63), 2**63 - 1),
    "uint64": (0, 2**64 - 1),
}
_INT_TEXT = re.compile(r"-?\d+\Z")


@dataclass(frozen=True)
class GoType:
    """The Go type of one field, enough to decode a value and word errors like Go.

    ``kind`` is one of ``str``, ``bool``, ``int`` (range from ``name``), ``strs`` (``[]string``),
    ``strmap``, ``enum``, ``struct``, ``structs`` (slice of struct pointers) or ``time``
    (``*time.Time`` as an RFC 3339 string). ``fields`` maps a struct's JSON names to their
    types. ``enum`` holds the accepted strings and ``enum_error`` words a rejected raw value.
    """

    name: str
    kind: str
    fields: Mapping[str, GoType] = field(default_factory=dict)
    enum: frozenset[str] = frozenset()
    enum_error: Callable[[str], str] | None = None
    pointer: bool = False


class _Decoder:
    def __init__(self, root: str) -> None:
        self.root = root
        self.saved: str | None = None

    def type_error(self, value: Any, gotype: GoType, path: list[str], literal: bool) -> None:
        if self.saved is not None:
            return
        what = _json_kind(value)
        if literal and isinstance(value, Num):
            what = f"number {value}"
        if not path:
            self.saved = f"json: cannot unmarshal {what} into Go value of type {gotype.name}"
            return
        where = ".".join([self.root, *path])
        prefix = "" if path[-1].isdigit() else "Go struct field "
        self.saved = f"json: cannot unmarshal {what} into {prefix}{where} of type {gotype.name}"

    def value(self, value: Any, gotype: GoType, path: list[str]) -> tuple[bool, Any]:
        """Decode ``value``; the flag is False when the field must keep its current value."""
        kind = gotype.kind
        if kind == "enum":
            assert gotype.enum_error is not None
            if isinstance(value, str) and not isinstance(value, Num) and value in gotype.enum:
                return True, str(value)
            raise GoJSONError(gotype.enum_error(_raw(value)))
        if value is None:
            if kind in ("strs", "strmap", "structs") or gotype.pointer:
                return True, None
            return False, None
        if kind == "str":
            if isinstance(value, str) and not isinstance(value, Num):
                return True, str(value)
        elif kind == "bool":
            if isinstance(value, bool):
                return True, value
        elif kind == "int":
            if isinstance(value, Num):
                low, high = _INT_RANGES[gotype.name]
                if _INT_TEXT.match(value) and low <= int(value) <= high:
                    return True, int(value)
                self.type_error(value, gotype, path, literal=True)
                return False, None
        elif kind == "time":
            if isinstance(value, str) and not isinstance(value, Num):
                return True, _check_time(str(value))
            raise GoJSONError("Time.UnmarshalJSON: input is not a JSON string")
        elif kind in ("strs", "structs"):
            if isinstance(value, list):
                item_type = _STRING if kind == "strs" else gotype.fields["[]"]
                items = []
                for index, item in enumerate(value):
                    ok, decoded = self.value(item, item_type, [*path, str(index)])
                    items.append(decoded if ok else _zero(item_type))
                return True, items
        elif kind == "strmap":
            if isinstance(value, Obj):
                out: dict[str, str] = {}
                for key, item in value:
                    ok, decoded = self.value(item, _STRING, [*path, key])
                    out[key] = decoded if ok else ""
                return True, out
        elif kind == "struct" and isinstance(value, Obj):
            return True, self.struct(value, gotype, path)
        self.type_error(value, gotype, path, literal=False)
        return False, None

    def struct(self, obj: Obj, gotype: GoType, path: list[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        folded = {name.lower(): name for name in gotype.fields}
        for key, item in obj:
            name = key if key in gotype.fields else folded.get(key.lower())
            if name is None:
                continue  # unknown fields are ignored, as the reference does
            ok, decoded = self.value(item, gotype.fields[name], [*path, name])
            if ok:
                out[name] = decoded
        return out


_STRING = GoType("string", "str")
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})\Z")


def _check_time(text: str) -> str:
    if not _TIME.match(text):
        layout = "2006-01-02T15:04:05Z07:00"
        raise GoJSONError(f'parsing time "{text}" as "{layout}": cannot parse "{text}" as "2006"')
    return text


def _zero(gotype: GoType) -> Any:
    return {"str": "", "bool": False, "int": 0}.get(gotype.kind)


def _json_kind(value: Any) -> str:
    if isinstance(value, Obj):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Num):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    return "null"


def _raw(value: Any) -> str:
    """Compact JSON text of a decoded value (what a Go unmarshaler receives as bytes)."""
    if value is None:
        return "null"
    if isinstance(value, Num):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Obj):
        return "{" + ",".join(f"{json.dumps(k)}:{_raw(v)}" for k, v in value) + "}"
    return "[" + ",".join(_raw(v) for v in value) + "]"


def go_quote(text: str) -> str:
    """Go's ``%q`` for ASCII-printable text plus the usual escapes."""
    out = []
    for c in text:
        if c in ('"', "\\"):
            out.append("\\" + c)
        elif c in _GO_ESCAPES:
            out.append(_GO_ESCAPES[c])
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def decode_struct(value: Any, gotype: GoType, root: str) -> dict[str, Any]:
    """Decode a top-level JSON value into a dict of the struct's JSON field names.

    ``root`` is the Go struct's name used in type errors (``StreamConfigRequest``). A top-level
    ``null`` decodes to an empty dict, as Go leaves the struct untouched.
    """
    decoder = _Decoder(root)
    out: dict[str, Any] = {}
    if isinstance(value, Obj):
        out = decoder.struct(value, gotype, [])
    elif value is not None:
        decoder.type_error(value, gotype, [], literal=False)
    if decoder.saved is not None:
        raise GoJSONError(decoder.saved)
    return out
