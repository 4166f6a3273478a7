"""GitHub Actions expressions (``${{ ... }}``), evaluated the way the runner does.

Enough of the language for actions and workflows: literals, context property access
(``inputs.tls-cert``, ``steps.plan.outputs.changes``, ``a['b']``, ``a[0]``), ``!``,
comparisons, ``&&``, ``||``, parentheses, and the functions ``contains``, ``startsWith``,
``endsWith``, ``format``, ``join``, ``toJSON``, ``fromJSON``, ``hashFiles`` and the status
functions.
Semantics follow GitHub's documentation: loose equality that coerces to numbers across
types, case-insensitive string comparison, ``&&``/``||`` returning an operand, a missing
property reading as null, and null interpolating as an empty string.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_TOKEN = re.compile(
    r"""
    \s*(?:
      (?P<string>'(?:[^']|'')*')
    | (?P<number>-?(?:0x[0-9a-fA-F]+|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?))
    | (?P<op>&&|\|\||==|!=|<=|>=|<|>|!|\(|\)|\[|\]|,|\.|\*)
    | (?P<name>[A-Za-z_][A-Za-z0-9_-]*)
    )""",
    re.VERBOSE,
)

_INTERPOLATION = re.compile(r"\$\{\{((?:[^}']|'(?:[^']|'')*'|\}(?!\}))*)\}\}")

STATUS_FUNCTIONS = ("success", "failure", "always", "cancelled")


class ExpressionError(ValueError):
    """An expression that does not parse or uses something unsupported."""


@dataclass
class Status:
    """The job's state, for the status functions."""

    failed: bool = False
    cancelled: bool = False


def tokenize(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise ExpressionError(f"unexpected character at {pos} in {text!r}")
        kind = match.lastgroup
        assert kind is not None
        tokens.append((kind, match.group(kind)))
        pos = match.end()
    return tokens


def to_number(value: Any) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return 0.0
        try:
            return float(int(text, 16)) if text.lower().startswith("0x") else float(text)
        except ValueError:
            return math.nan
    return math.nan


def truthy(value: Any) -> bool:
    if isinstance(value, float) and math.isnan(value):
        return False
    return value not in (None, False, 0, "")


def to_string(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dict | list):
        return json.dumps(value, indent=2)
    return str(value)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object"


def loose_equal(a: Any, b: Any) -> bool:
    kind_a, kind_b = _kind(a), _kind(b)
    if kind_a == kind_b:
        if kind_a == "string":
            return a.casefold() == b.casefold()
        if kind_a == "object":
            return a is b
        return a == b
    return to_number(a) == to_number(b)


def _compare(op: str, a: Any, b: Any) -> bool:
    if op == "==":
        return loose_equal(a, b)
    if op == "!=":
        return not loose_equal(a, b)
    if isinstance(a, str) and isinstance(b, str):
        left: Any = a.casefold()
        right: Any = b.casefold()
    else:
        left, right = to_number(a), to_number(b)
    return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[op]


def _format(template: str, *args: Any) -> str:
    def field(match: re.Match[str]) -> str:
        if match.group(0) in ("{{", "}}"):
            return match.group(0)[0]
        return to_string(args[int(match.group(1))])

    return re.sub(r"\{\{|\}\}|\{(\d+)\}", field, template)


def _contains(search: Any, item: Any) -> bool:
    if isinstance(search, list):
        return any(loose_equal(element, item) for element in search)
    return to_string(item).casefold() in to_string(search).casefold()


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]], context: Mapping[str, Any], status: Status):
        self.tokens = tokens
        self.pos = 0
        self.context = context
        self.status = status
        self.functions: dict[str, Callable[..., Any]] = {
            "contains": _contains,
            "startswith": lambda a, b: to_string(a).casefold().startswith(to_string(b).casefold()),
            "endswith": lambda a, b: to_string(a).casefold().endswith(to_string(b).casefold()),
            "format": lambda template, *args: _format(to_string(template), *args),
            "join": lambda items, sep=",": (
                to_string(sep).join(to_string(i) for i in items)
                if isinstance(items, list)
                else to_string(items)
            ),
            "tojson": lambda value: json.dumps(value, indent=2),
            "fromjson": lambda text: json.loads(to_string(text)),
            "hashfiles": self._hash_files,
            "success": lambda: not self.status.failed and not self.status.cancelled,
            "failure": lambda: self.status.failed,
            "always": lambda: True,
            "cancelled": lambda: self.status.cancelled,
        }

    def _hash_files(self, *patterns: Any) -> str:
        """GitHub's ``hashFiles``: the SHA-256 of the SHA-256s of the files under the
        workspace that match the patterns, in path order; "" when none matches."""
        github = self.context.get("github") or {}
        workspace = Path(str(github.get("workspace") or "."))
        files = sorted(
            {f for pattern in patterns for f in workspace.glob(to_string(pattern)) if f.is_file()}
        )
        if not files:
            return ""
        outer = hashlib.sha256()
        for path in files:
            outer.update(hashlib.sha256(path.read_bytes()).digest())
        return outer.hexdigest()

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if token is None or (value is not None and token[1] != value):
            raise ExpressionError(f"expected {value or 'a token'}, got {token}")
        self.pos += 1
        return token

    def at(self, *values: str) -> bool:
        token = self.peek()
        return token is not None and token[0] == "op" and token[1] in values

    def parse(self) -> Any:
        value = self.or_expr()
        if self.peek() is not None:
            raise ExpressionError(f"unexpected {self.peek()}")
        return value

    def or_expr(self) -> Any:
        value = self.and_expr()
        while self.at("||"):
            self.take()
            right = self.and_expr()
            value = value if truthy(value) else right
        return value

    def and_expr(self) -> Any:
        value = self.equality()
        while self.at("&&"):
            self.take()
            right = self.equality()
            value = right if truthy(value) else value
        return value

    def equality(self) -> Any:
        value = self.relation()
        while self.at("==", "!="):
            op = self.take()[1]
            value = _compare(op, value, self.relation())
        return value

    def relation(self) -> Any:
        value = self.unary()
        while self.at("<", "<=", ">", ">="):
            op = self.take()[1]
            value = _compare(op, value, self.unary())
        return value

    def unary(self) -> Any:
        if self.at("!"):
            self.take()
            return not truthy(self.unary())
        return self.postfix(self.primary())

    def primary(self) -> Any:
        kind, text = self.take()
        if kind == "string":
            return text[1:-1].replace("''", "'")
        if kind == "number":
            return float(int(text, 16)) if "x" in text.lower() else float(text)
        if kind == "op" and text == "(":
            value = self.or_expr()
            self.take(")")
            return value
        if kind != "name":
            raise ExpressionError(f"unexpected {text!r}")
        lowered = text.lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        if lowered == "null":
            return None
        if self.at("("):
            return self.call(lowered)
        names = {name.casefold(): name for name in self.context}
        if lowered not in names:
            raise ExpressionError(f"unknown context {text!r}")
        return self.context[names[lowered]]

    def call(self, name: str) -> Any:
        if name not in self.functions:
            raise ExpressionError(f"unsupported function {name}()")
        self.take("(")
        args = []
        while not self.at(")"):
            args.append(self.or_expr())
            if not self.at(")"):
                self.take(",")
        self.take(")")
        return self.functions[name](*args)

    def postfix(self, value: Any) -> Any:
        while self.at(".", "["):
            if self.take()[1] == ".":
                value = _member(value, self.take()[1])
            else:
                key = self.or_expr()
                self.take("]")
                value = _member(value, key)
        return value


def _member(value: Any, key: Any) -> Any:
    if isinstance(value, Mapping):
        wanted = to_string(key).casefold()
        # Property names are case-insensitive in GitHub's expressions.
        return next((v for k, v in value.items() if k.casefold() == wanted), None)
    if isinstance(value, list) and _kind(key) == "number" and 0 <= int(to_number(key)) < len(value):
        return value[int(to_number(key))]
    return None


def evaluate(expression: str, context: Mapping[str, Any], status: Status | None = None) -> Any:
    return _Parser(tokenize(expression), context, status or Status()).parse()


def interpolate(text: str, context: Mapping[str, Any], status: Status | None = None) -> str:
    """Replace every ``${{ expr }}`` in ``text`` by its value as a string."""
    return _INTERPOLATION.sub(
        lambda match: to_string(evaluate(match.group(1), context, status)), text
    )


def condition(text: str | bool | None, context: Mapping[str, Any], status: Status) -> bool:
    """A step's ``if:``: an expression with or without ``${{ }}``, ``success() &&`` implied."""
    if text is None:
        return not status.failed and not status.cancelled
    source = ("true" if text else "false") if isinstance(text, bool) else text.strip()
    whole = _INTERPOLATION.fullmatch(source)
    if whole is not None:
        source = whole.group(1)
    lowered = source.lower()
    if not any(re.search(rf"\b{name}\s*\(", lowered) for name in STATUS_FUNCTIONS):
        source = f"success() && ({source})"
    return truthy(evaluate(source, context, status))
