"""The one exception the configuration loader raises, and where in a file a value came from.

``main`` prints a ``ConfigError`` as one line and exits with status 1, so every message must
say on its own what is wrong and where: ``file:line:col: what`` for config-file problems, the
Go ``flag`` package's wording for command-line problems.
"""

from __future__ import annotations

from dataclasses import dataclass


class ConfigError(Exception):
    """A configuration problem; ``str(err)`` is a single line fit to print as is."""


@dataclass(frozen=True)
class Position:
    """Where a key or value starts in a config file.

    ``line`` and ``col`` are 1-based, as editors count them. (nats-server prints 0-based
    columns; the line numbers are the same.)
    """

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


def error_at(pos: Position, message: str) -> ConfigError:
    """A ``ConfigError`` prefixed with ``pos`` (``file:line:col: message``)."""
    return ConfigError(f"{pos}: {message}")
