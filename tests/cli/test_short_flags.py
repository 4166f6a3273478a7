"""``-f`` means ``--file`` in every command; ``--force`` has no short form.

The GitOps commands take ``-f/--file``; ``stream rm -f`` used to mean ``--force``, so a
habit from one command deleted without asking in another. No server is needed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer
from typer.testing import CliRunner

from headwater.cli.app import app


# Duck-typed: typer >= 0.29 vendors its own click, so click's classes are not the ones used.
def commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from commands(sub, (*path, name))


def options() -> Iterator[tuple[str, Any]]:
    """(command path, option) for every option of every command, the root's included."""
    for path, command in commands(typer.main.get_command(app)):
        for param in command.params:
            if param.param_type_name == "option":
                yield " ".join(path) or "headwater", param


def test_minus_f_is_a_file_everywhere() -> None:
    uses = [(where, option.opts) for where, option in options() if "-f" in option.opts]
    assert uses, "the GitOps commands take -f/--file"
    for where, opts in uses:
        assert "--file" in opts, f"{where}: -f is {opts}, not --file"


def test_force_is_long_only_everywhere() -> None:
    forces = [(where, option) for where, option in options() if option.name == "force"]
    assert {where for where, _ in forces} >= {"stream rm", "kv rm", "consumer rm", "stream backup"}
    for where, option in forces:
        assert option.opts == ["--force"] and not option.secondary_opts, where


def test_minus_f_where_force_was_meant_is_refused_with_a_hint() -> None:
    result = CliRunner().invoke(app, ["stream", "rm", "ORDERS", "-f"], env={"NATS_URL": None})
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "Error: No such option: -f (-f means --file; to skip the confirmation use --force)"
    )


def test_minus_f_elsewhere_gets_no_force_hint() -> None:
    result = CliRunner().invoke(app, ["pub", "x", "-f"], env={"NATS_URL": None})
    assert result.exit_code == 1
    assert result.stderr.strip() == "Error: No such option: -f"
