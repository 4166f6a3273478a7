"""``headwater kv``: key-value buckets (ADR-8) through nats-py's KeyValue client.

The bucket layout (stream ``KV_<bucket>``, subjects ``$KV.<bucket>.>``, rollups, direct get)
is nats-py's, so buckets made here work with every other NATS client.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import nats.errors
import nats.js.errors
import typer
from nats.aio.client import Client
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from headwater.cli import options, output, prompts, views
from headwater.cli.context import current
from headwater.cli.errors import CliError
from headwater.cli.jsapi import JetStreamApi
from headwater.cli.options import Storage
from headwater.control.api import jetstream

T = TypeVar("T")

app = typer.Typer(help="Key-value buckets.", no_args_is_help=True)

KV_PREFIX = "KV_"

Bucket = Annotated[str, typer.Argument(help="Bucket name.")]
Key = Annotated[str, typer.Argument(help="Key.")]
JsonOpt = Annotated[bool, typer.Option("--json", "-j", help="Print JSON.")]
# Long only, as in stream.py: -f is --file everywhere.
Force = Annotated[bool, typer.Option("--force", help="Do not ask for confirmation.")]


_BUCKET = re.compile(r"^[A-Za-z0-9_-]+$")
_KEY = re.compile(r"^[-/_=.A-Za-z0-9]+$")
_KEY_PATTERN = re.compile(r"^[-/_=.A-Za-z0-9*>]+$")


def checked_bucket(bucket: str) -> str:
    """Bucket names (ADR-8): letters, digits, ``-`` and ``_``; checked before any request."""
    if not _BUCKET.match(bucket):
        raise CliError(f"invalid bucket name {bucket!r}: use letters, digits, '-' and '_'")
    return bucket


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


async def opened_bucket(open_bucket: Callable[[str], Awaitable[T]], bucket: str) -> T:
    """``open_bucket(bucket)`` (nats-py's key_value or object_store), or a CliError when
    there is no such bucket."""
    checked_bucket(bucket)
    try:
        return await open_bucket(bucket)
    except nats.js.errors.BucketNotFoundError:
        raise CliError(f"bucket {bucket} not found") from None


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
    cli = current(ctx)
    checked_bucket(bucket)
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
        return await JetStreamApi(nc, cli.timeout).stream_info(KV_PREFIX + bucket)

    info = cli.run(body)
    if cli.wants_json(as_json):
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
    cli = current(ctx)
    checked_key(key)
    if value is None:
        piped = not sys.stdin.isatty()
        value = sys.stdin.read() if piped else prompts.require(None, "Value", "pass VALUE")
    data = value.encode()

    async def body(nc: Client) -> int:
        return await (await open_bucket(nc, bucket)).put(key, data)

    revision = cli.run(body)
    if cli.wants_json(as_json):
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
    cli = current(ctx)
    checked_key(key)

    async def body(nc: Client) -> KeyValue.Entry:
        kv = await open_bucket(nc, bucket)
        try:
            return await kv.get(key, revision=revision)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            at = f" at revision {revision}" if revision else ""
            raise CliError(f"key {key} not found in bucket {bucket}{at}") from None

    entry = cli.run(body)
    if raw:
        sys.stdout.buffer.write(entry.value or b"")
        sys.stdout.flush()
    elif cli.wants_json(as_json):
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
    cli = current(ctx)
    checked_key(key)

    async def body(nc: Client) -> None:
        kv = await open_bucket(nc, bucket)
        await (kv.purge(key) if purge else kv.delete(key))

    cli.run(body)
    output.note(f"Key {key} was {'purged' if purge else 'deleted'} from bucket {bucket}")


@app.command("history")
def history(ctx: typer.Context, bucket: Bucket, key: Key, as_json: JsonOpt = False) -> None:
    """Every kept revision of a key, oldest first."""
    cli = current(ctx)
    checked_key(key)
    wants_json = cli.wants_json(as_json)

    async def body(nc: Client) -> list[KeyValue.Entry]:
        kv = await open_bucket(nc, bucket)
        watcher = await kv.watch(key, include_history=True)
        entries: list[KeyValue.Entry] = []
        try:
            with output.progress(f"Reading history of {key}", None, not wants_json) as bar:
                # The watcher yields each stored revision, then None once it has caught up.
                while (entry := await watcher.updates(timeout=cli.timeout)) is not None:
                    entries.append(entry)
                    bar.advance()
        finally:
            await watcher.stop()
        return entries

    entries = cli.run(body)
    if not entries:
        raise CliError(f"key {key} not found in bucket {bucket}")
    if wants_json:
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
    cli = current(ctx)
    checked_key(key, pattern=True)
    idle = options.duration("--wait", wait)
    timeout = idle / 1e9 if idle else None
    wants_json = cli.wants_json(as_json)

    async def body(nc: Client) -> int:
        kv = await open_bucket(nc, bucket)
        watcher = await kv.watch(key)
        seen = 0
        try:
            while not count or seen < count:
                try:
                    entry = await watcher.updates(timeout=timeout)  # type: ignore[arg-type]
                except nats.errors.TimeoutError:
                    break
                if entry is None:  # caught up with stored values; live updates follow
                    continue
                seen += 1
                show_entry(entry, wants_json)
        finally:
            await watcher.stop()
        return seen

    seen = cli.run(body)
    if count and seen < count:
        raise CliError(f"received {seen} of {count} updates before --wait {wait} passed")


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
    cli = current(ctx)

    async def body(nc: Client) -> None:
        await open_bucket(nc, bucket)
        prompts.confirm_or_force(force, f"Really delete bucket {bucket} and all its keys?")
        await jetstream(nc).delete_key_value(bucket)

    cli.run(body)
    output.note(f"Bucket {bucket} was deleted")
