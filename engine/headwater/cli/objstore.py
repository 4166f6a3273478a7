"""``headwater obj``: object store buckets (ADR-20) through nats-py's ObjectStore client.

natscli's ``nats obj`` commands and flags: ``add``, ``ls``, ``put``, ``get``, ``del``/``rm``,
``info``, ``seal``, ``watch``. ``add``'s ``--metadata`` and ``--compress`` are not offered:
nats-py's ObjectStoreConfig has no field to carry them to the server. The bucket layout
(stream ``OBJ_<bucket>``, chunks on ``$O.<bucket>.C.<nuid>``, metadata on
``$O.<bucket>.M.<name>``) is nats-py's, so objects stored here read back in any NATS client.
Bucket-level ``--json`` output is the server's stream info, as ``kv add`` prints; object-level
output is the object's metadata record (``watch``: one per line).
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys
import time
from collections.abc import Iterable
from typing import Annotated, Any, BinaryIO

import nats.js.errors
import typer
from nats.aio.client import Client
from nats.js.api import ObjectInfo, ObjectMeta, ObjectStoreConfig, Placement, StorageType
from nats.js.object_store import ObjectStore

from headwater.cli import options, output, prompts
from headwater.cli.buckets import (
    Bucket,
    JsonOpt,
    bucket_command,
    checked_bucket,
    follow,
    opened_bucket,
    require_count,
)
from headwater.cli.context import current
from headwater.cli.errors import CliError
from headwater.cli.jsapi import JetStreamApi
from headwater.cli.options import Storage
from headwater.control.api import jetstream

app = typer.Typer(help="Object store buckets.", no_args_is_help=True)

OBJ_PREFIX = "OBJ_"

# Long only, as everywhere: -f is --file (docs/CLI.md).
Force = Annotated[bool, typer.Option("--force", help="Act without confirmation.")]
Names = Annotated[bool, typer.Option("--names", "-n", help="Only the names.")]

Json = dict[str, Any]


def stream_of(bucket: str) -> str:
    return OBJ_PREFIX + checked_bucket(bucket)


async def open_bucket(nc: Client, bucket: str) -> ObjectStore:
    return await opened_bucket(jetstream(nc).object_store, bucket)


async def object_info(store: ObjectStore, bucket: str, name: str) -> ObjectInfo:
    """The live (not deleted) object's metadata, or a CliError naming it."""
    try:
        return await store.get_info(name)
    except nats.js.errors.NotFoundError:  # ObjectNotFoundError is one
        raise CliError(f"object {name} not found in bucket {bucket}") from None


def object_json(info: ObjectInfo) -> Json:
    """The metadata record as stored (nats-py's names: ``mtime``, ``nuid``, ``digest``)."""
    return info.as_dict()


# --- human views ---------------------------------------------------------------------------
def _when(value: str | None) -> str:
    """A timestamp, or ``-`` for Go's zero time (objects put by nats.go store that)."""
    return value if value and not value.startswith("0001-") else "-"


def _digest(value: str | None) -> str:
    """``SHA-256=<base64url>`` as natscli shows it: the algorithm, then the hex digest."""
    if not value or "=" not in value:
        return "-"
    kind, _, encoded = value.partition("=")
    try:
        return f"{kind} {base64.urlsafe_b64decode(encoded).hex()}"
    except ValueError:
        return value


def show_object(info: ObjectInfo) -> None:
    rows: list[tuple[str, object]] = []
    if info.description:
        rows.append(("Description", info.description))
    rows += [
        ("Size", output.size(info.size or 0)),
        ("Modification Time", _when(info.mtime)),
        ("Chunks", f"{info.chunks or 0:,}"),
        ("Digest", _digest(info.digest)),
    ]
    if info.deleted:
        rows.append(("Deleted", "true"))
    for key, values in (info.headers or {}).items():
        for value in values if isinstance(values, list) else [values]:
            rows.append(("Header", f"{key}: {value}"))
    output.panel(f"Object information for {info.bucket} > {info.name}", [("Object", rows)])


def show_bucket(info: Json) -> None:
    cfg: Json = info.get("config", {})
    state: Json = info.get("state", {})
    bucket = str(cfg.get("name", "")).removeprefix(OBJ_PREFIX)
    created = info.get("created")
    title = f"Information for Object Store Bucket {bucket}"
    if created:
        title += f" created {created}"
    rows: list[tuple[str, object]] = [("Bucket Name", bucket)]
    if cfg.get("description"):
        rows.append(("Description", cfg["description"]))
    rows += [
        ("Replicas", cfg.get("num_replicas", 1)),
        ("TTL", output.duration(cfg.get("max_age"))),
        ("Sealed", "true" if cfg.get("sealed") else "false"),
        ("Size", output.size(state.get("bytes", 0))),
        ("Maximum Bucket Size", output.size(cfg.get("max_bytes"))),
        ("Storage", cfg.get("storage", "file")),
        ("Backing Store Kind", "JetStream"),
        ("JetStream Stream", cfg.get("name", "")),
    ]
    output.panel(title, [("Configuration", rows)])


def _emit_bucket(info: Json, as_json: bool) -> None:
    if as_json:
        output.emit_json(info)
    else:
        show_bucket(info)


# --- progress-reporting file wrappers -------------------------------------------------------
class _Reading:
    """A binary file for nats-py's ``put`` that advances a progress bar as chunks are read
    (nats-py reads it with ``readinto`` in a thread, off the event loop)."""

    def __init__(self, file: BinaryIO, advance: Any) -> None:
        self._file = file
        self._advance = advance

    def readinto(self, buffer: bytearray) -> int:
        count = self._file.readinto(buffer)  # type: ignore[attr-defined]
        self._advance(count or 0)
        return count or 0


class _Writing:
    """A binary file for nats-py's ``get``: counts what is written (nats-py writes in a
    thread), so the command can check the size against the object's."""

    def __init__(self, file: BinaryIO, advance: Any) -> None:
        self._file = file
        self._advance = advance
        self.written = 0

    def write(self, data: bytes) -> int:
        count = self._file.write(data)
        self.written += count
        self._advance(count)
        return count


# --- commands --------------------------------------------------------------------------------
@app.command("add")
def add(
    ctx: typer.Context,
    bucket: Bucket,
    ttl: Annotated[str | None, typer.Option("--ttl", help="How long to keep objects.")] = None,
    replicas: Annotated[int, typer.Option("--replicas", help="Number of replicas.")] = 1,
    max_bucket_size: Annotated[
        str | None, typer.Option("--max-bucket-size", help="Largest bucket.")
    ] = None,
    description: Annotated[str | None, typer.Option("--description")] = None,
    storage: Annotated[Storage, typer.Option("--storage", help="Storage backend.")] = Storage.file,
    tags: Annotated[
        list[str] | None,
        typer.Option("--tags", help="Place the bucket on servers with this tag (repeatable)."),
    ] = None,
    cluster: Annotated[
        str | None, typer.Option("--cluster", help="Place the bucket in this cluster.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a bucket."""
    cmd = bucket_command(ctx, bucket, as_json)
    if replicas < 1:
        raise CliError("invalid value for --replicas: at least 1")
    ttl_ns = options.duration("--ttl", ttl)
    config = ObjectStoreConfig(
        bucket=bucket,
        description=description,
        ttl=ttl_ns / 1e9 if ttl_ns else None,
        max_bytes=options.size("--max-bucket-size", max_bucket_size),
        storage=StorageType(storage.value),
        replicas=replicas,
        placement=Placement(cluster=cluster, tags=tags) if tags or cluster else None,
    )

    async def body(nc: Client) -> Json:
        await jetstream(nc).create_object_store(bucket, config)
        return await JetStreamApi(nc, cmd.timeout).stream_info(stream_of(bucket))

    info = cmd.run(body)
    if not cmd.json:
        output.note(f"Bucket {bucket} was created")
    _emit_bucket(info, cmd.json)


@app.command("put")
def put(
    ctx: typer.Context,
    bucket: Bucket,
    file: Annotated[
        str | None, typer.Argument(help="The file to put; stdin when left out (needs --name).")
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="Object name (default: FILE as given).")
    ] = None,
    description: Annotated[
        str | None, typer.Option("--description", help="A description for the object.")
    ] = None,
    header: Annotated[
        list[str] | None, typer.Option("--header", "-H", help="Header K:V (repeatable).")
    ] = None,
    force: Force = False,
    as_json: JsonOpt = False,
) -> None:
    """Store a file (or stdin) as an object; replacing one asks first."""
    cmd = bucket_command(ctx, bucket, as_json)
    # natscli's default name is the path as given, cleaned (``./a/../b`` is ``b``).
    object_name = name or (os.path.normpath(file) if file else None)
    if not object_name:
        raise CliError("--name is required when reading from stdin")
    if file is not None and not os.path.isfile(file):
        raise CliError(f"file {file} does not exist or is not a regular file")
    meta = ObjectMeta(
        name=object_name, description=description, headers=_headers(header or []) or None
    )

    async def body(nc: Client) -> ObjectInfo:
        store = await open_bucket(nc, bucket)
        try:
            existing = await store.get_info(object_name)
        except nats.js.errors.NotFoundError:
            existing = None
        if existing is not None:
            prompts.confirm_or_force(force, f"Replace existing file {bucket} > {object_name}?")
        if file is None:  # a binary stream: nats-py reads it in a thread, chunk by chunk
            return await store.put(object_name, sys.stdin.buffer, meta)  # type: ignore[arg-type]
        total = os.path.getsize(file)
        # nats-py reads the file in a thread (readinto), off the event loop.
        with (
            open(file, "rb") as source,
            output.progress(f"Putting {object_name}", total, not cmd.json) as bar,
        ):
            reader = _Reading(source, bar.advance)
            return await store.put(object_name, reader, meta)  # type: ignore[arg-type]

    info = cmd.run(body)
    if cmd.json:
        output.emit_json(object_json(info))
    else:
        show_object(info)


def _headers(values: Iterable[str]) -> dict[str, list[str]]:
    """``-H K:V`` flags as object headers (several values per key allowed)."""
    headers: dict[str, list[str]] = {}
    for value in values:
        key, sep, item = value.partition(":")
        if not sep or not key.strip():
            raise CliError(f"invalid header {value!r}: use K:V")
        headers.setdefault(key.strip(), []).append(item.strip())
    return headers


@app.command("get")
def get(
    ctx: typer.Context,
    bucket: Bucket,
    name: Annotated[str, typer.Argument(help="The object to retrieve.")],
    out: Annotated[
        str | None,
        typer.Option("--output", "-O", help="Output file (default: the object's base name)."),
    ] = None,
    force: Force = False,
    as_json: JsonOpt = False,
) -> None:
    """Write an object to a file; replacing an existing file asks first."""
    cmd = bucket_command(ctx, bucket, as_json)

    async def body(nc: Client) -> tuple[ObjectInfo, str, int, float]:
        store = await open_bucket(nc, bucket)
        info = await object_info(store, bucket, name)
        target = os.path.abspath(out or os.path.basename(info.name) or info.name)
        if os.path.exists(target):
            prompts.confirm_or_force(force, f"Replace existing target file {target}?")
        started = time.monotonic()
        # A partial file is worse than none: written next to the target, renamed when whole.
        partial = f"{target}.partial"
        try:
            # nats-py writes the chunks in a thread, off the event loop.
            with (
                open(partial, "wb") as sink,
                output.progress(f"Getting {name}", info.size, not cmd.json) as bar,
            ):
                writer = _Writing(sink, bar.advance)
                await store.get(name, writeinto=writer)  # type: ignore[arg-type]
            if writer.written != (info.size or 0):
                raise CliError(f"wrote {writer.written} bytes, expected {info.size}")
            await asyncio.to_thread(os.replace, partial, target)
        except nats.js.errors.NotFoundError:
            raise CliError(f"object {name} not found in bucket {bucket}") from None
        except nats.js.errors.DigestMismatchError:
            raise CliError(f"object {name}: the digest does not match its content") from None
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
        return info, target, writer.written, time.monotonic() - started

    info, target, written, elapsed = cmd.run(body)
    if cmd.json:
        output.emit_json({"bucket": bucket, "name": info.name, "file": target, "size": written})
    else:
        output.say(f"Wrote: {output.size(written)} to {target} in {elapsed:.2f}s")


@app.command("del")
def delete(
    ctx: typer.Context,
    bucket: Bucket,
    name: Annotated[
        str | None, typer.Argument(help="The object; without it, the whole bucket.")
    ] = None,
    force: Force = False,
    as_json: JsonOpt = False,
) -> None:
    """Delete an object, or the bucket and all its objects (``rm`` is the same command)."""
    cmd = bucket_command(ctx, bucket, as_json)

    async def body(nc: Client) -> Json:
        store = await open_bucket(nc, bucket)
        api = JetStreamApi(nc, cmd.timeout)
        if name is None:
            prompts.confirm_or_force(force, f"Delete bucket {bucket} and all its files?")
            return await api.stream_delete(stream_of(bucket))
        info = await object_info(store, bucket, name)
        question = f"Delete {output.size(info.size or 0)} file {bucket} > {name}?"
        prompts.confirm_or_force(force, question)
        await store.delete(name)
        return await api.stream_info(stream_of(bucket))

    reply = cmd.run(body)
    if name is None:
        if cmd.json:
            output.emit_json(reply)
        else:
            output.note(f"Bucket {bucket} was deleted")
        return
    if not cmd.json:
        output.note(f"Removed {bucket} > {name}")
    _emit_bucket(reply, cmd.json)


# natscli's ``rm`` is an alias of ``del``: ``rm BUCKET --force`` removes the bucket.
app.command("rm", help="Delete an object, or the bucket and all its objects (as del).")(delete)


@app.command("info")
def info(
    ctx: typer.Context,
    bucket: Bucket,
    name: Annotated[str | None, typer.Argument(help="An object in the bucket.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """A bucket's configuration and size, or an object's metadata."""
    cmd = bucket_command(ctx, bucket, as_json)

    async def body(nc: Client) -> Json | ObjectInfo:
        store = await open_bucket(nc, bucket)
        if name is None:
            return await JetStreamApi(nc, cmd.timeout).stream_info(stream_of(bucket))
        return await object_info(store, bucket, name)

    found = cmd.run(body)
    if isinstance(found, dict):
        _emit_bucket(found, cmd.json)
    elif cmd.json:
        output.emit_json(object_json(found))
    else:
        show_object(found)


@app.command("ls")
def ls(
    ctx: typer.Context,
    bucket: Annotated[str | None, typer.Argument(help="List this bucket's objects.")] = None,
    names: Names = False,
    as_json: JsonOpt = False,
) -> None:
    """List buckets, or the objects of one bucket."""
    if bucket is None:
        _list_buckets(ctx, names, current(ctx).wants_json(as_json))
        return
    cmd = bucket_command(ctx, bucket, as_json)

    async def body(nc: Client) -> list[ObjectInfo]:
        store = await open_bucket(nc, bucket)
        try:
            # The listing ends at the watcher's "caught up" marker; bound the wait for it.
            found = await asyncio.wait_for(store.list(ignore_deletes=True), cmd.timeout)
        except nats.js.errors.NotFoundError:
            return []
        except TimeoutError:
            raise CliError(f"listing bucket {bucket} took longer than {cmd.timeout:g}s") from None
        return sorted(found, key=lambda entry: entry.name)

    objects = cmd.run(body)
    if cmd.json:
        output.emit_json(
            [entry.name for entry in objects] if names else [object_json(o) for o in objects]
        )
    elif not objects:
        output.say("No entries found")
    elif names:
        for entry in objects:
            output.say(entry.name)
    else:
        rows = [(o.name, output.size(o.size or 0), _when(o.mtime)) for o in objects]
        output.table("Bucket Contents", ("Name", "Size", "Time"), rows)


def _list_buckets(ctx: typer.Context, names: bool, wants_json: bool) -> None:
    cli = current(ctx)

    async def body(nc: Client) -> list[Json]:
        infos = await JetStreamApi(nc, cli.timeout).stream_list()
        return [i for i in infos if str(i["config"]["name"]).startswith(OBJ_PREFIX)]

    # Smallest first, as natscli sorts them.
    infos = sorted(cli.run(body), key=lambda i: int(i.get("state", {}).get("bytes", 0)))
    buckets = [str(i["config"]["name"]).removeprefix(OBJ_PREFIX) for i in infos]
    if wants_json:
        output.emit_json(buckets if names else infos)
    elif not infos:
        output.say("No Object Store buckets found")
    elif names:
        for bucket in buckets:
            output.say(bucket)
    else:
        rows = [
            (
                bucket,
                i["config"].get("description") or "",
                _when(i.get("created")),
                output.size(i.get("state", {}).get("bytes", 0)),
                _when(i.get("state", {}).get("last_ts")),
            )
            for bucket, i in zip(buckets, infos, strict=True)
        ]
        columns = ("Bucket", "Description", "Created", "Size", "Last Update")
        output.table("Object Store Buckets", columns, rows)


@app.command("seal")
def seal(
    ctx: typer.Context, bucket: Bucket, force: Force = False, as_json: JsonOpt = False
) -> None:
    """Seal a bucket: no further changes, for good."""
    cmd = bucket_command(ctx, bucket, as_json)

    async def body(nc: Client) -> Json:
        await open_bucket(nc, bucket)
        question = f"Really seal bucket {bucket}? Sealed buckets can not be unsealed or modified."
        prompts.confirm_or_force(force, question)
        # The server's own config with one field changed: nats-py's seal() round-trips it
        # through a dataclass that drops the fields it does not know.
        api = JetStreamApi(nc, cmd.timeout)
        config = (await api.stream_info(stream_of(bucket)))["config"]
        return await api.stream_update({**config, "sealed": True})

    info = cmd.run(body)
    if not cmd.json:
        output.note(f"{bucket} has been sealed")
    _emit_bucket(info, cmd.json)


def show_change(info: ObjectInfo, as_json: bool) -> None:
    """One watched change: the metadata record (JSON line), or natscli's line."""
    if as_json:
        output.emit_json_line(object_json(info))
    elif info.deleted:
        output.say(f"[{_when(info.mtime)}] DEL {info.bucket} > {info.name}")
    else:
        output.say(
            f"[{_when(info.mtime)}] PUT {info.bucket} > {info.name}: "
            f"{output.size(info.size or 0)} in {info.chunks or 0:,} chunks"
        )


@app.command("watch")
def watch(
    ctx: typer.Context,
    bucket: Bucket,
    count: Annotated[int, typer.Option("--count", "-c", help="Exit after N changes.")] = 0,
    wait: Annotated[
        str | None, typer.Option("--wait", help="Exit after this long without a change.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the bucket's objects, then every put and delete, until --count, --wait or Ctrl-C.

    As natscli, the stored metadata records come first (deleted objects included), then the
    changes as they happen."""
    cmd = bucket_command(ctx, bucket, as_json)
    if count < 0:
        raise CliError("invalid value for --count: at least 0")
    idle = options.duration("--wait", wait)
    timeout = idle / 1e9 if idle else None

    async def body(nc: Client) -> int:
        watcher = await (await open_bucket(nc, bucket)).watch(include_history=True)
        return await follow(watcher, count, timeout, lambda info: show_change(info, cmd.json))

    require_count(cmd.run(body), count, wait, "changes")
