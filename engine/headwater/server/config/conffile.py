"""nats-server's configuration file format, parsed into a tree of positioned values.

The format (server/conf in nats-server) is loose by design, and configs in the wild use all of
it, so this parser accepts the same forms:

* ``key: value``, ``key = value`` and ``key value``; ``;`` or ``,`` may end a line's value;
  keys may be quoted; a whole file may be wrapped in ``{ }`` like JSON;
* blocks ``name { ... }`` / ``name: { ... }`` and arrays ``[a, b]``, over any number of lines,
  items separated by commas or new lines;
* ``#`` and ``//`` comments;
* strings: ``"double"`` (escapes ``\\t \\n \\r \\" \\\\ \\xHH``), ``'single'`` (raw), unquoted
  (up to a space, new line, ``;``, ``,``, ``]`` or ``}``), and ``( ... )`` blocks ending with a
  ``)`` alone on its line;
* integers with size suffixes (``64MB``), floats, booleans (``true/false/yes/no/on/off``,
  unquoted only), Zulu datetimes; ``127.0.0.1:4222`` and ``10s`` stay strings;
* ``$NAME`` variables: the nearest enclosing block that already defined ``NAME`` wins, then the
  environment (whose value is parsed like a config value: ``PORT=4222`` gives an integer);
  ``$2a$...`` is a bcrypt hash, not a variable;
* ``include path`` (relative to the including file), which merges that file's keys into the
  block where it appears. Variables do not cross into an included file, as in nats-server.

Where nats-server's lexer has outright bugs this parser does the evident intended thing and is
stricter where the bug would hide mistakes: a stray ``}`` is an error, ``[1]`` is a list
holding 1, an include cycle is an error (nats-server overflows its stack), and an absolute
include path is used as given (nats-server prefixes the including file's directory).
"""

from __future__ import annotations

import bisect
import datetime as dt
import os
import re
from dataclasses import dataclass
from typing import Any

from headwater.server.config.errors import ConfigError, Position, error_at
from headwater.server.config.units import parse_size_literal


@dataclass(eq=False)
class Node:
    """One parsed value and where it came from.

    ``value`` is a ``str``, ``int``, ``float``, ``bool``, ``datetime``, ``dict[str, Node]`` or
    ``list[Node]``. ``key_pos`` is where the key naming it starts (``None`` in arrays).
    ``used_as_variable`` is set once some ``$KEY`` refers to it: nats-server does not call
    such keys unknown, since they exist to be referred to.
    """

    value: Any
    pos: Position
    key_pos: Position | None = None
    used_as_variable: bool = False


_WS = " \t"
_NL = "\n\r"
_VALUE_END = frozenset(_WS + _NL + ";,]}")
_BOOLS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}
_MAX_DEPTH = 200

_DATETIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_INT = re.compile(r"-?[0-9]+")
_SIZED_INT = re.compile(r"-?[0-9]+[kKmMgGtTpPeE][bBiI]*")
_FLOAT = re.compile(r"-?[0-9]+\.[0-9]+")
_ADDRESS = re.compile(r"[0-9]+\.[0-9]+\.[0-9.:-]*")


def parse_file(path: str) -> dict[str, Node]:
    """Parse the config file at ``path``; raises ``ConfigError``."""
    return _Parser(_read(path, None), path, (os.path.realpath(path),), ()).parse_document()


def parse_text(text: str, path: str = "<config>") -> dict[str, Node]:
    """Parse config text; ``path`` names it in errors and anchors relative includes."""
    return _Parser(text, path, (os.path.realpath(path),), ()).parse_document()


def to_plain(value: Any) -> Any:
    """The tree without positions: nested ``dict``/``list`` of plain values."""
    if isinstance(value, Node):
        value = value.value
    if isinstance(value, dict):
        return {key: to_plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [to_plain(item) for item in value]
    return value


def _read(path: str, include_pos: Position | None) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        what = "include file" if include_pos else "configuration file"
        message = f"cannot read {what} '{path}': {exc.strerror or exc}"
    except UnicodeDecodeError as exc:
        message = f"'{path}' is not UTF-8 text ({exc.reason} at byte {exc.start})"
    raise error_at(include_pos, message) if include_pos else ConfigError(message)


def _show(char: str) -> str:
    if char == "":
        return "end of file"
    if char in _NL:
        return "a new line"
    return repr(char)


class _Parser:
    """Recursive descent over the text; ``self.i`` is the index of the next character."""

    def __init__(
        self, text: str, path: str, includes: tuple[str, ...], env_chain: tuple[str, ...]
    ) -> None:
        self.text = text.removeprefix("\ufeff")  # a byte-order mark some editors write
        self.path = path
        self.i = 0
        self.includes = includes  # real paths of the files being parsed, outermost first
        self.env_chain = env_chain  # environment variables being expanded, to stop cycles
        self.scopes: list[dict[str, Node] | list[Node]] = []
        self.depth = 0
        self._newlines = [k for k, char in enumerate(text) if char == "\n"]

    # -- positions and errors ------------------------------------------------------------

    def pos(self, index: int) -> Position:
        line = bisect.bisect_left(self._newlines, index)
        line_start = self._newlines[line - 1] + 1 if line else 0
        return Position(self.path, line + 1, index - line_start + 1)

    def error(self, index: int, message: str) -> ConfigError:
        return error_at(self.pos(index), message)

    def peek(self) -> str:
        return self.text[self.i] if self.i < len(self.text) else ""

    # -- skipping ------------------------------------------------------------------------

    def skip_blanks(self) -> None:
        """Skip spaces and tabs (not new lines)."""
        while self.peek() in (" ", "\t"):
            self.i += 1

    def skip_space(self) -> None:
        """Skip all white space, new lines included."""
        while self.peek().isspace():
            self.i += 1

    def at_comment(self) -> bool:
        return self.peek() == "#" or self.text.startswith("//", self.i)

    def skip_comment(self) -> None:
        while self.peek() not in ("", "\n", "\r"):
            self.i += 1

    # -- structure -----------------------------------------------------------------------

    def parse_document(self) -> dict[str, Node]:
        root: dict[str, Node] = {}
        self.scopes.append(root)
        wrappers: list[int] = []  # open top-level '{' (JSON-style wrapping)
        while True:
            self.skip_space()
            char = self.peek()
            if char == "":
                break
            if self.at_comment():
                self.skip_comment()
            elif char == "{":
                wrappers.append(self.i)
                self.i += 1
            elif char == "}":
                if not wrappers:
                    raise self.error(self.i, "unexpected '}'")
                wrappers.pop()
                self.i += 1
            else:
                self.parse_entry(root, in_block=False)
                self.end_top_value()
        if wrappers:
            raise self.error(wrappers[-1], "'{' is never closed")
        self.scopes.pop()
        return root

    def end_top_value(self) -> None:
        self.skip_blanks()
        char = self.peek()
        if self.at_comment():
            self.skip_comment()
        elif char in ("\n", "\r", ";", ","):
            self.i += 1
        elif char not in ("", "}"):  # '}' is left for parse_document to match
            raise self.error(
                self.i, f"expected a new line, ';' or a comment after a value, got {_show(char)}"
            )

    def parse_entry(self, target: dict[str, Node], *, in_block: bool) -> None:
        """``key [=|:] value`` or ``include path``, stored into ``target``."""
        key_start = self.i
        key, quoted = self.parse_key()
        if not quoted and key.lower() == "include" and self.peek().isspace():
            self.parse_include(target, key_start)
            return
        self.skip_space()
        char = self.peek()
        if char in ("=", ":"):
            self.i += 1
            if in_block:
                self.skip_space()
            else:
                self.skip_blanks()
                if self.peek() in ("\n", "\r"):
                    raise self.error(self.i, f"expected a value for '{key}' but found a new line")
            char = self.peek()
        if char == "" or (in_block and char == "}"):
            raise self.error(key_start, f"key '{key}' has no value")
        if char == ",":
            raise self.error(self.i, f"unexpected ',' where the value of '{key}' should be")
        node = self.parse_value()
        node.key_pos = self.pos(key_start)
        target[key] = node

    def parse_key(self) -> tuple[str, bool]:
        char = self.peek()
        if char in ("=", ":"):
            raise self.error(self.i, f"unexpected {char!r}: a key must come first")
        if char in ("]", ","):
            raise self.error(self.i, f"unexpected {char!r}")
        if char in ('"', "'"):
            end = self.text.find(char, self.i + 1)
            if end < 0:
                raise self.error(self.i, "quoted key is never closed")
            key = self.text[self.i + 1 : end]
            self.i = end + 1
            return key, True
        start = self.i
        while (char := self.peek()) != "" and char not in "=:" and not char.isspace():
            self.i += 1
        return self.text[start : self.i], False

    def parse_include(self, target: dict[str, Node], key_start: int) -> None:
        self.skip_blanks()
        start = self.i
        char = self.peek()
        if char in ('"', "'"):
            end = self.text.find(char, start + 1)
            if end < 0:
                raise self.error(start, "quoted include path is never closed")
            path, self.i = self.text[start + 1 : end], end + 1
        elif char == "" or char in _NL:
            raise self.error(start, "include needs a file name on the same line")
        elif char in "[{(-\\" or char.isdigit():
            raise self.error(start, f"expected a file name after include, got {char!r}")
        else:
            while (char := self.peek()) != "" and char not in ";}'" and not char.isspace():
                self.i += 1
            path = self.text[start : self.i]
        target.update(self.include(path, self.pos(key_start)))

    def include(self, path: str, pos: Position) -> dict[str, Node]:
        full = os.path.normpath(os.path.join(os.path.dirname(self.path), path))
        real = os.path.realpath(full)
        if real in self.includes:
            chain = " -> ".join([*self.includes[self.includes.index(real) :], real])
            raise error_at(pos, f"include cycle: {chain}")
        text = _read(full, pos)
        return _Parser(text, full, (*self.includes, real), self.env_chain).parse_document()

    # -- values --------------------------------------------------------------------------

    def parse_value(self) -> Node:
        start = self.i
        char = self.peek()
        if char in ("[", "{"):
            self.depth += 1
            if self.depth > _MAX_DEPTH:
                raise self.error(start, f"blocks and arrays nest deeper than {_MAX_DEPTH} levels")
            node = self.parse_array() if char == "[" else self.parse_block()
            self.depth -= 1
            return node
        if char == '"':
            return Node(self.parse_double_quoted(), self.pos(start))
        if char == "'":
            end = self.text.find("'", start + 1)
            if end < 0:
                raise self.error(start, "string is never closed")
            self.i = end + 1
            return Node(self.text[start + 1 : end], self.pos(start))
        if char == "(":
            return Node(self.parse_paren_block(), self.pos(start))
        if char == "" or char in _NL:
            raise self.error(start, f"expected a value, got {_show(char)}")
        token, escaped = self.scan_unquoted()
        if token == "":
            raise self.error(start, f"expected a value, got {_show(char)}")
        if escaped:
            return Node(token, self.pos(start))
        return self.classify(token, start)

    def classify(self, token: str, start: int) -> Node:
        """Type of an unquoted token: number, datetime, bool, variable or string."""
        pos = self.pos(start)
        first = token[0]
        if "0" <= first <= "9" or (first == "-" and len(token) > 1):
            return Node(self.number(token, start), pos)
        if first == "-":
            raise self.error(start, "expected a digit after '-'")
        if first == ".":
            raise self.error(start, f"numbers must start with a digit, got {token!r}")
        if token.lower() in _BOOLS:
            return Node(_BOOLS[token.lower()], pos)
        if first == "$":
            return self.lookup(token[1:], pos)
        return Node(token, pos)

    def number(self, token: str, start: int) -> Any:
        try:
            if _INT.fullmatch(token) or _SIZED_INT.fullmatch(token):
                return parse_size_literal(token)
        except ValueError as exc:
            raise self.error(start, str(exc)) from None
        if _FLOAT.fullmatch(token):
            return float(token)
        if _DATETIME.fullmatch(token):
            return dt.datetime.strptime(token, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
        if _ADDRESS.fullmatch(token):
            return token  # an IP address, perhaps with a port
        digits = re.match(r"-?[0-9]+", token)
        after = token[digits.end()] if digits and digits.end() < len(token) else ""
        if token.startswith("-") or after in ("-", "."):
            raise self.error(start, f"malformed number {token!r}")
        return token  # e.g. 10s, 4222abc: nats-server reads these as strings

    def scan_unquoted(self) -> tuple[str, bool]:
        """Characters up to the next value terminator, with backslash escapes applied."""
        start = self.i
        data = bytearray()
        escaped = False
        while (char := self.peek()) != "" and char not in _VALUE_END:
            if char == "\\":
                data += self.parse_escape()
                escaped = True
            else:
                data += char.encode()
                self.i += 1
        try:
            return data.decode("utf-8"), escaped
        except UnicodeDecodeError:
            raise self.error(start, "\\x escapes in this value do not form UTF-8 text") from None

    def parse_escape(self) -> bytes:
        start = self.i
        code = self.text[self.i + 1 : self.i + 2]
        self.i += 2
        simple = {"t": "\t", "n": "\n", "r": "\r", '"': '"', "\\": "\\"}
        if code in simple:
            return simple[code].encode()
        if code == "x":
            digits = self.text[self.i : self.i + 2]
            if len(digits) < 2 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise self.error(
                    start, f"expected two hexadecimal digits after '\\x', got {digits!r}"
                )
            self.i += 2
            return bytes.fromhex(digits)
        raise self.error(
            start, f'invalid escape {_show(code)}; allowed: \\xHH, \\t, \\n, \\r, \\", \\\\'
        )

    def parse_double_quoted(self) -> str:
        start = self.i
        self.i += 1
        data = bytearray()
        while True:
            char = self.peek()
            if char == "":
                raise self.error(start, "string is never closed")
            if char == '"':
                self.i += 1
                break
            if char == "\\":
                data += self.parse_escape()
            else:
                data += char.encode()
                self.i += 1
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise self.error(start, "\\x escapes in this string do not form UTF-8 text") from None

    def parse_paren_block(self) -> str:
        """``( ... )`` with the closing ``)`` alone on its line; the text between is the value."""
        start = self.i
        search = start + 1
        while True:
            end = self.text.find(")", search)
            if end < 0:
                raise self.error(start, "'(' block is never closed: ')' must stand alone on a line")
            if self.text[end - 1] == "\n" and self.text[end + 1 : end + 2] in ("", "\n", "\r"):
                self.i = end + 1
                return self.text[start + 1 : end]
            search = end + 1

    def parse_array(self) -> Node:
        start = self.i
        self.i += 1
        items: list[Node] = []
        self.scopes.append(items)
        while True:
            self.skip_space()
            char = self.peek()
            if self.at_comment():
                self.skip_comment()
                continue
            if char == "":
                raise self.error(start, "'[' is never closed")
            if char == "]":
                self.i += 1
                break
            if char == ",":
                raise self.error(self.i, "unexpected ',' in array")
            items.append(self.parse_value())
            if self.end_item("]", start, "an array value"):
                break
        self.scopes.pop()
        return Node(items, self.pos(start))

    def parse_block(self) -> Node:
        start = self.i
        self.i += 1
        block: dict[str, Node] = {}
        self.scopes.append(block)
        while True:
            self.skip_space()
            char = self.peek()
            if self.at_comment():
                self.skip_comment()
                continue
            if char == "":
                raise self.error(start, "'{' is never closed")
            if char == "}":
                self.i += 1
                break
            self.parse_entry(block, in_block=True)
            if self.end_item("}", start, "a value"):
                break
        self.scopes.pop()
        return Node(block, self.pos(start))

    def end_item(self, closer: str, opened: int, what: str) -> bool:
        """After an item: True if ``closer`` ended the array/block, False if another follows."""
        separators = ("\n", "\r", ",") if closer == "]" else ("\n", "\r", ",", ";")
        while True:
            self.skip_blanks()
            if self.at_comment():
                self.skip_comment()
                continue
            char = self.peek()
            if char in separators:
                self.i += 1
                return False
            if char == closer:
                self.i += 1
                return True
            if char == "":
                opener = "[" if closer == "]" else "{"
                raise self.error(opened, f"'{opener}' is never closed")
            raise self.error(self.i, f"expected ',' or '{closer}' after {what}, got {_show(char)}")

    # -- variables -----------------------------------------------------------------------

    def lookup(self, name: str, pos: Position) -> Node:
        if name.startswith("2a$"):  # a bcrypt hash written without quotes
            return Node("$" + name, pos)
        for scope in reversed(self.scopes):
            if isinstance(scope, dict) and name in scope:
                found = scope[name]
                found.used_as_variable = True
                return Node(found.value, pos)
        raw = os.environ.get(name)
        if raw is None:
            raise error_at(pos, f"variable reference for '{name}' can not be found")
        if raw == "":
            return Node("", pos)
        if name in self.env_chain:
            raise error_at(pos, f"environment variable '{name}' refers to itself")
        sub = _Parser(f"pk={raw}", f"<${name}>", self.includes, (*self.env_chain, name))
        try:
            parsed = sub.parse_document()
        except ConfigError as exc:
            raise error_at(
                pos, f"variable reference for '{name}' could not be parsed: {exc}"
            ) from None
        return Node(parsed["pk"].value, pos)
