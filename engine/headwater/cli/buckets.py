"""What the bucket commands (``kv``, ``obj``) share: the bucket name's check, opening a bucket,
the preamble of a command on one bucket, and following a bucket's watcher.

Each command then states only what is its own: its arguments' checks, its request, its output.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Protocol, TypeVar

import nats.errors
import nats.js.errors
import typer
from nats.aio.client import Client

from headwater.cli.context import CliContext, current
from headwater.cli.errors import CliError

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

Bucket = Annotated[str, typer.Argument(help="Bucket name.")]
JsonOpt = Annotated[bool, typer.Option("--json", "-j", help="Print JSON.")]

_BUCKET = re.compile(r"^[A-Za-z0-9_-]+$")


def checked_bucket(bucket: str) -> str:
    """Bucket names (ADR-8): letters, digits, ``-`` and ``_``; checked before any request."""
    if not _BUCKET.match(bucket):
        raise CliError(f"invalid bucket name {bucket!r}: use letters, digits, '-' and '_'")
    return bucket


async def opened_bucket(open_bucket: Callable[[str], Awaitable[T]], bucket: str) -> T:
    """``open_bucket(bucket)`` (nats-py's key_value or object_store), or a CliError when
    there is no such bucket."""
    checked_bucket(bucket)
    try:
        return await open_bucket(bucket)
    except nats.js.errors.BucketNotFoundError:
        raise CliError(f"bucket {bucket} not found") from None


@dataclass(frozen=True)
class BucketCommand:
    """One invocation of a command on one bucket."""

    cli: CliContext
    bucket: str
    json: bool
    """``--json`` was given, before the command or after it."""

    @property
    def timeout(self) -> float:
        return self.cli.timeout

    def run(self, body: Callable[[Client], Awaitable[T]]) -> T:
        """Connect, run ``body(nc)`` and close (:meth:`CliContext.run`)."""
        return self.cli.run(body)


def bucket_command(
    ctx: typer.Context, bucket: str, as_json: bool = False, *, check: bool = True
) -> BucketCommand:
    """The preamble of a command on ``bucket``. With ``check`` the name is checked now, before
    any prompt or connection; without it, only when the command opens the bucket."""
    if check:
        checked_bucket(bucket)
    cli = current(ctx)
    return BucketCommand(cli, bucket, cli.wants_json(as_json))


class Watcher(Protocol[T_co]):
    """nats-py's KeyValue and ObjectStore watchers: stored entries, None, then live ones."""

    async def updates(self, timeout: Any = ...) -> T_co | None: ...

    async def stop(self) -> None: ...


async def follow(
    watcher: Watcher[T], count: int, timeout: float | None, show: Callable[[T], None]
) -> int:
    """``show`` each update until ``count`` of them (0: no limit) or ``timeout`` seconds
    without one (None: no limit); stop the watcher and return how many were shown."""
    seen = 0
    try:
        while not count or seen < count:
            try:
                update = await watcher.updates(timeout=timeout)
            except nats.errors.TimeoutError:
                break
            if update is None:  # caught up with what is stored; live updates follow
                continue
            seen += 1
            show(update)
    finally:
        await watcher.stop()
    return seen


def require_count(seen: int, count: int, wait: str | None, what: str) -> None:
    """A watch that ended (``--wait`` passed) before its ``--count`` is an error."""
    if count and seen < count:
        raise CliError(f"received {seen} of {count} {what} before --wait {wait} passed")
