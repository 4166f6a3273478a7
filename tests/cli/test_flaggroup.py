"""``flag_group``: a dataclass's fields become a command's options and come back as one object."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

import pytest
import typer
from typer.testing import CliRunner

from headwater.cli.app import app as headwater_app
from headwater.cli.consumerconfig import ConsumerFlags
from headwater.cli.flaggroup import flag_group
from headwater.cli.options import AckPolicy, Discard, ReplayPolicy, Retention, Storage
from headwater.cli.streamconfig import StreamFlags


class Colour(StrEnum):
    red = "red"
    blue = "blue"


Tags = Annotated[list[str] | None, typer.Option("--tag", help="Tags; repeat.")]
ColourOpt = Annotated[Colour | None, typer.Option("--colour", help="A colour.")]
Size = Annotated[int, typer.Option("--size", "-s", help="A size.")]
Loud = Annotated[bool | None, typer.Option("--loud/--quiet", help="Volume.")]
Name = Annotated[str, typer.Argument(help="A name.")]
Verbose = Annotated[bool, typer.Option("--verbose", help="More output.")]


@dataclass(frozen=True)
class Knobs:
    tags: Tags = None
    colour: ColourOpt = None
    size: Size = 3
    loud: Loud = None


def knob_app(seen: list[Any]) -> typer.Typer:
    """A one-command app recording what the command receives."""
    app = typer.Typer()

    @app.command()
    @flag_group(Knobs, param="knobs")
    def run(name: Name, knobs: Knobs = Knobs(), verbose: Verbose = False) -> None:
        """Record the call."""
        seen.append((name, knobs, verbose))

    @app.command()
    def other() -> None:  # a second command, so typer keeps the command's name
        """Unused."""

    return app


def test_fields_arrive_as_one_instance():
    seen: list[Any] = []
    argv = ["run", "n1", "--tag", "a", "--tag", "b", "--colour", "blue", "-s", "7", "--quiet"]
    result = CliRunner().invoke(knob_app(seen), [*argv, "--verbose"])
    assert result.exit_code == 0, result.output
    assert seen == [("n1", Knobs(tags=["a", "b"], colour=Colour.blue, size=7, loud=False), True)]


def test_options_not_given_keep_the_dataclass_defaults():
    seen: list[Any] = []
    result = CliRunner().invoke(knob_app(seen), ["run", "n2"])
    assert result.exit_code == 0, result.output
    assert seen == [("n2", Knobs(), False)]


def test_help_lists_the_fields_where_the_parameter_stands():
    command = typer.main.get_command(knob_app([]))
    assert isinstance(command, typer.core.TyperGroup)
    params = [param.name for param in command.commands["run"].params]
    assert params == ["name", "tags", "colour", "size", "loud", "verbose"]
    result = CliRunner().invoke(knob_app([]), ["run", "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    for text in ("--tag", "--colour", "--size", "--loud", "--quiet", "Volume.", "--verbose"):
        assert text in result.output


def test_a_bad_value_is_a_usage_error():
    result = CliRunner().invoke(knob_app([]), ["run", "n3", "--colour", "green"])
    assert result.exit_code == 2
    assert "--colour" in result.output


def test_refuses_what_it_cannot_wire():
    with pytest.raises(TypeError, match="dataclass"):
        flag_group(dict)

    def no_param(name: str) -> None: ...

    with pytest.raises(TypeError, match="no parameter 'flags'"):
        flag_group(Knobs)(no_param)

    def clashing(size: int, flags: Knobs = Knobs()) -> None: ...

    with pytest.raises(TypeError, match="clash"):
        flag_group(Knobs)(clashing)


# The real groups: every field is an option of every command that takes the group, and an
# argv naming every option fills every field (so a new field without an option, or an option
# that lands in the wrong field, fails here).
STREAM_ARGV = [
    "--subjects", "a,b", "--description", "d", "--storage", "memory", "--retention", "work",
    "--discard", "new", "--max-msgs", "1K", "--max-msgs-per-subject", "5", "--max-bytes", "1MiB",
    "--max-age", "1h", "--max-msg-size", "1KiB", "--max-consumers", "4", "--dupe-window", "2m",
    "--replicas", "1", "--no-ack", "--allow-rollup", "--deny-delete", "--allow-purge",
    "--no-allow-direct",
]  # fmt: skip
STREAM_FLAGS = StreamFlags(
    subjects=["a,b"], description="d", storage=Storage.memory, retention=Retention.work,
    discard=Discard.new, max_msgs="1K", max_msgs_per_subject="5", max_bytes="1MiB",
    max_age="1h", max_msg_size="1KiB", max_consumers=4, dupe_window="2m", replicas=1,
    ack=False, allow_rollup=True, deny_delete=True, deny_purge=False, allow_direct=False,
)  # fmt: skip
CONSUMER_ARGV = [
    "--filter", "x.>", "--ack", "all", "--deliver", "new", "--pull", "--target", "t",
    "--deliver-group", "g", "--max-deliver", "3", "--wait", "10s", "--replay", "original",
    "--sample", "50", "--max-pending", "9", "--max-waiting", "8", "--heartbeat", "5s",
    "--no-flow-control", "--headers-only", "--inactive-threshold", "1h", "--description", "c",
]  # fmt: skip
CONSUMER_FLAGS = ConsumerFlags(
    filters=["x.>"], ack=AckPolicy.all, deliver="new", pull=True, target="t",
    deliver_group="g", max_deliver=3, ack_wait="10s", replay=ReplayPolicy.original, sample=50,
    max_pending=9, max_waiting=8, heartbeat="5s", flow_control=False, headers_only=True,
    inactive_threshold="1h", description="c",
)  # fmt: skip


@pytest.mark.parametrize(
    ("cls", "argv", "expected"),
    [(StreamFlags, STREAM_ARGV, STREAM_FLAGS), (ConsumerFlags, CONSUMER_ARGV, CONSUMER_FLAGS)],
)
def test_every_field_of_the_real_groups_passes_through(
    cls: type, argv: list[str], expected: Any
) -> None:
    for field in dataclasses.fields(cls):
        assert getattr(expected, field.name) != field.default, f"{field.name} is not exercised"
    seen: list[Any] = []
    app = typer.Typer()

    @app.command()
    @flag_group(cls)
    def run(flags: Any = None) -> None:  # the annotation of ``flags`` is not used
        seen.append(flags)

    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert seen == [expected]


@pytest.mark.parametrize(
    ("group", "command", "cls"),
    [
        ("stream", "add", StreamFlags),
        ("stream", "edit", StreamFlags),
        ("stream", "cp", StreamFlags),
        ("consumer", "add", ConsumerFlags),
        ("consumer", "edit", ConsumerFlags),
    ],
)
def test_the_headwater_commands_expose_every_field(group: str, command: str, cls: type) -> None:
    root = typer.main.get_command(headwater_app)
    assert isinstance(root, typer.core.TyperGroup)
    sub = root.commands[group]
    assert isinstance(sub, typer.core.TyperGroup)
    names = [param.name for param in sub.commands[command].params]
    fields = [field.name for field in dataclasses.fields(cls)]
    start = names.index(fields[0])
    assert names[start : start + len(fields)] == fields
    assert "flags" not in names
