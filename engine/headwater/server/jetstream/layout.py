"""Where JetStream keeps things on disk, and the per-stream ``meta.inf`` file.

The layout is nats-server's, so an operator finds the same tree::

    <store_dir>/jetstream/$G/streams/<stream>/meta.inf   stream config + creation time
    <store_dir>/jetstream/$G/streams/<stream>/msgs/      owned by the file store

``meta.inf`` holds the config's JSON with a leading ``Created`` key (nats-server's
``FileStreamInfo`` shape). It is replaced atomically (temp file, fsync, rename, fsync the
directory), so a crash leaves the old or the new config, never a torn one, and a copy is kept
as ``.meta.inf.bak``: a ``meta.inf`` found empty or torn anyway (a damaged disk) is read from
the copy, with a warning, rather than the stream being dropped. Memory streams are
not written: like nats-server, a restart forgets them.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import msgspec
import orjson

from headwater.server.store.atomic import (
    UnreadableFile,
    backup_path,
    fsync_dir,
    read_with_fallback,
    write_atomic,
)

from .streamconfig import StreamConfig, config_from_json, config_to_json
from .wire import dumps, rfc3339

T = TypeVar("T")

__all__ = [
    "META_FILE",
    "StoredStream",
    "default_store_dir",
    "jetstream_root",
    "load_streams",
    "parse_time",
    "remove_stream_dir",
    "stream_dir",
    "write_meta",
]

log = logging.getLogger("headwater.jetstream")

META_FILE = "meta.inf"
ACCOUNT = "$G"
"""The global account: Headwater has no multi-account JetStream yet, like a config-less
nats-server."""
RESTORE_STAGING = ".restore"
"""Under the JetStream root, beside ``$G``: restore uploads and staging stores (never scanned
for streams at start-up)."""


def default_store_dir() -> str:
    """nats-server's default when ``store_dir`` is not set: ``<tempdir>/nats``."""
    return os.path.join(tempfile.gettempdir(), "nats")


def jetstream_root(store_dir: str) -> Path:
    """``<store_dir>/jetstream``: the directory the start-up banner reports."""
    return Path(store_dir or default_store_dir()) / "jetstream"


def streams_dir(root: Path) -> Path:
    return root / ACCOUNT / "streams"


def stream_dir(root: Path, name: str) -> Path:
    return streams_dir(root) / name


def write_meta(directory: Path, cfg: StreamConfig, created_ns: int) -> None:
    """Create ``directory`` if needed and replace its ``meta.inf`` atomically."""
    fresh = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    if fresh:
        # The new directory entry itself must survive a crash, not only the file inside it.
        fsync_dir(directory.parent)
    body = {"Created": rfc3339(created_ns)} | config_to_json(cfg, dynamic_metadata=False)
    write_atomic(directory / META_FILE, dumps(body), backup="copy")


def remove_stream_dir(directory: Path) -> None:
    """Delete a stream's directory (after its store let go of ``msgs/``)."""
    if directory.exists():
        shutil.rmtree(directory, ignore_errors=True)
        try:
            fsync_dir(directory.parent)
        except OSError:
            log.debug("could not fsync %s", directory.parent)


def parse_time(text: str) -> int:
    """An RFC 3339 timestamp (as we and nats-server write them) in ns since the epoch."""
    text = text.strip()
    if not text or text.startswith("0001-01-01"):
        return 0
    if text.endswith("Z"):
        body, zone = text[:-1], "+00:00"
    else:
        body, zone = text[:-6], text[-6:]
    head, _, frac = body.partition(".")
    stamp = datetime.fromisoformat(head + zone)
    nanos = int((frac + "000000000")[:9]) if frac else 0
    return int(stamp.timestamp()) * 1_000_000_000 + nanos


@dataclass(frozen=True)
class StoredStream:
    """A stream found on disk at start-up."""

    config: StreamConfig
    created_ns: int
    directory: Path


def load_streams(root: Path) -> list[StoredStream]:
    """Every stream directory with a readable ``meta.inf``; unreadable ones are logged."""
    return [
        StoredStream(cfg, created, entry)
        for entry, (cfg, created) in load_metas(streams_dir(root), _parse_meta, "stream")
    ]


def load_metas(base: Path, parse: Callable[[bytes], T], what: str) -> list[tuple[Path, T]]:
    """``parse`` of the ``meta.inf`` of every directory under ``base``, with each directory.

    A ``meta.inf`` found empty or torn is read from its ``.bak`` copy, with a warning; one
    that neither copy can give is logged and left out (its directory stays for a human).
    """
    if not base.is_dir():
        return []
    found: list[tuple[Path, T]] = []
    for entry in sorted(base.iterdir()):
        meta = entry / META_FILE
        if not meta.is_file() and not backup_path(meta).is_file():
            continue
        try:
            recovered = read_with_fallback(meta, parse)
        except UnreadableFile as exc:
            log.error("Error recovering %s %r: %s", what, entry.name, exc)
            continue
        if recovered.skipped:
            log.warning(
                "%s %r: unreadable %s; recovered its config from %s",
                what,
                entry.name,
                "; ".join(recovered.skipped),
                recovered.path.name,
            )
        found.append((entry, recovered.value))
    return found


def _parse_meta(data: bytes) -> tuple[StreamConfig, int]:
    """A ``meta.inf``'s config and creation time; ValueError when it cannot be used."""
    try:
        body = orjson.loads(data)
        if not isinstance(body, dict):
            raise ValueError("stream config is not an object")
        created = parse_time(str(body.pop("Created", "")))
        return config_from_json(body), created
    except (TypeError, KeyError, msgspec.MsgspecError) as exc:
        raise ValueError(str(exc)) from exc
