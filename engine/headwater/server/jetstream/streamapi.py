"""Handlers of the account and stream endpoints of ``$JS.API`` (see :data:`.api.ROUTES`).

Each handler takes a :class:`.api.Request` and returns the response body after ``type`` (or
raises ``ApiErrorException``). The order of checks inside each handler is nats-server's, since
a request that is wrong in two ways must get the same error: e.g. STREAM.DELETE refuses a
non-empty body (10038) before it looks the stream up (10059), and STREAM.PURGE reports a
sealed stream (10109) before ``deny_purge`` (10110).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
import orjson

from headwater.server.replicated.runner import LOST_QUORUM_MS
from headwater.server.store.base import StoreError

from . import errors, groupops
from .accountinfo import account_info
from .api import Request, decode_request
from .direct import MSG_GET_REQUEST, msg_get
from .gojson import GoType
from .streamconfig import StreamConfig
from .streamconfig_update import update_stream_request
from .streamconfig_validate import (
    REPLICATED_TEMPLATES_NOT_YET,
    create_stream_request,
)
from .streaminfo import info_for_list, info_for_request, info_plain
from .subject_rules import subjects_collide
from .templates import check_not_template_owned
from .wire import is_empty_request

if TYPE_CHECKING:
    from .clustered import ClusteredJetStream
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
_PEER_REMOVE_REQUEST = GoType("server.JSApiStreamRemovePeerRequest", "struct", {"peer": _STR})
_STEPDOWN_REQUEST = GoType(
    "server.JSApiLeaderStepdownRequest",
    "struct",
    {
        "placement": GoType(
            "server.Placement",
            "struct",
            {"cluster": _STR, "tags": GoType("[]string", "strs"), "preferred": _STR},
            pointer=True,
        )
    },
)
NO_REPLACEMENT = "no replacement peer connected"


OFF_LOOP_BYTES = 16 * 1024
"""Stream configs in larger requests are validated in a worker thread. Thousands of subjects
take a quarter of a second of checks (every subject's syntax, overlaps among them and with
every other stream); on the loop that would stall every client. Below this size the checks
take well under a millisecond and the thread hop would cost more."""

_T = TypeVar("_T")


def _stream_name(req: Request) -> str:
    return req.tokens[-1]


_PLACEMENT_FIELDS = frozenset({"cluster", "tags", "preferred"})


def _check_known_fields(body: bytes) -> None:
    """nats-server decodes a step-down request strictly: 10025 for a field it does not know
    (Go matches field names case-insensitively)."""
    value = orjson.loads(body)
    if not isinstance(value, dict):
        return
    for key, inner in value.items():
        if key.lower() != "placement":
            raise errors.INVALID_JSON.exc(err=f'json: unknown field "{key}"')
        for field_name in inner if isinstance(inner, dict) else ():
            if field_name.lower() not in _PLACEMENT_FIELDS:
                raise errors.INVALID_JSON.exc(err=f'json: unknown field "{field_name}"')


def step_down(service: JetStreamService, stream: Stream, body: bytes) -> dict[str, Any]:
    """Hand ``stream``'s leadership (here, where it leads) to an in-sync replica, the one the
    request's ``placement`` names or allows: STREAM.LEADER.STEPDOWN, and CONSUMER.LEADER.
    STEPDOWN for its consumers, which lead with it. An R1 stream has nothing to hand over
    and, as on nats-server, succeeds. Answered once the transfer is under way, as
    nats-server answers once its Raft node stepped down."""
    clustered = service.clustered
    assert clustered is not None
    placement: dict[str, Any] | None = None
    if not is_empty_request(body):
        decoded = decode_request(body, _STEPDOWN_REQUEST, "server.JSApiLeaderStepdownRequest")
        _check_known_fields(body)
        placement = decoded.get("placement")
    group = stream.group
    if group is None:
        return {"success": True}
    runner = group.runner
    record = runner.record
    if not runner.is_leader or record is None:
        raise errors.CLUSTER_NOT_AVAIL.exc()  # sent here, but this replica lost the lead
    if not runner.replica.quorum_heard(LOST_QUORUM_MS):
        raise errors.CLUSTER_NOT_AVAIL.exc()  # no replica to hand it to is reachable
    preferred = _stepdown_target(placement, record.peers, runner.name, clustered)
    group.step_down(preferred)
    return {"success": True}


def _stepdown_target(
    placement: dict[str, Any] | None,
    peers: tuple[str, ...],
    leader: str,
    clustered: ClusteredJetStream,
) -> str | None:
    """The replica a step-down should hand over to, as ``placement`` says (None: the core
    picks the most caught up in-sync one); 10005 with nats-server's texts when none fits."""
    if not placement:
        return None
    preferred = placement.get("preferred") or ""
    if preferred:
        if preferred not in clustered.peers and preferred not in peers:
            raise errors.CLUSTER_NO_PEERS.exc(err=f'preferred server "{preferred}" not known')
        if preferred == leader:
            raise errors.CLUSTER_NO_PEERS.exc(
                err=f'preferred server "{preferred}" is already leader'
            )
    cluster = placement.get("cluster") or ""
    tags = set(placement.get("tags") or ())
    candidates = []
    for name in peers:
        peer = clustered.peers.get(name)
        if name == leader or peer is None:
            continue  # itself, or not connected
        if cluster and cluster != clustered.cluster.name:
            continue
        if not tags <= set(peer.tags):
            continue
        candidates.append(name)
    if preferred:
        if preferred not in candidates:
            raise errors.CLUSTER_NO_PEERS.exc(err=NO_REPLACEMENT)
        return preferred
    if not candidates:
        raise errors.CLUSTER_NO_PEERS.exc(err=NO_REPLACEMENT)
    return candidates[0]


def check_storable_name(cfg: StreamConfig) -> None:
    """10049 for a file stream whose name cannot be a directory name (a NUL byte).

    nats-server fails at creating the store there; the length is already limited (10052) and
    other control characters, DEL and non-ASCII names are valid directory names.
    """
    if cfg.storage == "file" and "\x00" in cfg.name:
        raise errors.STREAM_CREATE.exc(err="error creating store for stream")


REPLICATED_MARKERS_ON_NOT_YET = (
    "turning subject delete markers on in an update of a replicated stream is not supported yet"
)


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

    async def stream_remove_peer(self, req: Request) -> dict[str, Any]:
        """STREAM.PEER.REMOVE, here on the server leading the stream (the cluster sends it
        on to it): the peer is replaced by another server, as nats-server keeps the replica
        count (10075 when no server can take its place, 10040 for a server not a peer)."""
        clustered = self.service.clustered
        if clustered is None:
            raise errors.CLUSTER_REQUIRED.exc()
        peer = ""
        if not is_empty_request(req.body):
            fields = decode_request(req.body, _PEER_REMOVE_REQUEST, "JSApiStreamRemovePeerRequest")
            peer = fields.get("peer") or ""
        if not peer:
            raise errors.BAD_REQUEST.exc()
        stream = self._lookup(_stream_name(req))
        group = stream.group
        if group is None:
            # An R1 stream is no group: it cannot move to another server here (yet).
            if peer != clustered.name:
                raise errors.CLUSTER_PEER_NOT_MEMBER.exc()
            raise errors.PEER_REMAP.exc()
        if not group.runner.is_leader:
            raise errors.CLUSTER_NOT_AVAIL.exc()  # sent here, but this replica lost the lead
        await clustered.remove_group_peer(stream.config, peer)
        return {"success": True}

    async def stream_leader_stepdown(self, req: Request) -> dict[str, Any]:
        """STREAM.LEADER.STEPDOWN, here on the server leading the stream (the cluster sends
        it on to it): :func:`step_down`."""
        if self.service.clustered is None:
            raise errors.CLUSTER_REQUIRED.exc()
        return step_down(self.service, self._lookup(_stream_name(req)), req.body)

    # --- stream lifecycle ----------------------------------------------------------------

    def _configs(self) -> dict[str, StreamConfig]:
        return {n: s.config for n, s in self.service.streams.items()}

    async def _validated(
        self, req: Request, validate: Callable[[dict[str, StreamConfig]], _T]
    ) -> _T:
        """``validate(other streams' configs)``, in a worker thread for a large request.

        The API worker handles one request at a time, but template auto-create and restore
        also add streams; if the registry changed while the thread ran, the checks run again
        against the new one (on the loop after a few tries, so this always ends).
        """
        if len(req.body) < OFF_LOOP_BYTES:
            return validate(self._configs())
        for _ in range(3):
            before = self._configs()
            result = await asyncio.to_thread(validate, before)
            after = self._configs()
            if after.keys() == before.keys() and all(after[n] is c for n, c in before.items()):
                return result
        return validate(self._configs())

    async def stream_create(self, req: Request) -> dict[str, Any]:
        svc = self.service
        name = _stream_name(req)
        limits = svc.stream_limits
        outcome = await self._validated(
            req, lambda configs: create_stream_request(req.body, name, configs.values(), limits)
        )
        configs = [s.config for s in svc.streams.values()]
        if outcome.existing:
            stream = svc.streams[outcome.config.name]
        else:
            check_not_template_owned(outcome.config)
            svc.resources.check_reservation(outcome.config, configs)
            check_storable_name(outcome.config)
            if outcome.config.num_replicas > 1 and svc.clustered is not None:
                stream = await svc.clustered.create_replicated(outcome.config)
            else:
                stream = await svc.create_stream(outcome.config)
        return self._in_cluster(info_plain(stream), stream) | {"did_create": True}

    async def stream_update(self, req: Request) -> dict[str, Any]:
        svc = self.service
        name = _stream_name(req)
        cfg = await self._validated(
            req, lambda configs: update_stream_request(req.body, name, configs, svc.stream_limits)
        )
        configs = self._configs()
        svc.resources.check_reservation(cfg, configs.values(), replacing=name)
        stream = svc.streams[name]
        if stream.group is not None:
            await self._update_replicated(stream, cfg)
        elif cfg.num_replicas > 1 and svc.clustered is not None:
            stream = await self._replicate(stream, cfg)
        else:
            stream = await svc.update_stream(name, cfg)
        return self._in_cluster(info_plain(stream), stream)

    async def _replicate(self, stream: Stream, cfg: StreamConfig) -> Stream:
        """A stream created with one replica given more: the rest of the update first, as
        any update of it, then it becomes a replicated group from its state (docs/
        REPLICATION.md, "Growing a stream of one replica"). A single server refused the
        count already (10074)."""
        svc = self.service
        assert svc.clustered is not None
        if stream.config.template_owner:
            raise errors.STREAM_INVALID_CONFIG.exc(err=REPLICATED_TEMPLATES_NOT_YET)
        plain = msgspec.structs.replace(cfg, num_replicas=stream.config.num_replicas)
        if plain != stream.config:
            stream = await svc.update_stream(stream.name, plain)
        return await svc.clustered.replicate(stream, cfg)

    async def _update_replicated(self, stream: Stream, cfg: StreamConfig) -> None:
        """A replicated stream's new config goes into its log; every replica applies it there
        (the leader, which answers, included). A new ``num_replicas`` first changes the peers
        its placement wants (the group follows: docs/REPLICATION.md, "Changing the
        peers")."""
        group = stream.group
        assert group is not None
        old = stream.config
        if cfg.subject_delete_marker_ttl > 0 and old.subject_delete_marker_ttl <= 0:
            # Turning markers on scans the stream for them in the background, which replicas
            # would finish at different points of their logs.
            raise errors.STREAM_INVALID_CONFIG.exc(err=REPLICATED_MARKERS_ON_NOT_YET)
        if max(cfg.num_replicas, 1) != max(old.num_replicas, 1):
            clustered, record = self.service.clustered, group.runner.record
            if clustered is None or record is None or not group.runner.is_leader:
                raise errors.CLUSTER_NOT_AVAIL.exc()
            await clustered.resize_group(cfg, group.runner.name, record.in_sync)
        await group.submit(groupops.UpdateConfig(groupops.encode_config(cfg)))
        self.service.advise_action(cfg, "modify")

    def _in_cluster(self, body: dict[str, Any], stream: Stream) -> dict[str, Any]:
        """CREATE and UPDATE answers name the cluster and the stream's server in a cluster,
        before ``ts``, as nats-server's do (a single server's carry no cluster block)."""
        svc = self.service
        if svc.cluster_name is None:
            return body
        ts = body.pop("ts", None)
        body["cluster"] = svc.cluster_block(stream)
        if ts is not None:
            body["ts"] = ts
        return body

    async def stream_delete(self, req: Request) -> dict[str, Any]:
        if not is_empty_request(req.body):
            raise errors.NOT_EMPTY_REQUEST.exc()
        stream = self._lookup(_stream_name(req))
        clustered = self.service.clustered
        if stream.group is not None and clustered is not None:
            await clustered.replicas.remove(stream.name)  # the others go with the placement
        else:
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
        _check_writable(stream)
        if stream.group is not None:
            purged = await stream.group.submit(groupops.Purge(subject, seq, keep))
            return {"success": True, "purged": purged}
        try:
            purged = stream.purge(subject, seq, keep)
        except StoreError as exc:
            raise errors.STREAM_STORE_FAILED.exc(err=str(exc)) from None
        await _durable(stream)
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
        await _readable(stream)
        svc = self.service
        return info_for_request(
            stream,
            cluster=svc.cluster_block(stream),
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
        shown = streams[offset : offset + LIST_LIMIT]
        page = [self._in_cluster(info_for_list(s), s) for s in shown]
        return {"total": len(streams), "offset": offset, "limit": LIST_LIMIT, "streams": page}

    # --- messages ------------------------------------------------------------------------

    async def msg_get(self, req: Request) -> dict[str, Any]:
        if is_empty_request(req.body):
            raise errors.BAD_REQUEST.exc()
        fields = decode_request(req.body, MSG_GET_REQUEST, "JSApiMsgGetRequest")
        stream = self._lookup(_stream_name(req))
        await _readable(stream)
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
        erase = not fields.get("no_erase", False)
        _check_writable(stream)
        if stream.group is not None:
            if await stream.group.submit(groupops.DeleteMsg(seq, erase)):
                return {"success": True}
            raise _delete_failure(stream, seq)
        try:
            removed = seq > 0 and stream.store.remove_msg(seq, erase)
        except StoreError as exc:
            raise errors.STREAM_STORE_FAILED.exc(err=str(exc)) from None
        if removed:
            await _durable(stream)
            return {"success": True}
        raise _delete_failure(stream, seq)


async def _readable(stream: Stream) -> None:
    """A replicated stream's read barrier (docs/REPLICATION.md, "Reads"): its state may be
    read once everything acknowledged before the request is applied here; 10008 when this
    replica may not answer (it does not lead, hands over, or was cut off from the others)."""
    if stream.group is not None and not await stream.group.read_barrier():
        raise errors.CLUSTER_NOT_AVAIL.exc()


def _check_writable(stream: Stream) -> None:
    """10077 from a stream whose store stopped after a failed write or fsync (fail-stop)."""
    failed = stream.store.failed
    if failed is not None:
        raise errors.STREAM_STORE_FAILED.exc(err=str(failed))


async def _durable(stream: Stream) -> None:
    """The reply to a delete or purge waits for the same durability as a publish ack."""
    try:
        await stream.durable()
    except StoreError as exc:
        raise errors.STREAM_STORE_FAILED.exc(err=str(exc)) from None


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
