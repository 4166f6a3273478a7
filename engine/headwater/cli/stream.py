"""``headwater stream``: add, ls, report, info, edit, rm, purge, rmm, get and cp, as natscli."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from headwater.cli import configfile, messages, output, prompts, reports, streamcopy, views
from headwater.cli.context import current
from headwater.cli.errors import CliError
from headwater.cli.flaggroup import flag_group
from headwater.cli.jsapi import JetStreamApi, Json
from headwater.cli.streamconfig import StreamFlags, changes, merged

app = typer.Typer(help="Manage streams.", no_args_is_help=True)

ConfigFile = Annotated[
    Path | None, typer.Option("--config", help="Configuration file (server JSON).")
]
JsonOpt = Annotated[bool, typer.Option("--json", "-j", help="Print the server's JSON.")]
# Long only: -f is --file in every command (the GitOps ones), so it never skips a question.
Force = Annotated[bool, typer.Option("--force", help="Do not ask for confirmation.")]
StreamArg = Annotated[str | None, typer.Argument(help="Stream name.", show_default=False)]
ShowAll = Annotated[
    bool,
    typer.Option("--all", "-a", help="Include system streams (KV buckets, object stores, MQTT)."),
]

#: Streams the server's own features keep (KV buckets, object stores, MQTT state). natscli
#: (jsm.go's IsInternalStream) leaves them out of ``stream ls`` unless ``--all``: they are
#: managed through ``kv``, not as streams, and would crowd out the ones people created.
SYSTEM_PREFIXES = ("KV_", "OBJ_", "$MQTT_")


def is_system_stream(name: str) -> bool:
    return name.startswith(SYSTEM_PREFIXES)


async def pick_stream(api: JetStreamApi, name: str | None) -> str:
    """The stream named, or one chosen from the known streams on a terminal.

    The choices leave out the system streams, as natscli's picker and ``stream ls`` do;
    typing one's name still picks it."""
    if name:
        return name
    known = await api.stream_names() if prompts.stdin_is_tty() else []
    known = [stream for stream in known if not is_system_stream(stream)]
    return prompts.require(None, "Stream", "pass the stream name", choices=known)


def show_stream(info: Json, as_json: bool) -> None:
    if as_json:
        output.emit_json(info)
    else:
        views.stream_info(info)


@app.command("add")
@flag_group(StreamFlags)
def add(
    ctx: typer.Context,
    name: StreamArg = None,
    flags: StreamFlags = StreamFlags(),
    config: ConfigFile = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a stream from flags, a --config file, or prompts on a terminal."""
    cli = current(ctx)
    base = configfile.load(config) if config else {}
    name = prompts.require(name or base.get("name"), "Stream name", "pass NAME")
    if flags.subjects is None and not base.get("subjects"):
        answer = prompts.ask("Subjects to store", default=name)
        if answer:
            flags = replace(flags, subjects=[answer])
    wanted = merged(base, flags, name)
    info = cli.api(lambda api: api.stream_create(wanted))
    if not cli.wants_json(as_json):
        output.note(f"Stream {name} was created")
    show_stream(info, cli.wants_json(as_json))


@app.command("ls")
def ls(
    ctx: typer.Context,
    subject: Annotated[
        str | None, typer.Option("--subject", help="Only streams storing this subject.")
    ] = None,
    names: Annotated[bool, typer.Option("--names", "-n", help="Only the names.")] = False,
    show_all: ShowAll = False,
    as_json: JsonOpt = False,
) -> None:
    """List streams (with --json: the server's stream infos, or names with --names).

    System streams are left out unless --all; --names lists every stream, as natscli's."""
    cli = current(ctx)
    if names:
        found = cli.api(lambda api: api.stream_names(subject))
        if cli.wants_json(as_json):
            output.emit_json(found)
        else:
            for stream in found:
                output.say(stream)
        return
    every = cli.api(lambda api: api.stream_list(subject))
    infos = [i for i in every if show_all or not is_system_stream(i["config"]["name"])]
    if cli.wants_json(as_json):
        output.emit_json(infos)
    elif not infos and every:
        output.say("No streams defined, pass -a to include system streams")
    elif not infos:
        output.say("No streams defined")
    else:
        columns = ("Name", "Subjects", "Messages", "Size", "Consumers")
        output.table("Streams", columns, views.stream_rows(infos))


@app.command("report")
def report(
    ctx: typer.Context,
    subject: Annotated[
        str | None, typer.Option("--subject", help="Only streams storing this subject.")
    ] = None,
    by_consumers: Annotated[
        bool, typer.Option("--consumers", "-o", help="Sort by number of consumers.")
    ] = False,
    by_messages: Annotated[
        bool, typer.Option("--messages", "-m", help="Sort by number of messages.")
    ] = False,
    by_name: Annotated[bool, typer.Option("--name", "-n", help="Sort by stream name.")] = False,
    by_storage: Annotated[bool, typer.Option("--storage", "-t", help="Sort by storage.")] = False,
    raw: Annotated[bool, typer.Option("--raw", "-r", help="Numbers unformatted.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Statistics of every stream, as natscli's ``nats stream report`` (sorted by bytes).

    System streams are included, as in natscli's report."""
    cli = current(ctx)
    rows = [reports.stream_row(i) for i in cli.api(lambda api: api.stream_list(subject))]
    # natscli's precedence when several sort flags are given
    wanted = [("consumers", by_consumers), ("messages", by_messages), ("name", by_name)]
    wanted.append(("storage", by_storage))
    key = next((name for name, given in wanted if given), "bytes")
    rows.sort(key=reports.STREAM_SORTS[key])
    if cli.wants_json(as_json):
        output.emit_json(rows)
        return
    if not rows:
        output.say("No streams defined")
        return
    cells = [reports.stream_cells(row, raw) for row in rows]
    columns = list(reports.STREAM_COLUMNS)
    if not any(row["placement"] for row in rows):  # room for the rest at 80 columns
        columns.pop(2)
        cells = [cell[:2] + cell[3:] for cell in cells]
    output.table("Stream Report", columns, cells)


@app.command("info")
def info(ctx: typer.Context, name: StreamArg = None, as_json: JsonOpt = False) -> None:
    """Show a stream's configuration and state."""
    cli = current(ctx)

    async def body(api: JetStreamApi) -> Json:
        return await api.stream_info(await pick_stream(api, name))

    show_stream(cli.api(body), cli.wants_json(as_json))


@app.command("edit")
@flag_group(StreamFlags)
def edit(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Stream name.")],
    flags: StreamFlags = StreamFlags(),
    config: ConfigFile = None,
    as_json: JsonOpt = False,
) -> None:
    """Change a stream: the live config, then the --config file, then flags on top."""
    cli = current(ctx)
    from_file = configfile.load(config) if config else None

    async def body(api: JetStreamApi) -> tuple[list[tuple[str, Any, Any]], Json]:
        live = (await api.stream_info(name))["config"]
        # Fields the file leaves out keep their live values: a partial file changes only
        # what it names, instead of silently resetting the rest to the server's defaults.
        wanted = merged({**live, **from_file} if from_file else live, flags, name)
        diff = changes(live, wanted)
        if not diff:
            return diff, await api.stream_info(name)
        return diff, await api.stream_update(wanted)

    diff, result = cli.api(body)
    if cli.wants_json(as_json):
        output.emit_json(result)
        return
    if not diff:
        output.note(f"Stream {name} already has this configuration; nothing changed")
    else:
        output.note(f"Stream {name} was updated")
        for line in views.change_lines(diff):
            output.note(f"  {escape(line)}")
    views.stream_info(result)


@app.command("rm")
def rm(
    ctx: typer.Context, name: StreamArg = None, force: Force = False, as_json: JsonOpt = False
) -> None:
    """Delete a stream and all its messages."""
    cli = current(ctx)

    async def body(api: JetStreamApi) -> tuple[str, Json]:
        stream = await pick_stream(api, name)
        await api.stream_info(stream)  # "stream not found" before asking the question
        prompts.confirm_or_force(force, f"Really delete stream {stream} and all its messages?")
        return stream, await api.stream_delete(stream)

    stream, reply = cli.api(body)
    if cli.wants_json(as_json):
        output.emit_json(reply)
    else:
        output.note(f"Stream {stream} was deleted")


@app.command("purge")
def purge(
    ctx: typer.Context,
    name: StreamArg = None,
    subject: Annotated[
        str | None, typer.Option("--subject", help="Only messages on this subject.")
    ] = None,
    seq: Annotated[
        int | None, typer.Option("--seq", help="Purge up to, not including, this sequence.")
    ] = None,
    keep: Annotated[int | None, typer.Option("--keep", help="Keep this many newest.")] = None,
    force: Force = False,
    as_json: JsonOpt = False,
) -> None:
    """Delete messages from a stream but keep the stream."""
    cli = current(ctx)
    if seq is not None and keep is not None:
        raise CliError("--seq and --keep cannot be combined")
    request = {
        key: value
        for key, value in (("filter", subject), ("seq", seq), ("keep", keep))
        if value is not None
    }

    async def body(api: JetStreamApi) -> tuple[Json, Json]:
        stream = await pick_stream(api, name)
        before = await api.stream_info(stream)
        what = f"messages on {subject}" if subject else "messages"
        prompts.confirm_or_force(force, f"Really purge {what} from stream {stream}?")
        with output.progress(f"Purging {stream}", total=None, enabled=not as_json):
            reply = await api.stream_purge(stream, request)
        return reply, await api.stream_info(before["config"]["name"])

    reply, after = cli.api(body)
    if cli.wants_json(as_json):
        output.emit_json(reply)
        return
    output.note(f"Purged {reply.get('purged', 0):,} messages")
    views.stream_info(after)


@app.command("rmm")
def rmm(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Stream name.")],
    seq: Annotated[int, typer.Argument(help="Sequence of the message to delete.")],
    erase: Annotated[
        bool, typer.Option("--erase", help="Overwrite the message's data on disk.")
    ] = False,
    force: Force = False,
    as_json: JsonOpt = False,
) -> None:
    """Delete one message by its sequence."""
    cli = current(ctx)

    async def body(api: JetStreamApi) -> Json:
        await api.stream_info(name)
        prompts.confirm_or_force(force, f"Really delete message {seq} from stream {name}?")
        return await api.msg_delete(name, seq, erase)

    reply = cli.api(body)
    if cli.wants_json(as_json):
        output.emit_json(reply)
    else:
        output.note(f"Message {seq} was deleted from stream {name}")


@app.command("get")
def get(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Stream name.")],
    seq: Annotated[int | None, typer.Argument(help="Message sequence.")] = None,
    last_for: Annotated[
        str | None, typer.Option("--last-for", help="The last message on this subject.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one stored message, by sequence or the last one on a subject."""
    cli = current(ctx)
    if (seq is None) == (last_for is None):
        raise CliError("give either a sequence or --last-for SUBJECT")
    request: dict[str, Any] = {"seq": seq} if seq is not None else {"last_by_subj": last_for}
    reply = cli.api(lambda api: api.msg_get(name, request))
    message: Json = reply["message"]
    if cli.wants_json(as_json):
        output.emit_json(message)
        return
    messages.show_stored(name, message)


@app.command("cp")
@flag_group(StreamFlags)
def cp(
    ctx: typer.Context,
    source: Annotated[str, typer.Argument(help="Stream to copy the configuration from.")],
    destination: Annotated[str, typer.Argument(help="Name of the new stream.")],
    flags: StreamFlags = StreamFlags(),
    data: Annotated[
        bool, typer.Option("--data", help="Copy the messages too (through a stream source).")
    ] = False,
    follow: Annotated[
        bool, typer.Option("--follow", help="With --data: keep sourcing new messages.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Create DESTINATION with SOURCE's configuration, adjusted by flags.

    Without --data only the configuration is copied, and the copy needs its own --subjects
    (two streams cannot store the same subjects). With --data the server copies every message
    by sourcing SOURCE; the copy stores no subjects of its own unless --subjects is given.
    """
    cli = current(ctx)

    if follow and not data:
        raise CliError("--follow needs --data")
    wants_json = cli.wants_json(as_json)

    async def body(api: JetStreamApi) -> Json:
        live = dict((await api.stream_info(source))["config"])
        for owned in ("sealed", "template_owner", "metadata", "mirror", "sources"):
            live.pop(owned, None)  # server-owned or tied to the source stream
        config = merged(live, flags, destination)
        if not data:
            return await api.stream_create(config)
        own = flags.subjects is not None
        return await streamcopy.copy_stream(api, source, config, own, follow, not wants_json)

    info = cli.api(body)
    if not wants_json:
        copied = f" with {info['state'].get('messages', 0):,} messages" if data else ""
        output.note(f"Stream {destination} was created from {source}{copied}")
    show_stream(info, wants_json)
