"""``headwater kv``: key-value buckets (ADR-8) through nats-py's KeyValue client.

The bucket layout (stream ``KV_<bucket>``, subjects ``$KV.<bucket>.>``, rollups, direct get)
is nats-py's, so buckets made here work with every other NATS client.
"""

from __future__ import annotations

import re
import sys
from typing import Annotated, Any

import nats.js.errors
import typer
from nats.aio.client import Client
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from headwater.cli import options, output, prompts, views
from headwater.cli.buckets import (
    Bucket,
    BucketCommand,
    JsonOpt,
    bucket_command,
    follow,
    opened_bucket,
    require_count,
)
from headwater.cli.context import current
from headwater.cli.errors import CliError
from headwater.cli.jsapi import JetStreamApi
from headwater.cli.options import Storage
from headwater.control.api import jetstream

app = typer.Typer(help="Key-value buckets.", no_args_is_help=True)

KV_PREFIX = "KV_"

Key = Annotated[str, typer.Argument(help="Key.")]
# Long only, as in stream.py: -f is --file everywhere.
Force = Annotated[bool, typer.Option("--force", help="Do not ask for confirmation.")]


_KEY = re.compile(r"^[-/_=.A-Za-z0-9]+$")
_KEY_PATTERN = re.compile(r"^[-/_=.A-Za-z0-9*>]+$")


def checked_key(key: str, pattern: bool = False) -> str:
    """Keys (ADR-6): letters, digits and ``- / _ = .``, not starting or ending with ``.``;
    watch patterns may also use ``*`` and ``>``."""
    allowed = _KEY_PATTERN if pattern else _KEY
    if not allowed.match(key) or key.startswith(".") or key.endswith("."):
        extra = ", '*' and '>'" if pattern else ""
        raise CliError(
            f"invalid key {key!r}: use letters, digits, '-', '/', '_', '=' and '.'{extra}"
        )
    return key


def key_command(
    ctx: typer.Context, bucket: str, key: str, as_json: bool = False, pattern: bool = False
) -> BucketCommand:
    """The preamble of a command on keys: the key (a watch pattern with ``pattern``) is
    checked now, the bucket's name when the command opens the bucket."""
    checked_key(key, pattern)
    return bucket_command(ctx, bucket, as_json, check=False)


async def open_bucket(nc: Client, bucket: str) -> KeyValue:
    return await opened_bucket(jetstream(nc).key_value, bucket)


def entry_json(entry: KeyValue.Entry) -> dict[str, Any]:
    text, encoding = output.data_text(entry.value or b"")
    record: dict[str, Any] = {
        "bucket": entry.bucket,
        "key": entry.key,
        "revision": entry.revision,
        "operation": entry.operation or "PUT",
        "value": text,
    }
    if encoding != "utf-8":
        record["encoding"] = encoding
    if entry.delta is not None:
        record["delta"] = entry.delta
    return record


def show_entry(entry: KeyValue.Entry, as_json: bool) -> None:
    if as_json:
        output.emit_json_line(entry_json(entry))
        return
    operation = entry.operation or "PUT"
    value = "" if operation != "PUT" else output.printable(entry.value or b"")
    output.say(f"[{entry.bucket}] {operation} {entry.key} (revision {entry.revision}): {value}")


@app.command("add")
def add(
    ctx: typer.Context,
    bucket: Bucket,
    history: Annotated[int, typer.Option("--history", help="Values kept per key (1-64).")] = 1,
    ttl: Annotated[str | None, typer.Option("--ttl", help="How long values live.")] = None,
    max_value_size: Annotated[
        str | None, typer.Option("--max-value-size", help="Largest value.")
    ] = None,
    max_bucket_size: Annotated[
        str | None, typer.Option("--max-bucket-size", help="Largest bucket.")
    ] = None,
    storage: Annotated[Storage, typer.Option("--storage", help="Storage backend.")] = Storage.file,
    replicas: Annotated[int, typer.Option("--replicas", help="Number of replicas.")] = 1,
    description: Annotated[str | None, typer.Option("--description")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a bucket."""
    cmd = bucket_command(ctx, bucket, as_json)
    if not 1 <= history <= 64:
        raise CliError("invalid value for --history: between 1 and 64")
    ttl_ns = options.duration("--ttl", ttl)
    config = KeyValueConfig(
        bucket=bucket,
        description=description,
        history=history,
        ttl=ttl_ns / 1e9 if ttl_ns else None,
        max_value_size=options.size("--max-value-size", max_value_size),
        max_bytes=options.size("--max-bucket-size", max_bucket_size),
        storage=StorageType(storage.value),
        replicas=replicas,
    )

    async def body(nc: Client) -> dict[str, Any]:
        await jetstream(nc).create_key_value(config)
        return await JetStreamApi(nc, cmd.timeout).stream_info(KV_PREFIX + bucket)

    info = cmd.run(body)
    if cmd.json:
        output.emit_json(info)
        return
    output.note(f"Bucket {bucket} was created")
    views.stream_info(info)


@app.command("put")
def put(
    ctx: typer.Context,
    bucket: Bucket,
    key: Key,
    value: Annotated[
        str | None, typer.Argument(help="Value; read from stdin when left out.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Store a value."""
    cmd = key_command(ctx, bucket, key, as_json)
    if value is None:
        piped = not sys.stdin.isatty()
        value = sys.stdin.read() if piped else prompts.require(None, "Value", "pass VALUE")
    data = value.encode()

    async def body(nc: Client) -> int:
        return await (await open_bucket(nc, bucket)).put(key, data)

    revision = cmd.run(body)
    if cmd.json:
        output.emit_json({"bucket": bucket, "key": key, "revision": revision})
    else:
        output.say(f"{key} = revision {revision}")


@app.command("get")
def get(
    ctx: typer.Context,
    bucket: Bucket,
    key: Key,
    revision: Annotated[int | None, typer.Option("--revision", help="An older revision.")] = None,
    raw: Annotated[bool, typer.Option("--raw", help="Only the value's bytes.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Show a key's value."""
    cmd = key_command(ctx, bucket, key, as_json)

    async def body(nc: Client) -> KeyValue.Entry:
        kv = await open_bucket(nc, bucket)
        try:
            return await kv.get(key, revision=revision)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            at = f" at revision {revision}" if revision else ""
            raise CliError(f"key {key} not found in bucket {bucket}{at}") from None

    entry = cmd.run(body)
    if raw:
        sys.stdout.buffer.write(entry.value or b"")
        sys.stdout.flush()
    elif cmd.json:
        output.emit_json(entry_json(entry))
    else:
        output.say(f"{bucket} > {key} revision {entry.revision}")
        output.say(output.printable(entry.value or b""))


@app.command("del")
def delete(
    ctx: typer.Context,
    bucket: Bucket,
    key: Key,
    purge: Annotated[bool, typer.Option("--purge", help="Also drop the key's history.")] = False,
) -> None:
    """Delete a key (a delete marker; --purge drops its history too)."""
    cmd = key_command(ctx, bucket, key)

    async def body(nc: Client) -> None:
        kv = await open_bucket(nc, bucket)
        await (kv.purge(key) if purge else kv.delete(key))

    cmd.run(body)
    output.note(f"Key {key} was {'purged' if purge else 'deleted'} from bucket {bucket}")


@app.command("history")
def history(ctx: typer.Context, bucket: Bucket, key: Key, as_json: JsonOpt = False) -> None:
    """Every kept revision of a key, oldest first."""
    cmd = key_command(ctx, bucket, key, as_json)

    async def body(nc: Client) -> list[KeyValue.Entry]:
        kv = await open_bucket(nc, bucket)
        watcher = await kv.watch(key, include_history=True)
        entries: list[KeyValue.Entry] = []
        try:
            with output.progress(f"Reading history of {key}", None, not cmd.json) as bar:
                # The watcher yields each stored revision, then None once it has caught up.
                while (entry := await watcher.updates(timeout=cmd.timeout)) is not None:
                    entries.append(entry)
                    bar.advance()
        finally:
            await watcher.stop()
        return entries

    entries = cmd.run(body)
    if not entries:
        raise CliError(f"key {key} not found in bucket {bucket}")
    if cmd.json:
        output.emit_json([entry_json(entry) for entry in entries])
        return
    rows = [
        (entry.revision, entry.operation or "PUT", output.printable(entry.value or b""))
        for entry in entries
    ]
    output.table(f"History of {bucket} > {key}", ("Revision", "Op", "Value"), rows)


@app.command("watch")
def watch(
    ctx: typer.Context,
    bucket: Bucket,
    key: Annotated[str, typer.Argument(help="Key or wildcard.")] = ">",
    count: Annotated[int, typer.Option("--count", "-c", help="Exit after N updates.")] = 0,
    wait: Annotated[
        str | None, typer.Option("--wait", help="Exit after this long without an update.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the latest value of each key, then every change, until --count or Ctrl-C."""
    cmd = key_command(ctx, bucket, key, as_json, pattern=True)
    idle = options.duration("--wait", wait)
    timeout = idle / 1e9 if idle else None

    async def body(nc: Client) -> int:
        watcher = await (await open_bucket(nc, bucket)).watch(key)
        return await follow(watcher, count, timeout, lambda entry: show_entry(entry, cmd.json))

    require_count(cmd.run(body), count, wait, "updates")


@app.command("ls")
def ls(
    ctx: typer.Context,
    bucket: Annotated[str | None, typer.Argument(help="List this bucket's keys.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """List buckets, or the keys of one bucket."""
    cli = current(ctx)

    async def body(nc: Client) -> list[str]:
        if bucket is None:
            names = await JetStreamApi(nc, cli.timeout).stream_names()
            return [name[len(KV_PREFIX) :] for name in names if name.startswith(KV_PREFIX)]
        kv = await open_bucket(nc, bucket)
        try:
            return sorted(await kv.keys())
        except nats.js.errors.NoKeysError:
            return []

    found = cli.run(body)
    if cli.wants_json(as_json):
        output.emit_json(found)
    elif not found:
        output.say("No buckets defined" if bucket is None else f"Bucket {bucket} has no keys")
    else:
        for name in found:
            output.say(name)


@app.command("rm")
def rm(ctx: typer.Context, bucket: Bucket, force: Force = False) -> None:
    """Delete a bucket and all its keys."""
    cmd = bucket_command(ctx, bucket, check=False)

    async def body(nc: Client) -> None:
        await open_bucket(nc, bucket)
        prompts.confirm_or_force(force, f"Really delete bucket {bucket} and all its keys?")
        await jetstream(nc).delete_key_value(bucket)

    cmd.run(body)
    output.note(f"Bucket {bucket} was deleted")
