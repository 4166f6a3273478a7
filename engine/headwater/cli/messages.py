"""Messages on the terminal and as JSON lines: stored ones (``stream get``) and live ones
(``sub``, ``consumer next|sub``, ``kv watch``)."""

from __future__ import annotations

import base64
from typing import Any

from nats.aio.msg import Msg
from rich.markup import escape

from headwater.cli import output
from headwater.cli.errors import CliError

STATUS = "Status"
"""nats-py's header for a status line (``NATS/1.0 100 Idle Heartbeat``)."""


def is_status(msg: Msg) -> bool:
    """Heartbeats and flow-control requests: server chatter, not messages."""
    return bool(msg.headers and STATUS in msg.headers) and not msg.data


def parse_header(values: list[str]) -> dict[str, str]:
    """``-H Key:Value`` flags as a header dict."""
    headers: dict[str, str] = {}
    for value in values:
        key, sep, item = value.partition(":")
        if not sep or not key.strip():
            raise CliError(f"invalid header {value!r}: use Key:Value")
        headers[key.strip()] = item.strip()
    return headers


def msg_json(msg: Msg, number: int) -> dict[str, Any]:
    """A received message as one JSON object; JetStream metadata when it came from a stream."""
    text, encoding = output.data_text(msg.data)
    record: dict[str, Any] = {"number": number, "subject": msg.subject, "data": text}
    if encoding != "utf-8":
        record["encoding"] = encoding
    if msg.reply:
        record["reply"] = msg.reply
    if msg.headers:
        record["headers"] = dict(msg.headers)
    if msg.reply and msg.reply.startswith("$JS.ACK."):
        meta = msg.metadata
        record["stream"] = meta.stream
        record["consumer"] = meta.consumer
        record["stream_seq"] = meta.sequence.stream
        record["consumer_seq"] = meta.sequence.consumer
        record["delivered"] = meta.num_delivered
        record["pending"] = meta.num_pending
    return record


def show_msg(msg: Msg, number: int, as_json: bool) -> None:
    if as_json:
        output.emit_json_line(msg_json(msg, number))
        return
    where = ""
    if msg.reply and msg.reply.startswith("$JS.ACK."):
        meta = msg.metadata
        where = f" (stream seq {meta.sequence.stream}, delivered {meta.num_delivered}x)"
    console = output.console()
    subject = escape(msg.subject)
    console.print(f"{escape(f'[#{number}]')} Received on [bold]{subject}[/bold]{where}")
    for key, value in (msg.headers or {}).items():
        console.print(f"{key}: {value}", markup=False)
    console.print(output.printable(msg.data), markup=False)
    console.file.flush()


def show_stored(stream: str, message: dict[str, Any]) -> None:
    """A ``STREAM.MSG.GET`` reply's message (base64 data, raw header block)."""
    data = base64.b64decode(message.get("data") or "")
    console = output.console()
    console.print(
        f"Item: {stream}#{message.get('seq')} received {message.get('time')}"
        f" on subject {message.get('subject')}",
        markup=False,
    )
    if message.get("hdrs"):
        block = base64.b64decode(message["hdrs"]).decode(errors="replace")
        lines = [line for line in block.split("\r\n")[1:] if line]
        console.print("Headers:", markup=False)
        for line in lines:
            console.print(f"  {line}", markup=False)
    console.print("", markup=False)
    console.print(output.printable(data), markup=False)
