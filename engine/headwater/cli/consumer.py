"""``headwater consumer``: add, ls, report, info, edit, rm, next and sub, as ``nats consumer``."""

from __future__ import annotations

from typing import Annotated, Any

import nats.errors
import typer
from nats.aio.client import Client
from nats.aio.msg import Msg

from headwater.cli import configfile, messages, options, output, prompts, reports, views
from headwater.cli.consumerconfig import ADD_DEFAULTS, ConsumerFlags, merged
from headwater.cli.context import current
from headwater.cli.errors import CliError
from headwater.cli.flaggroup import flag_group
from headwater.cli.jsapi import JetStreamApi, Json
from headwater.cli.stream import ConfigFile, Force, JsonOpt, StreamArg, pick_stream
from headwater.control.api import jetstream

app = typer.Typer(help="Manage and read from consumers.", no_args_is_help=True)

ConsumerArg = Annotated[str | None, typer.Argument(help="Consumer name.", show_default=False)]
Count = Annotated[int, typer.Option("--count", "-c", help="Messages to receive, then exit.")]
NoAck = Annotated[bool, typer.Option("--no-ack", help="Do not acknowledge messages.")]


def show_consumer(info: Json, as_json: bool) -> None:
    if as_json:
        output.emit_json(info)
    else:
        views.consumer_info(info)


@app.command("add")
@flag_group(ConsumerFlags)
def add(
    ctx: typer.Context,
    stream: StreamArg = None,
    name: ConsumerArg = None,
    flags: ConsumerFlags = ConsumerFlags(),
    config: ConfigFile = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a durable consumer from flags, a --config file, or prompts on a terminal."""
    cli = current(ctx)
    from_file = configfile.load(config) if config else {}
    base = {**ADD_DEFAULTS, **from_file}

    async def body(api: JetStreamApi) -> Json:
        chosen = await pick_stream(api, stream)
        await api.stream_info(chosen)
        durable = prompts.require(
            name or from_file.get("durable_name") or from_file.get("name"),
            "Consumer name",
            "pass STREAM NAME",
        )
        return await api.consumer_create(chosen, merged(base, flags, durable), "create")

    info = cli.api(body)
    show_consumer(info, cli.wants_json(as_json))


@app.command("ls")
def ls(
    ctx: typer.Context,
    stream: StreamArg = None,
    names: Annotated[bool, typer.Option("--names", "-n", help="Only the names.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """List a stream's consumers."""
    cli = current(ctx)

    async def body(api: JetStreamApi) -> tuple[str, list[Any]]:
        chosen = await pick_stream(api, stream)
        if names:
            return chosen, await api.consumer_names(chosen)
        return chosen, await api.consumer_list(chosen)

    chosen, found = cli.api(body)
    if cli.wants_json(as_json):
        output.emit_json(found)
    elif names:
        for consumer in found:
            output.say(consumer)
    elif not found:
        output.say(f"No consumers defined on stream {chosen}")
    else:
        columns = ("Name", "Mode", "Filter", "Ack", "Unprocessed", "Ack Pending")
        output.table(f"Consumers of {chosen}", columns, views.consumer_rows(found))


@app.command("report")
def report(
    ctx: typer.Context,
    stream: StreamArg = None,
    raw: Annotated[bool, typer.Option("--raw", "-r", help="Numbers unformatted.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """A stream's consumers and their progress, as natscli's ``nats consumer report``."""
    cli = current(ctx)

    async def body(api: JetStreamApi) -> tuple[str, Json, list[Any]]:
        chosen = await pick_stream(api, stream)
        state = (await api.stream_info(chosen)).get("state") or {}
        return chosen, state, await api.consumer_list(chosen)

    chosen, state, found = cli.api(body)
    rows = [reports.consumer_row(info) for info in found]
    if cli.wants_json(as_json):
        output.emit_json({"stream": chosen, "consumers": rows})
        return
    messages = int(state.get("messages", 0))
    title = f"Consumer report for {chosen} with {output.count(len(rows))} consumers"
    cells = [reports.consumer_cells(row, messages, raw) for row in rows]
    output.table(title, reports.CONSUMER_COLUMNS, cells)


async def _pick(api: JetStreamApi, stream: str | None, name: str | None) -> tuple[str, str]:
    chosen = await pick_stream(api, stream)
    known = await api.consumer_names(chosen) if not name and prompts.stdin_is_tty() else []
    return chosen, prompts.require(name, "Consumer", "pass STREAM CONSUMER", choices=known)


@app.command("info")
def info(
    ctx: typer.Context, stream: StreamArg = None, name: ConsumerArg = None, as_json: JsonOpt = False
) -> None:
    """Show a consumer's configuration and state."""
    cli = current(ctx)

    async def body(api: JetStreamApi) -> Json:
        return await api.consumer_info(*await _pick(api, stream, name))

    show_consumer(cli.api(body), cli.wants_json(as_json))


@app.command("edit")
@flag_group(ConsumerFlags)
def edit(
    ctx: typer.Context,
    stream: Annotated[str, typer.Argument(help="Stream name.")],
    name: Annotated[str, typer.Argument(help="Consumer name.")],
    flags: ConsumerFlags = ConsumerFlags(),
    config: ConfigFile = None,
    as_json: JsonOpt = False,
) -> None:
    """Change a consumer: the live config, then the --config file, then flags on top.

    The server refuses changes it cannot make in place (deliver policy, ack policy, pull to
    push); the error says which.
    """
    cli = current(ctx)
    from_file = configfile.load(config) if config else {}

    async def body(api: JetStreamApi) -> Json:
        live = (await api.consumer_info(stream, name))["config"]
        wanted = merged({**live, **from_file}, flags, name)
        return await api.consumer_create(stream, wanted, "update")

    info = cli.api(body)
    if not cli.wants_json(as_json):
        output.note(f"Consumer {stream} > {name} was updated")
    show_consumer(info, cli.wants_json(as_json))


@app.command("rm")
def rm(
    ctx: typer.Context,
    stream: StreamArg = None,
    name: ConsumerArg = None,
    force: Force = False,
    as_json: JsonOpt = False,
) -> None:
    """Delete a consumer."""
    cli = current(ctx)

    async def body(api: JetStreamApi) -> tuple[str, str, Json]:
        chosen, consumer = await _pick(api, stream, name)
        await api.consumer_info(chosen, consumer)
        prompts.confirm_or_force(force, f"Really delete consumer {chosen} > {consumer}?")
        return chosen, consumer, await api.consumer_delete(chosen, consumer)

    chosen, consumer, reply = cli.api(body)
    if cli.wants_json(as_json):
        output.emit_json(reply)
    else:
        output.note(f"Consumer {chosen} > {consumer} was deleted")


async def _ack(msg: Msg, ack_policy: str, no_ack: bool) -> None:
    if not no_ack and ack_policy != "none" and msg.reply:
        await msg.ack()


async def _pull(
    nc: Client, info: Json, count: int, no_ack: bool, wait: float | None, as_json: bool
) -> int:
    """Fetch ``count`` messages; stop early after ``wait`` seconds without one (None: never)."""
    js = jetstream(nc)
    sub = await js.pull_subscribe_bind(info["name"], info["stream_name"])
    ack_policy = info["config"].get("ack_policy", "none")
    received = 0
    try:
        while received < count:
            try:
                batch = await sub.fetch(count - received, timeout=wait or 5.0)
            except nats.errors.TimeoutError:
                if wait:
                    break
                continue
            for msg in batch:
                received += 1
                messages.show_msg(msg, received, as_json)
                await _ack(msg, ack_policy, no_ack)
    finally:
        await sub.unsubscribe()
    return received


async def _push(
    nc: Client, info: Json, count: int, no_ack: bool, wait: float | None, as_json: bool
) -> int:
    """Read ``count`` messages from a push consumer's delivery subject."""
    cfg = info["config"]
    sub = await nc.subscribe(cfg["deliver_subject"], queue=cfg.get("deliver_group") or "")
    received = 0
    try:
        while received < count:
            try:
                msg = await sub.next_msg(timeout=wait)
            except nats.errors.TimeoutError:
                break
            if messages.is_status(msg):
                if msg.reply:  # a flow-control request: answering it lets delivery go on
                    await nc.publish(msg.reply, b"")
                continue
            received += 1
            messages.show_msg(msg, received, as_json)
            await _ack(msg, cfg.get("ack_policy", "none"), no_ack)
    finally:
        await sub.unsubscribe()
    return received


def _read(
    ctx: typer.Context,
    stream: str | None,
    name: str | None,
    count: int,
    no_ack: bool,
    wait: str,
    as_json: bool,
    pull_only: bool,
) -> None:
    cli = current(ctx)
    if count < 1:
        raise CliError("--count must be at least 1")
    timeout = options.duration("--wait", wait)
    seconds = (timeout or 0) / 1e9

    async def body(nc: Client) -> int:
        api = JetStreamApi(nc, cli.timeout)
        info = await api.consumer_info(*await _pick(api, stream, name))
        is_push = bool(info["config"].get("deliver_subject"))
        if is_push and pull_only:
            raise CliError(
                f"consumer {info['stream_name']} > {info['name']} is push-based; "
                "read it with `headwater consumer sub`"
            )
        read = _push if is_push else _pull
        received = await read(nc, info, count, no_ack, seconds or None, as_json)
        await nc.flush()  # acks are fire-and-forget; they must leave before we disconnect
        return received

    received = cli.run(body)
    if received < count:
        raise CliError(f"received {received} of {count} messages before --wait {wait} passed")


@app.command("next")
def next_(
    ctx: typer.Context,
    stream: StreamArg = None,
    name: ConsumerArg = None,
    count: Count = 1,
    no_ack: NoAck = False,
    wait: Annotated[str, typer.Option("--wait", help="How long to wait for messages.")] = "5s",
    as_json: JsonOpt = False,
) -> None:
    """Fetch and acknowledge the next message(s) of a pull consumer."""
    _read(ctx, stream, name, count, no_ack, wait, current(ctx).wants_json(as_json), True)


@app.command("sub")
def sub(
    ctx: typer.Context,
    stream: StreamArg = None,
    name: ConsumerArg = None,
    count: Count = 1,
    no_ack: NoAck = False,
    wait: Annotated[
        str, typer.Option("--wait", help="Give up after this long without a message (0: never).")
    ] = "0",
    as_json: JsonOpt = False,
) -> None:
    """Receive messages from a push or pull consumer until --count arrive."""
    _read(ctx, stream, name, count, no_ack, wait, current(ctx).wants_json(as_json), False)
