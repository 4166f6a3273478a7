"""Handlers of the consumer endpoints of ``$JS.API`` (routes in :data:`..jetstream.api.ROUTES`).

``CONSUMER.MSG.NEXT`` is not here: like nats-server, each pull consumer subscribes its own
next-message subject (see :mod:`.manager`), since its answers are messages, not API replies.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import orjson

from headwater.server.jetstream import errors
from headwater.server.jetstream.api import Request
from headwater.server.jetstream.consumerconfig import ConsumerRequest, parse_consumer_request
from headwater.server.jetstream.consumerconfig_validate import (
    apply_consumer_defaults,
    refuse_unsupported,
    validate_consumer,
)
from headwater.server.jetstream.layout import parse_time
from headwater.server.jetstream.streamapi import step_down
from headwater.server.jetstream.wire import is_empty_request, rfc3339

from . import config as ccfg
from .consumer import Consumer
from .manager import ConsumerManager

if TYPE_CHECKING:
    from headwater.server.jetstream.service import JetStreamService
    from headwater.server.jetstream.stream import Stream

__all__ = ["ConsumerApi", "consumer_info"]

NAMES_LIMIT = 1024
LIST_LIMIT = 256

log = logging.getLogger("headwater.jetstream")

_STORE_FAILED = "error creating store for consumer"
#: Longest file name, in bytes, on the file systems nats-server's consumer directories live on.
_MAX_FILE_NAME = 255


def _file_backed(stream: Stream, cfg: Any) -> bool:
    """Whether nats-server would give this consumer a directory of its own.

    It stores every named consumer of a file stream, ephemerals too, unless ``mem_storage``.
    """
    return stream.config.storage == "file" and not cfg.mem_storage


def _storable_name(name: str) -> bool:
    """A name that can be a directory: nats-server answers 10012 for any other (no NUL byte,
    at most 255 UTF-8 bytes). Other control characters, DEL and non-ASCII are fine there."""
    return "\x00" not in name and len(name.encode("utf-8", "surrogatepass")) <= _MAX_FILE_NAME


def _seq_info(cseq: int, sseq: int, active: int) -> dict[str, Any]:
    out: dict[str, Any] = {"consumer_seq": cseq, "stream_seq": sseq}
    if active:
        out["last_active"] = rfc3339(active)
    return out


def consumer_info(c: Consumer, cluster: dict[str, Any] | None) -> dict[str, Any]:
    """ConsumerInfo as nats-server marshals it (zero ``last_active`` left out); ``cluster``
    is the block a clustered server adds (a single server's consumers have none)."""
    delivered_active = c.last_active if c.dseq else 0
    info: dict[str, Any] = {
        "stream_name": c.stream.name,
        "name": c.name,
        "created": rfc3339(c.created_ns),
        "config": ccfg.config_json(c.config),
        "delivered": _seq_info(c.dseq, c.delivered_stream_seq(), delivered_active),
        "ack_floor": _seq_info(c.adflr, c.asflr, c.last_ack),
        "num_ack_pending": len(c.pending),
        "num_redelivered": len(c.rdc),
        "num_waiting": len(c.waiting),
        "num_pending": c.num_pending(fresh=True),
    }
    if cluster:
        info["cluster"] = cluster
    if c.push is not None and c.push.has_interest():
        info["push_bound"] = True
    if c.paused_until and c.paused_until > time.time_ns():
        info["paused"] = True
        info["pause_remaining"] = c.paused_until - time.time_ns()
    info["ts"] = rfc3339(time.time_ns())
    return info


class ConsumerApi:
    """The consumer handler object; the router calls these by name."""

    def __init__(self, service: JetStreamService, manager: ConsumerManager) -> None:
        self.service = service
        self.manager = manager

    def _stream(self, name: str) -> Stream:
        stream = self.service.streams.get(name)
        if stream is None:
            raise errors.STREAM_NOT_FOUND.exc()
        return stream

    async def _read(self, name: str) -> Stream:
        """The stream whose consumers a read (info, names, list) reports: a replicated one's
        only past its read barrier (docs/REPLICATION.md, "Reads"), 10008 when this replica
        may not answer (its consumers run only where it leads, from its epoch's no-op on,
        and a leader cut off from the others would answer from a stale state)."""
        stream = self._stream(name)
        if stream.group is not None and not await stream.group.read_barrier():
            raise errors.CLUSTER_NOT_AVAIL.exc()
        return stream

    def _consumer(self, stream: Stream, name: str) -> Consumer:
        consumer = stream.consumers.get(name)
        if consumer is None:
            raise errors.CONSUMER_NOT_FOUND.exc()
        return consumer

    def _info(self, c: Consumer) -> dict[str, Any]:
        svc = self.service
        # In a cluster, nats-server names the cluster and the consumer's leader (for an R1
        # stream's consumer, the stream's server: this one).
        return consumer_info(c, svc.cluster_block(c.stream) if svc.cluster_name else None)

    # --- create --------------------------------------------------------------------------

    async def consumer_create(self, req: Request) -> dict[str, Any]:
        # CONSUMER.CREATE.<stream>[.<name>[.<filter tokens>...]]
        tokens = req.tokens
        name = tokens[3] if len(tokens) > 3 else None
        filter_subject = ".".join(tokens[4:]) if len(tokens) > 4 else None
        clustered = self.service.clustered is not None
        creq = parse_consumer_request(
            req.body, tokens[2], name, filter_subject, clustered=clustered
        )
        return await self._create(creq)

    async def consumer_durable_create(self, req: Request) -> dict[str, Any]:
        tokens = req.tokens
        clustered = self.service.clustered is not None
        creq = parse_consumer_request(
            req.body, tokens[3], tokens[4], None, legacy_durable=True, clustered=clustered
        )
        return await self._create(creq)

    async def _create(self, creq: ConsumerRequest) -> dict[str, Any]:
        stream = self._stream(creq.stream_name)
        cfg = apply_consumer_defaults(creq.config, stream.config, pedantic=creq.pedantic)
        name = cfg.name or cfg.durable_name
        existing = stream.consumers.get(name) if name else None
        others = [c.config for c in stream.consumers.values() if c is not existing]
        cfg = validate_consumer(
            cfg,
            stream.config,
            is_pull=not cfg.deliver_subject,
            existing=existing.config if existing is not None else None,
            action=creq.action,
            others=others,
        )
        refuse_unsupported(cfg)
        if existing is not None:
            if cfg is not existing.config:
                try:
                    await self.manager.update(existing, cfg)
                except (OSError, ValueError) as exc:
                    raise errors.CONSUMER_CREATE.exc(err=str(exc)) from None
            return self._info(existing)
        limit = stream.config.max_consumers
        if limit > 0 and len(stream.public_consumers()) >= limit:
            raise errors.MAXIMUM_CONSUMERS_LIMIT.exc()
        if not name:
            # An ephemeral's generated name is not written into its config (as nats-server).
            name = self.manager.new_name(stream)
        elif _file_backed(stream, cfg) and not _storable_name(name):
            raise errors.CONSUMER_CREATE.exc(err=_STORE_FAILED)
        try:
            consumer = await self.manager.create(stream, name, cfg)
        except (OSError, ValueError):
            log.exception("JetStream failed to create consumer %r on %r", name, stream.name)
            raise errors.CONSUMER_CREATE.exc(err=_STORE_FAILED) from None
        return self._info(consumer)

    # --- reports -------------------------------------------------------------------------

    async def consumer_info(self, req: Request) -> dict[str, Any]:
        if not is_empty_request(req.body):
            raise errors.NOT_EMPTY_REQUEST.exc()
        stream = await self._read(req.tokens[2])
        return self._info(self._consumer(stream, req.tokens[3]))

    async def consumer_delete(self, req: Request) -> dict[str, Any]:
        if not is_empty_request(req.body):
            raise errors.NOT_EMPTY_REQUEST.exc()
        stream = self._stream(req.tokens[2])
        consumer = self._consumer(stream, req.tokens[3])
        await self.manager.delete(consumer)
        return {"success": True}

    def _page(self, req: Request, stream: Stream) -> tuple[list[Consumer], int]:
        offset = 0
        if not is_empty_request(req.body):
            try:
                fields = orjson.loads(req.body)
            except orjson.JSONDecodeError as exc:
                raise errors.INVALID_JSON.exc(err=str(exc)) from None
            if isinstance(fields, dict) and isinstance(fields.get("offset"), int):
                offset = max(fields["offset"], 0)
        consumers = sorted(stream.public_consumers(), key=lambda c: c.name)
        return consumers, min(offset, len(consumers))

    async def consumer_names(self, req: Request) -> dict[str, Any]:
        stream = await self._read(req.tokens[2])
        consumers, offset = self._page(req, stream)
        page = [c.name for c in consumers[offset : offset + NAMES_LIMIT]]
        return {"total": len(consumers), "offset": offset, "limit": NAMES_LIMIT, "consumers": page}

    async def consumer_list(self, req: Request) -> dict[str, Any]:
        stream = await self._read(req.tokens[2])
        consumers, offset = self._page(req, stream)
        page = [self._info(c) for c in consumers[offset : offset + LIST_LIMIT]]
        return {
            "total": len(consumers),
            "offset": offset,
            "limit": LIST_LIMIT,
            "consumers": page,
        }

    async def consumer_leader_stepdown(self, req: Request) -> dict[str, Any]:
        """CONSUMER.LEADER.STEPDOWN: a replicated stream's consumers lead with the stream
        (:mod:`headwater.server.jetstream.groupconsumers`), so the stream's leadership moves,
        and the consumer's with it (docs/DIFFERENCES.md); a consumer of an R1 stream has
        nothing to hand over and, as on nats-server, succeeds."""
        if self.service.clustered is None:
            raise errors.CLUSTER_REQUIRED.exc()
        stream = self._stream(req.tokens[3])
        self._consumer(stream, req.tokens[4])
        return step_down(self.service, stream, req.body)

    async def consumer_pause(self, req: Request) -> dict[str, Any]:
        stream = self._stream(req.tokens[2])
        consumer = self._consumer(stream, req.tokens[3])
        until = 0
        given = False  # a non-zero time, which may be in the past (or the Unix epoch)
        raw: object = None
        if not is_empty_request(req.body):
            try:
                fields = orjson.loads(req.body)
            except orjson.JSONDecodeError as exc:
                raise errors.INVALID_JSON.exc(err=str(exc)) from None
            raw = fields.get("pause_until") if isinstance(fields, dict) else None
            if isinstance(raw, str) and raw and not raw.startswith("0001-01-01"):
                try:
                    until = parse_time(raw)
                except ValueError as exc:
                    raise errors.INVALID_JSON.exc(err=str(exc)) from None
                given = True
        now = time.time_ns()
        paused = until > now
        # The pause shows in the config (and survives a restart) as nats-server's does. Like
        # nats-server, a time already past is kept too (nats.js resumes with the Unix epoch);
        # only the zero time or no time clears it.
        shown = (rfc3339(until) if until else "1970-01-01T00:00:00Z") if given else None
        text = raw if paused and isinstance(raw, str) else shown
        await self.manager.update(consumer, ccfg.with_pause(consumer.config, text))
        consumer.set_pause(until if paused else 0)
        out: dict[str, Any] = {
            "paused": paused,
            "pause_until": shown if shown is not None else "0001-01-01T00:00:00Z",
        }
        if until > now:
            out["pause_remaining"] = until - now
        return out
