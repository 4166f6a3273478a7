"""Evaluate assertions over a stream's or consumer's info JSON (the eval action).

Usage: evaluate.py INFO_JSON, with the expressions in $HW_EXPRESSION, one per line.

Each line is a Python expression, restricted to data access, comparisons, arithmetic, boolean
logic, comprehensions and a few pure helpers: no imports, no attribute starting with "_", no
calls except the helpers below. The info's top-level fields are names (``config``,
``state``, ``delivered``, ...) and ``info`` is the whole document; nested objects take
``config.max_age`` or ``config["max_age"]``. A field the server did not send is an error that
lists the fields there are; ``get(obj, "field", default)`` and ``has(obj, "field")`` are for
fields the server leaves out when empty.

Helpers: ``duration("1y")`` (nanoseconds, as the server's JSON), ``size("10GiB")``,
``count("1M")``, ``get``, ``has``, ``len``, ``any``, ``all``, ``min``, ``max``, ``sum``,
``abs``, ``sorted``, ``set``; and the methods ``startswith``, ``endswith``, ``lower``,
``upper``, ``strip``, ``split``, ``get``, ``keys``, ``values``, ``items``.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "setup"))

from github_io import annotation, append_summary, markdown_cell, set_output


class Fields(dict[str, Any]):
    """A JSON object whose keys read as attributes too; a missing key names the ones there."""

    def __getattr__(self, name: str) -> Any:
        return self[name]

    def __missing__(self, key: str) -> Any:
        known = ", ".join(sorted(self)) or "none"
        raise LookupError(f"no field {key!r} here (fields: {known})")


def wrap(value: Any) -> Any:
    if isinstance(value, dict):
        return Fields({key: wrap(item) for key, item in value.items()})
    if isinstance(value, list):
        return [wrap(item) for item in value]
    return value


def _get(obj: dict[str, Any], key: str, default: Any = None) -> Any:
    return obj.get(key, default)


def _has(obj: dict[str, Any], key: str) -> bool:
    return key in obj


def _units() -> dict[str, Callable[[str], int]]:
    # The same unit parsers as the YAML documents and the CLI flags.
    from headwater.control.units import parse_count, parse_duration, parse_size

    return {"duration": parse_duration, "size": parse_size, "count": parse_count}


HELPERS: dict[str, Callable[..., Any]] = {
    "get": _get,
    "has": _has,
    "len": len,
    "any": any,
    "all": all,
    "min": min,
    "max": max,
    "sum": sum,
    "abs": abs,
    "sorted": sorted,
    "set": set,
}

ALLOWED_NODES = (
    ast.Expression,
    ast.BoolOp,
    ast.BinOp,
    ast.UnaryOp,
    ast.Compare,
    ast.IfExp,
    ast.Name,
    ast.Load,
    ast.Store,
    ast.Constant,
    ast.Attribute,
    ast.Subscript,
    ast.Slice,
    ast.List,
    ast.Tuple,
    ast.Set,
    ast.Dict,
    ast.Call,
    ast.keyword,
    ast.ListComp,
    ast.SetComp,
    ast.GeneratorExp,
    ast.comprehension,
    ast.boolop,
    ast.operator,
    ast.unaryop,
    ast.cmpop,
)


SAFE_METHODS = frozenset(
    {"startswith", "endswith", "lower", "upper", "strip", "split", "get", "keys", "values", "items"}
)
"""Methods of strings and objects an expression may call: they read, never change or run."""


class ExpressionError(ValueError):
    """The expression is not allowed or does not parse."""


def check(tree: ast.AST, helpers: set[str]) -> None:
    """Refuse anything beyond reading data: so an expression can not run code."""
    for node in ast.walk(tree):
        if not isinstance(node, ALLOWED_NODES):
            raise ExpressionError(f"{type(node).__name__} is not allowed")
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise ExpressionError(f"attribute {node.attr!r} is not allowed")
        if isinstance(node, ast.Name) and node.id.startswith("_"):
            raise ExpressionError(f"name {node.id!r} is not allowed")
        if isinstance(node, ast.Call) and not _callable(node.func, helpers):
            allowed = ", ".join(sorted(helpers | {f".{name}()" for name in SAFE_METHODS}))
            raise ExpressionError(f"only these can be called: {allowed}")


def _callable(func: ast.expr, helpers: set[str]) -> bool:
    if isinstance(func, ast.Name):
        return func.id in helpers
    return isinstance(func, ast.Attribute) and func.attr in SAFE_METHODS


@dataclass
class Outcome:
    expression: str
    passed: bool
    detail: str


def operand_values(tree: ast.Expression, source: str, names: dict[str, Any]) -> str:
    """For a failed comparison, the value of each side: ``state.messages = 2``."""
    body = tree.body
    if not isinstance(body, ast.Compare):
        return ""
    parts = []
    for operand in [body.left, *body.comparators]:
        if isinstance(operand, ast.Constant):
            continue
        text = ast.get_source_segment(source, operand) or ast.unparse(operand)
        value = _evaluate(ast.Expression(body=operand), names)
        parts.append(f"{text} = {json.dumps(value, default=str)}")
    return "; ".join(parts)


def _evaluate(tree: ast.Expression, names: dict[str, Any]) -> Any:
    code = compile(ast.fix_missing_locations(tree), "<expression>", "eval")
    return eval(code, {"__builtins__": {}}, names)  # checked by check(): data access only


def evaluate(expression: str, names: dict[str, Any]) -> Outcome:
    try:
        tree = ast.parse(expression, mode="eval")
        check(tree, {name for name, value in names.items() if callable(value)})
        value = _evaluate(tree, names)
    except SyntaxError as failure:
        return Outcome(expression, False, f"syntax error: {failure.msg}")
    except Exception as failure:
        return Outcome(expression, False, f"error: {failure}")
    if value:
        return Outcome(expression, True, "")
    return Outcome(expression, False, operand_values(tree, expression, names) or repr(value))


def namespace(info: dict[str, Any]) -> dict[str, Any]:
    names: dict[str, Any] = {key: wrap(value) for key, value in info.items()}
    names["info"] = wrap(info)
    names.update(HELPERS)
    names.update(_units())
    return names


def expressions(text: str) -> list[str]:
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def summary(outcomes: list[Outcome]) -> str:
    passed = sum(outcome.passed for outcome in outcomes)
    lines = [
        "## Headwater eval",
        "",
        f"{passed} of {len(outcomes)} assertion(s) held.",
        "",
        "| | Expression | Detail |",
        "|---|---|---|",
    ]
    for outcome in outcomes:
        mark = "✅" if outcome.passed else "❌"
        lines.append(
            f"| {mark} | `{markdown_cell(outcome.expression)}` | {markdown_cell(outcome.detail)} |"
        )
    return "\n".join(lines) + "\n"


def main(path: str) -> int:
    info = json.loads(Path(path).read_text(encoding="utf-8"))
    todo = expressions(os.environ.get("HW_EXPRESSION", ""))
    if not todo:
        print(annotation("error", "the expression input holds no expression", title="eval"))
        return 1
    names = namespace(info)
    outcomes = [evaluate(expression, names) for expression in todo]
    for outcome in outcomes:
        if outcome.passed:
            print(f"passed: {outcome.expression}")
        else:
            message = f"{outcome.expression}: {outcome.detail}"
            print(annotation("error", message, title="headwater eval failed"))
    all_passed = all(outcome.passed for outcome in outcomes)
    set_output("passed", "true" if all_passed else "false")
    set_output("results", json.dumps([asdict(outcome) for outcome in outcomes]))
    append_summary(summary(outcomes))
    return 0 if all_passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
