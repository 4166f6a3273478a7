"""``headwater pub``, ``sub`` and ``req``: core NATS messaging, and JetStream publish acks."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import nats.errors
import typer
from nats.aio.client import Client
from nats.aio.msg import Msg

from headwater.cli import messages, options, output
from headwater.cli.context import current
from headwater.cli.errors import ApiError, CliError

SubjectArg = Annotated[str, typer.Argument(help="Subject.")]
BodyArg = Annotated[
    str | None, typer.Argument(help="Message body; read from stdin when left out and piped.")
]
Headers = Annotated[
    list[str] | None, typer.Option("--header", "-H", help="A header as Key:Value (repeatable).")
]
JsonOpt = Annotated[bool, typer.Option("--json", "-j", help="Print JSON.")]


def _body(body: str | None) -> str:
    if body is not None:
        return body
    return "" if sys.stdin.isatty() else sys.stdin.read()


def _nth(template: str, number: int) -> bytes:
    """``{{Count}}`` in a body becomes the message's number, so ``--count`` sends distinct ones."""
    return template.replace("{{Count}}", str(number)).encode()


def pub(
    ctx: typer.Context,
    subject: SubjectArg,
    body: BodyArg = None,
    header: Headers = None,
    count: Annotated[int, typer.Option("--count", "-c", help="Publish this many times.")] = 1,
    reply: Annotated[str | None, typer.Option("--reply", help="Reply subject.")] = None,
    jetstream: Annotated[
        bool,
        typer.Option("--jetstream", "-J", help="Wait for the stream's ack and show it."),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Publish a message (``{{Count}}`` in BODY is replaced by the message number)."""
    cli = current(ctx)
    template = _body(body)
    headers = messages.parse_header(header or []) or None
    if count < 1:
        raise CliError("--count must be at least 1")

    async def run(nc: Client) -> list[dict[str, object]]:
        acks: list[dict[str, object]] = []
        for number in range(1, count + 1):
            data = _nth(template, number)
            if not jetstream:
                await nc.publish(subject, data, reply=reply or "", headers=headers)
                continue
            try:
                answer = await nc.request(subject, data, timeout=cli.timeout, headers=headers)
            except nats.errors.NoRespondersError:
                raise CliError(f"no stream stores subject {subject}") from None
            ack = json.loads(answer.data)
            if isinstance(ack.get("error"), dict):
                raise ApiError.from_reply(ack["error"], f"publish to {subject}")
            acks.append(ack)
        await nc.flush()
        return acks

    acks = cli.run(run)
    wants_json = cli.wants_json(as_json)
    for ack in acks:
        if wants_json:
            output.emit_json_line(ack)
        else:
            duplicate = " (duplicate)" if ack.get("duplicate") else ""
            where = f"stream {ack.get('stream')} as sequence {ack.get('seq')}"
            output.say(f"Stored in {where}{duplicate}")
    if not jetstream and not wants_json:
        output.note(f"Published {count} message(s) to {subject}")


def sub(
    ctx: typer.Context,
    subject: SubjectArg,
    count: Annotated[int, typer.Option("--count", "-c", help="Exit after N messages.")] = 0,
    queue: Annotated[str | None, typer.Option("--queue", help="Queue group.")] = None,
    wait: Annotated[
        str | None, typer.Option("--wait", help="Exit after this long without a message.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Subscribe and print messages (JSON lines with --json) until --count or Ctrl-C."""
    cli = current(ctx)
    idle = options.duration("--wait", wait)
    timeout = idle / 1e9 if idle else None
    wants_json = cli.wants_json(as_json)

    async def run(nc: Client) -> int:
        subscription = await nc.subscribe(subject, queue=queue or "")
        await nc.flush()  # the server knows the interest before we say we are listening
        output.note(f"Listening on {subject}")
        received = 0
        while not count or received < count:
            try:
                msg = await subscription.next_msg(timeout=timeout)
            except nats.errors.TimeoutError:
                break
            received += 1
            messages.show_msg(msg, received, wants_json)
        return received

    received = cli.run(run)
    if count and received < count:
        raise CliError(f"received {received} of {count} messages before --wait {wait} passed")


def req(
    ctx: typer.Context,
    subject: SubjectArg,
    body: BodyArg = None,
    header: Headers = None,
    as_json: JsonOpt = False,
) -> None:
    """Send a request and print the reply (waits up to --timeout)."""
    cli = current(ctx)
    data = _body(body).encode()
    headers = messages.parse_header(header or []) or None

    async def run(nc: Client) -> Msg:
        try:
            return await nc.request(subject, data, timeout=cli.timeout, headers=headers)
        except nats.errors.NoRespondersError:
            raise CliError(f"no responders on {subject}") from None
        except nats.errors.TimeoutError:
            raise CliError(f"no reply on {subject} within {cli.timeout:g}s") from None

    reply = cli.run(run)
    messages.show_msg(reply, 1, cli.wants_json(as_json))


def register(root: typer.Typer) -> None:
    root.command("pub")(pub)
    root.command("sub")(sub)
    root.command("req")(req)
