"""Handlers of the account and stream endpoints of ``$JS.API`` (see :data:`.api.ROUTES`).

Each handler takes a :class:`.api.Request` and returns the response body after ``type`` (or
raises ``ApiErrorException``). The order of checks inside each handler is nats-server's, since
a request that is wrong in two ways must get the same error: e.g. STREAM.DELETE refuses a
non-empty body (10038) before it looks the stream up (10059), and STREAM.PURGE reports a
sealed stream (10109) before ``deny_purge`` (10110).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import errors
from .accountinfo import account_info
from .api import Request, decode_request
from .direct import MSG_GET_REQUEST, msg_get
from .gojson import GoType
from .streamconfig_update import update_stream_request
from .streamconfig_validate import NO_LIMITS, create_stream_request
from .streaminfo import info_for_list, info_for_request, info_plain
from .subject_rules import subjects_collide
from .templates import check_not_template_owned
from .wire import is_empty_request

if TYPE_CHECKING:
    from .service import JetStreamService
    from .stream import Stream

__all__ = ["LIST_LIMIT", "NAMES_LIMIT", "StreamApi"]

NAMES_LIMIT = 1024
"""Stream names per STREAM.NAMES page (nats-server's ``JSApiNamesLimit``)."""
LIST_LIMIT = 256
"""Stream infos per STREAM.LIST page (nats-server's ``JSApiListLimit``)."""

_STR = GoType("string", "str")
_INT = GoType("int", "int")
_U64 = GoType("uint64", "int")
_BOOL = GoType("bool", "bool")
_INFO_REQUEST = GoType(
    "server.JSApiStreamInfoRequest",
    "struct",
    {"offset": _INT, "deleted_details": _BOOL, "subjects_filter": _STR},
)
_NAMES_REQUEST = GoType(
    "server.JSApiStreamNamesRequest", "struct", {"offset": _INT, "subject": _STR}
)
_PURGE_REQUEST = GoType(
    "server.JSApiStreamPurgeRequest", "struct", {"seq": _U64, "filter": _STR, "keep": _U64}
)
_DELETE_REQUEST = GoType("server.JSApiMsgDeleteRequest", "struct", {"seq": _U64, "no_erase": _BOOL})


def _stream_name(req: Request) -> str:
    return req.tokens[-1]


class StreamApi:
    """The handler object the router calls by name."""

    def __init__(self, service: JetStreamService) -> None:
        self.service = service

    def _lookup(self, name: str) -> Stream:
        stream = self.service.streams.get(name)
        if stream is None:
            raise errors.STREAM_NOT_FOUND.exc()
        return stream

    # --- account -------------------------------------------------------------------------

    async def account_info(self, req: Request) -> dict[str, Any]:
        svc = self.service
        return account_info(svc.streams.values(), svc.stats, svc.domain)

    async def cluster_required(self, req: Request) -> dict[str, Any]:
        raise errors.CLUSTER_REQUIRED.exc()

    # --- stream lifecycle ----------------------------------------------------------------

    async def stream_create(self, req: Request) -> dict[str, Any]:
        svc = self.service
        configs = [s.config for s in svc.streams.values()]
        outcome = create_stream_request(req.body, _stream_name(req), configs, NO_LIMITS)
        if outcome.existing:
            stream = svc.streams[outcome.config.name]
        else:
            check_not_template_owned(outcome.config)
            svc.resources.check_reservation(outcome.config, configs)
            stream = await svc.create_stream(outcome.config)
        return info_plain(stream) | {"did_create": True}

    async def stream_update(self, req: Request) -> dict[str, Any]:
        svc = self.service
        name = _stream_name(req)
        configs = {n: s.config for n, s in svc.streams.items()}
        cfg = update_stream_request(req.body, name, configs, NO_LIMITS)
        svc.resources.check_reservation(cfg, configs.values(), replacing=name)
        stream = await svc.update_stream(name, cfg)
        return info_plain(stream)

    async def stream_delete(self, req: Request) -> dict[str, Any]:
        if not is_empty_request(req.body):
            raise errors.NOT_EMPTY_REQUEST.exc()
        stream = self._lookup(_stream_name(req))
        await self.service.delete_stream(stream.name)
        return {"success": True}

    async def stream_purge(self, req: Request) -> dict[str, Any]:
        subject, seq, keep = "", 0, 0
        if not is_empty_request(req.body):
            fields = decode_request(req.body, _PURGE_REQUEST, "JSApiStreamPurgeRequest")
            subject = fields.get("filter", "")
            seq = fields.get("seq", 0)
            keep = fields.get("keep", 0)
            if seq > 0 and keep > 0:
                raise errors.BAD_REQUEST.exc()
        stream = self._lookup(_stream_name(req))
        cfg = stream.config
        if cfg.sealed:
            raise errors.STREAM_SEALED.exc()
        if cfg.deny_purge:
            raise errors.STREAM_PURGE_FAILED.exc(err="stream purge not permitted")
        purged = stream.purge(subject, seq, keep)
        return {"success": True, "purged": purged}

    # --- stream reports ------------------------------------------------------------------

    async def stream_info(self, req: Request) -> dict[str, Any]:
        details, subjects, offset = False, "", 0
        if not is_empty_request(req.body):
            fields = decode_request(req.body, _INFO_REQUEST, "JSApiStreamInfoRequest")
            details = fields.get("deleted_details", False)
            subjects = fields.get("subjects_filter", "")
            offset = max(fields.get("offset", 0), 0)
        stream = self._lookup(_stream_name(req))
        svc = self.service
        return info_for_request(
            stream,
            leader=svc.server_name,
            domain=svc.domain,
            deleted_details=details,
            subjects_filter=subjects,
            offset=offset,
        )

    def _filtered(self, req: Request, root: str) -> tuple[list[Stream], int]:
        offset, subject = 0, ""
        if not is_empty_request(req.body):
            fields = decode_request(req.body, _NAMES_REQUEST, root)
            offset = max(fields.get("offset", 0), 0)
            subject = fields.get("subject", "")
        streams = sorted(self.service.streams.values(), key=lambda s: s.name)
        if subject:
            streams = [
                s for s in streams if any(subjects_collide(subject, x) for x in s.config.subjects)
            ]
        return streams, min(offset, len(streams))

    async def stream_names(self, req: Request) -> dict[str, Any]:
        streams, offset = self._filtered(req, "JSApiStreamNamesRequest")
        page = [s.name for s in streams[offset : offset + NAMES_LIMIT]]
        return {
            "total": len(streams),
            "offset": offset,
            "limit": NAMES_LIMIT,
            "streams": page or None,
        }

    async def stream_list(self, req: Request) -> dict[str, Any]:
        streams, offset = self._filtered(req, "JSApiStreamListRequest")
        page = [info_for_list(s) for s in streams[offset : offset + LIST_LIMIT]]
        return {"total": len(streams), "offset": offset, "limit": LIST_LIMIT, "streams": page}

    # --- messages ------------------------------------------------------------------------

    async def msg_get(self, req: Request) -> dict[str, Any]:
        if is_empty_request(req.body):
            raise errors.BAD_REQUEST.exc()
        fields = decode_request(req.body, MSG_GET_REQUEST, "JSApiMsgGetRequest")
        stream = self._lookup(_stream_name(req))
        return msg_get(stream, fields)

    async def msg_delete(self, req: Request) -> dict[str, Any]:
        if is_empty_request(req.body):
            raise errors.BAD_REQUEST.exc()
        fields = decode_request(req.body, _DELETE_REQUEST, "JSApiMsgDeleteRequest")
        stream = self._lookup(_stream_name(req))
        cfg = stream.config
        if cfg.sealed:
            raise errors.STREAM_SEALED.exc()
        if cfg.deny_delete:
            raise errors.STREAM_MSG_DELETE_FAILED.exc(err="message delete not permitted")
        seq = fields.get("seq", 0)
        if seq > 0 and stream.store.remove_msg(seq, erase=not fields.get("no_erase", False)):
            return {"success": True}
        raise _delete_failure(stream, seq)


def _delete_failure(stream: Stream, seq: int) -> errors.ApiErrorException:
    """Why deleting ``seq`` failed, worded as nats-server's two stores word it.

    The memory store only knows "not there" (10043). The file store tells a sequence past the
    end (EOF) and one below its first message (not found) from a gap inside (10043).
    """
    if stream.config.storage == "file":
        state = stream.store.state()
        if seq > state.last_seq:
            return errors.STREAM_MSG_DELETE_FAILED.exc(err="stream store EOF")
        if seq < state.first_seq or not state.msgs:
            return errors.STREAM_MSG_DELETE_FAILED.exc(err="no message found")
    return errors.SEQUENCE_NOT_FOUND.exc(seq=seq)
