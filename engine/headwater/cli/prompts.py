"""Asking for what is missing: prompts only when a person is at the keyboard.

Scripts and pipelines (stdin not a terminal) get a clear error naming the missing value
instead of a prompt that would hang or read garbage.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer

from headwater.cli.errors import CliError


def stdin_is_tty() -> bool:
    return sys.stdin.isatty()


def require(
    value: str | None,
    label: str,
    how: str,
    *,
    default: str | None = None,
    choices: Sequence[str] = (),
) -> str:
    """``value`` if given, else a prompt on a terminal, else a CliError saying ``how``."""
    if value:
        return value
    if not stdin_is_tty():
        raise CliError(f"{label} is required: {how} (no terminal to prompt on)")
    hint = f" ({', '.join(choices)})" if choices else ""
    answer = str(typer.prompt(f"{label}{hint}", default=default)).strip()
    if not answer:
        raise CliError(f"{label} is required")
    return answer


def ask(label: str, default: str) -> str:
    """An optional value: prompted on a terminal, ``default`` otherwise."""
    if not stdin_is_tty():
        return default
    return str(typer.prompt(label, default=default)).strip()


def confirm_or_force(force: bool, question: str) -> None:
    """Destructive actions: ``-f`` skips the question; without a terminal ``-f`` is required."""
    if force:
        return
    if not stdin_is_tty():
        raise CliError(f"{question} Refusing without --force (no terminal to confirm on).")
    if not typer.confirm(question, default=False):
        raise CliError("cancelled")
