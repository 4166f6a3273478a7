"""``$JS.API.STREAM.RESTORE.<stream>``: rebuild a stream from an archive a client uploads.

The flow is nats-server's (``jsStreamRestoreRequest``):

1. the client sends ``{config, state}``; a name in use (or being restored) is refused with
   10130, a bad config with the same error STREAM.CREATE gives;
2. the reply names ``$JS.SNAPSHOT.RESTORE.<stream>.<id>``; a RESTORE_CREATE advisory goes out;
3. the client sends the archive there in chunks, each as a request: every chunk is spooled to
   a temporary file and acknowledged with an empty reply. No chunk for 5 s abandons the
   restore; so does a chunk without a reply subject;
4. an empty message ends the upload. The archive, Headwater's own or a nats-server 2.15
   snapshot (``NATSARC1`` in S2, whose stream config is the request's), is then read record
   by record (constant memory, every checksum checked) into a new store built aside: a
   file stream in a staging directory renamed into place only once complete, a memory
   stream in a store that is not registered yet. Only then does the stream appear, with its
   durable consumers and their state. The reply to the empty message is a STREAM.CREATE
   response (stream info, or the error: 10062 "restore failed: ..." for a bad archive);
   RESTORE_COMPLETE follows.

A bad archive leaves nothing behind: the staging directory or store and the spool file are
removed on every failure path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import msgspec
import orjson

from headwater.archive import (
    ArchivedConsumer,
    ArchivedMessage,
    ArchivedStream,
    ArchiveError,
    NatsArchiveReader,
    open_archive,
)
from headwater.server.budget import PassBudget
from headwater.server.consumers import config as consumer_config
from headwater.server.protocol import headers
from headwater.server.store import StoreConfig, StoreError, StreamStore, open_store

from . import errors, layout
from .advisories import publish_stream_event
from .api import Request, response_type
from .gojson import GoJSONError, loads
from .publish import MSG_TTL, SECOND, parse_ttl
from .stream import store_limits
from .streamconfig import StreamConfig, config_to_json
from .streamconfig_validate import create_stream_request
from .streaminfo import info_plain
from .templates import check_not_template_owned
from .wire import dumps, is_empty_request, rfc3339

if TYPE_CHECKING:
    from headwater.server.subscription import Subscription

    from .service import JetStreamService
    from .snapshot import SnapshotApi
    from .stream import Stream

__all__ = ["RESTORE_PREFIX", "RestoreSession", "start_restore"]

log = logging.getLogger("headwater.jetstream")

RESTORE_PREFIX = "$JS.SNAPSHOT.RESTORE"
INACTIVITY_TIMEOUT = 5.0
"""Seconds without a chunk before a restore is abandoned (nats-server's)."""
BATCH_RECORDS = 4096
BATCH_BYTES = 4 << 20
"""A batch of archive records decoded in the worker thread at a time."""


def next_batch(records: Iterator[object]) -> list[object]:
    """Up to :data:`BATCH_RECORDS` records or about :data:`BATCH_BYTES` of payload."""
    batch: list[object] = []
    size = 0
    for record in records:
        batch.append(record)
        if type(record) is ArchivedMessage:
            size += len(record.data) + len(record.hdr or b"")
        if len(batch) >= BATCH_RECORDS or size >= BATCH_BYTES:
            break
    return batch


class RestoreFailed(Exception):
    """The archive cannot become the stream; ``str()`` is the reason clients see."""


async def start_restore(api: SnapshotApi, req: Request) -> dict[str, Any]:
    """The RESTORE request: check it, then open the upload subject."""
    service = api.service
    name = req.tokens[-1]
    if is_empty_request(req.body):
        raise errors.BAD_REQUEST.exc()
    try:
        body = orjson.loads(req.body)
    except orjson.JSONDecodeError:
        try:
            loads(req.body.decode("utf-8", errors="replace"))
            message = "invalid request"
        except GoJSONError as exc:
            message = exc.message
        raise errors.INVALID_JSON.exc(err=message) from None
    config = body.get("config") if isinstance(body, dict) else None
    if not isinstance(config, dict):
        raise errors.BAD_REQUEST.exc()
    config = dict(config)
    config.setdefault("name", name)
    if config["name"] != name:
        raise errors.STREAM_MISMATCH.exc()
    if service.streams.holder(name) is not None:
        raise errors.STREAM_NAME_EXIST_RESTORE_FAILED.exc()
    configs = [s.config for s in service.streams.values()]
    outcome = create_stream_request(dumps(config), name, configs, service.stream_limits)
    check_not_template_owned(outcome.config)
    service.resources.check_reservation(outcome.config, configs)
    session = RestoreSession(api, outcome.config)
    session.start()
    return {"deliver_subject": session.subject}


class RestoreSession:
    """One upload: spool the chunks, then build the stream from them."""

    def __init__(self, api: SnapshotApi, config: StreamConfig) -> None:
        self.api = api
        self.service: JetStreamService = api.service
        self.config = config
        self.name = config.name
        token = secrets.token_hex(11)
        self.subject = f"{RESTORE_PREFIX}.{self.name}.{token}"
        self.staging = self.service.root / layout.RESTORE_STAGING / token
        self.spool_path = self.staging.with_suffix(".part")
        self._spool: BinaryIO | None = None
        self._sub: Subscription | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.received = 0
        self.began = time.time_ns()

    # ------------------------------------------------------------------ upload

    def start(self) -> None:
        client = self.service.client
        assert client is not None
        self.spool_path.parent.mkdir(parents=True, exist_ok=True)
        self._spool = open(self.spool_path, "wb")  # noqa: SIM115 - closed by _close_upload
        # Held from the first chunk to the end: no create, template or other restore may take
        # the name meanwhile (nothing awaited since the holder() check in start_restore).
        self.claim = self.service.streams.claim(self.name, "being restored")
        self._sub = client.subscribe(self.subject, self._on_chunk)
        self._arm()
        publish_stream_event(self.service.client, self.service.domain, "RESTORE_CREATE", self.name)
        log.info("Starting restore for stream '$G > %s'", self.name)

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(INACTIVITY_TIMEOUT, self._abandon, "timed out")

    def _on_chunk(
        self, sub: Subscription, subject: str, reply: str, hdr: bytes | None, payload: bytes
    ) -> None:
        if not reply:
            self._abandon("a chunk came without a reply subject")
            return
        client = self.service.client
        assert client is not None and self._spool is not None
        if payload:
            try:
                # Page-cache writes of one chunk; the fsync-free spool is read back at once.
                self._spool.write(payload)
            except OSError as exc:
                self._abandon(f"storage failure: {exc}")
                client.publish(reply, dumps(self._error(errors.STREAM_RESTORE, str(exc))))
                return
            self.received += len(payload)
            self._arm()
            client.publish(reply, b"")
            return
        self._close_upload()
        self.api.spawn(self._finish(reply))

    def _close_upload(self) -> None:
        client = self.service.client
        if self._sub is not None and client is not None:
            client.unsubscribe(self._sub)
            self._sub = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._spool is not None:
            self._spool.close()
            self._spool = None

    def _abandon(self, why: str) -> None:
        log.warning("Restore for stream '$G > %s' abandoned: %s", self.name, why)
        self._close_upload()
        self._cleanup()

    def _cleanup(self) -> None:
        self.claim.release()
        self.spool_path.unlink(missing_ok=True)
        shutil.rmtree(self.staging, ignore_errors=True)

    def _error(self, error: errors.ApiError, err: str) -> dict[str, Any]:
        return {
            "type": response_type("stream_create"),
            "error": error.format(err=err).to_dict(),
        }

    # ------------------------------------------------------------------ build

    async def _finish(self, reply: str) -> None:
        client = self.service.client
        assert client is not None
        try:
            stream = await self._build()
            body = {"type": response_type("stream_create"), **info_plain(stream)}
        except RestoreFailed as exc:
            log.warning("Restore for stream '$G > %s' failed: %s", self.name, exc)
            body = self._error(errors.STREAM_RESTORE, str(exc))
        except errors.ApiErrorException as exc:
            body = {"type": response_type("stream_create"), "error": exc.error.to_dict()}
        except Exception as exc:
            log.exception("Restore for stream '$G > %s' failed", self.name)
            body = self._error(errors.STREAM_RESTORE, str(exc))
        finally:
            self._cleanup()
        ended = time.time_ns()
        publish_stream_event(
            self.service.client,
            self.service.domain,
            "RESTORE_COMPLETE",
            self.name,
            start=rfc3339(self.began),
            end=rfc3339(ended),
            bytes=self.received,
        )
        client.publish(reply, dumps(body))

    async def _build(self) -> Stream:
        stream = await self._build_plain()
        clustered = self.service.clustered
        if self.config.num_replicas <= 1 or clustered is None:
            return stream
        # Replicas: the stream restored on this server becomes a replicated group from its
        # state (docs/REPLICATION.md, "Growing a stream of one replica"); the name is its.
        self.claim.release()
        try:
            return await clustered.replicate(stream, self.config)
        except errors.ApiErrorException:
            with contextlib.suppress(errors.ApiErrorException):
                await self.service.delete_stream(self.name, advise=False)
            raise

    async def _build_plain(self) -> Stream:
        """The stream on this server alone (a replicated one's config with one replica)."""
        cfg = msgspec.structs.replace(self.config, num_replicas=min(self.config.num_replicas, 1))
        file_backed = cfg.storage == "file"
        store = open_store(
            StoreConfig(
                name=cfg.name,
                storage=cfg.storage,
                directory=self.staging if file_backed else None,
                limits=store_limits(cfg),
                sync=self.service.sync,
                compression=cfg.compression,
                # A staging file store is reopened in place later, which counts its bytes
                # against the budget then; counting them now too would count them twice.
                budget=None if file_backed else self.service.resources.budget(cfg.storage),
            )
        )
        try:
            header, consumers = await self._load(store)
        except BaseException:
            store.delete()
            raise
        parsed = [(c, _consumer_cfg(c), _engine_state(c)) for c in consumers]
        service = self.service
        if file_backed:
            await store.aclose()
            await asyncio.to_thread(layout.write_meta, self.staging, cfg, header.created_ns)
        # The name is ours (self.claim) since the upload began.
        directory = None
        if file_backed:
            directory = layout.stream_dir(service.root, self.name)
            self._install(directory)
        stream = await service.open_claimed(
            cfg, header.created_ns, directory, self.claim, store=None if file_backed else store
        )
        for record, ccfg, state in parsed:
            await service.consumers.restore(stream, record.name, ccfg, record.created_ns, state)
        return stream

    def _install(self, final: Path) -> None:
        """Move the complete staging directory to the stream's place (a rename)."""
        if final.exists():
            # Left by a delete that crashed half-way, as STREAM.CREATE treats it.
            layout.remove_stream_dir(final)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self.staging, final)

    async def _load(self, store: StreamStore) -> tuple[ArchivedStream, list[ArchivedConsumer]]:
        """Store every message of the spooled archive (Headwater's own format or a nats-server
        2.15 ``NATSARC1`` snapshot) into ``store``; the stream record and the consumers."""
        header: ArchivedStream | None = None
        consumers: list[ArchivedConsumer] = []
        ttl_allowed = self.config.allow_msg_ttl
        what = "invalid archive"
        try:
            with open(self.spool_path, "rb") as fh:
                # A nats-server archive records no config: the request's is the stream's.
                reader = open_archive(
                    fh, self.name, config_to_json(self.config, dynamic_metadata=False)
                )
                if isinstance(reader, NatsArchiveReader):
                    what = "invalid nats-server archive"
                records = iter(reader)
                budget = PassBudget()
                # Decoding (S2 blocks of up to 4 MB, checksums) runs in a worker thread, a
                # batch at a time; storing runs here, yielding whenever a pass used its slice.
                while batch := await asyncio.to_thread(next_batch, records):
                    for record in batch:
                        if type(record) is ArchivedMessage:
                            ttl = _ttl_ns(record.hdr) if ttl_allowed and record.hdr else 0
                            store.store_raw_msg(
                                record.subject, record.hdr, record.data, record.seq, record.ts, ttl
                            )
                            await budget.tick()
                        elif type(record) is ArchivedConsumer:
                            consumers.append(record)
                        elif type(record) is ArchivedStream:
                            if record.name != self.name:
                                raise RestoreFailed(
                                    f"archive holds stream {record.name!r}, not {self.name!r}"
                                )
                            header = record
        except ArchiveError as exc:
            raise RestoreFailed(f"{what}: {exc}") from None
        except StoreError as exc:
            raise RestoreFailed(f"store failed: {exc}") from None
        except OSError as exc:
            raise RestoreFailed(str(exc)) from None
        assert header is not None  # both readers refuse an archive without its stream record
        # Sequences deleted after the last stored message, and a purged or never used stream's
        # floor (first_seq = last_seq + 1 with no message): the next publish gets last_seq + 1.
        last = int(header.state.get("last_seq", 0))
        current = store.state().last_seq
        if last > current:
            store.skip_msgs(current + 1, last - current, int(header.state.get("last_ts", 0)))
        return header, consumers


def _ttl_ns(hdr: bytes) -> int:
    """The per-message TTL to re-arm, from the stored ``Nats-TTL`` header."""
    seconds, ok = parse_ttl(headers.get(hdr, MSG_TTL))
    if not ok or seconds == 0:
        return 0
    return -1 if seconds < 0 else seconds * SECOND


def _consumer_cfg(record: ArchivedConsumer) -> Any:
    try:
        return consumer_config.from_stored(record.config)
    except Exception as exc:
        raise RestoreFailed(f"consumer {record.name!r} has an invalid config: {exc}") from None


def _engine_state(record: ArchivedConsumer) -> bytes:
    """The archive's consumer state in the consumer runtime's own state-file form."""
    st = record.state
    try:
        delivered = st.get("delivered") or {}
        floor = st.get("ack_floor") or {}
        return orjson.dumps(
            {
                "dseq": int(delivered.get("consumer_seq", 0)),
                "sseq": int(delivered.get("stream_seq", 0)) + 1,
                "adflr": int(floor.get("consumer_seq", 0)),
                "asflr": int(floor.get("stream_seq", 0)),
                "pending": [[int(s), int(c), int(t)] for s, c, t in st.get("pending") or []],
                "rdc": [[int(s), int(n)] for s, n in st.get("redelivered") or []],
                "lps": [int(s) for s in st.get("last_per_subject") or []],
                "lps_end": int(st.get("last_per_subject_end", 0)),
            }
        )
    except (TypeError, ValueError, AttributeError) as exc:
        raise RestoreFailed(f"consumer {record.name!r} has an invalid state: {exc}") from None
