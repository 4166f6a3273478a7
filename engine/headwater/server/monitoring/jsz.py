"""/jsz: JetStream's usage, its account, streams and consumers, as nats-server 2.15 reports it.

The document (monitor.go's ``JSInfo``) and what each query parameter does, checked against
the nats-server binary:

* without JetStream (not configured, or its service not running): zeros, ``"disabled":
  true`` and ``config`` ``{"max_memory": 0, "max_storage": 0}``; ``leader-only`` gets 400;
* the server's usage and API counters (what ``/varz``'s ``jetstream.stats`` shows), its
  ``config``, the stream, consumer, message and byte counts over the streams it hosts, and
  ``total``, the number of JetStream accounts (here always one: ``$G``);
* ``accounts=1`` adds ``account_details``: one entry per account, paged by ``offset`` (the
  accounts sorted by name) and ``limit`` (0 or less: 1024); ``acc=<name>`` picks that
  account alone (an unknown name picks none and falls back to ``accounts``);
* ``streams=1`` (implies ``accounts`` unless ``acc`` is given) adds each account's
  ``stream_detail``: name, created, the ``cluster`` block of STREAM.INFO, the stored config
  with ``config=1``, state, mirror/sources; ``consumers=1`` (implies ``streams``) adds the
  public consumers' info (config only with ``config=1``); ``stream-leader-only`` keeps the
  streams this server leads (every stream it hosts: Headwater's streams are R1);
* ``leader-only=1`` answers 400 "filtered response: not leader" on a server that does not
  lead the meta group (a single server always does);
* ``raft=1`` adds ``streams_leader`` / ``consumers_leader`` (omitted when zero). On a single
  server nats-server has no Raft groups either, so that is all; in a cluster it also names
  each stream's and consumer's Raft group, which Headwater's R1 streams do not have, so
  ``raft=1`` with stream details is refused there rather than answered without them;
* in a cluster, ``meta_cluster`` describes the metadata group (etcd here; see
  :meth:`ClusteredJetStream.meta_cluster`) and ``ha_assets`` counts it.

Everything is read from memory: the handler runs on the event loop and never awaits. The
per-stream and per-consumer parts come from the JetStream service's report accessors, so this
module imports no JetStream code: a server without JetStream does not load it at start-up.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from headwater.server.monitoring.formats import rfc3339
from headwater.server.monitoring.params import BadRequest, Query

if TYPE_CHECKING:
    from headwater.server.jetstream.service import JetStreamService
    from headwater.server.jetstream.stream import Stream
    from headwater.server.node import Server

DEFAULT_LIMIT = 1024
#: The one JetStream account: every client is in nats-server's global account here.
GLOBAL_ACCOUNT = "$G"
#: An account without JetStream limits reports its reservation as Go's uint64(-1).
UNLIMITED = 2**64 - 1
NOT_LEADER = "filtered response: not leader"
NO_RAFT_GROUPS = "raft groups are not supported: streams in a Headwater cluster have no Raft group"


@dataclass(frozen=True)
class JszOptions:
    account: str = ""
    accounts: bool = False
    streams: bool = False
    consumers: bool = False
    config: bool = False
    leader_only: bool = False
    offset: int = 0
    limit: int = DEFAULT_LIMIT
    raft: bool = False
    stream_leader_only: bool = False

    @classmethod
    def from_query(cls, query: Query) -> JszOptions:
        # Decoded in nats-server's order, so the first bad parameter is the one reported.
        accounts = query.boolean("accounts")
        streams = query.boolean("streams")
        consumers = query.boolean("consumers")
        config = query.boolean("config")
        offset = query.integer("offset")
        limit = query.integer("limit")
        leader_only = query.boolean("leader-only")
        raft = query.boolean("raft")
        stream_leader_only = query.boolean("stream-leader-only")
        account = query.get("acc")
        streams = streams or consumers
        return cls(
            account=account,
            accounts=accounts or (streams and not account),
            streams=streams,
            consumers=consumers,
            config=config,
            leader_only=leader_only,
            offset=max(offset, 0),
            limit=limit if limit > 0 else DEFAULT_LIMIT,
            raft=raft,
            stream_leader_only=stream_leader_only,
        )


def jsz(
    server: Server, options: JszOptions | None = None, now: float | None = None
) -> dict[str, Any]:
    """The /jsz document for ``server``; raises :class:`BadRequest` for a refused query."""
    opts = options or JszOptions()
    now = time.time() if now is None else now
    js: JetStreamService | None = getattr(server, "jetstream", None)
    if js is None or js.router is None:
        if opts.leader_only:
            raise BadRequest(NOT_LEADER)
        return _disabled(server, now)
    clustered = js.clustered
    if opts.leader_only and clustered is not None and clustered.leader_name() != server.name:
        raise BadRequest(NOT_LEADER)
    if opts.raft and opts.streams and clustered is not None:
        raise BadRequest(NO_RAFT_GROUPS)

    report = js.varz()
    stats = report["stats"]
    streams = list(js.streams.values())
    states = [s.state() for s in streams]
    consumers = sum(s.consumer_count() for s in streams)
    out: dict[str, Any] = {
        **stats,
        "server_id": server.server_id,
        "now": rfc3339(now),
        "config": report["config"],
        # No server-wide JetStream limits are enforced, so none are claimed (nats-server 2.15
        # shows its default of 1,000 consumers per stream here).
        "limits": {},
        "streams": len(streams),
    }
    if opts.raft and streams:
        # Every stream (and so every consumer) hosted here is led here.
        out["streams_leader"] = len(streams)
    out["consumers"] = consumers
    if opts.raft and consumers:
        out["consumers_leader"] = consumers
    out["messages"] = sum(st.msgs for st in states)
    out["bytes"] = sum(st.bytes for st in states)
    if clustered is not None:
        out["meta_cluster"] = clustered.meta_cluster()
    if _selected(opts):
        out["account_details"] = [_account(js, streams, stats, opts)]
    out["total"] = 1
    return out


def _disabled(server: Server, now: float) -> dict[str, Any]:
    return {
        "memory": 0,
        "storage": 0,
        "reserved_memory": 0,
        "reserved_storage": 0,
        "accounts": 0,
        "ha_assets": 0,
        "api": {"level": 0, "total": 0, "errors": 0},
        "server_id": server.server_id,
        "now": rfc3339(now),
        "disabled": True,
        "config": {"max_memory": 0, "max_storage": 0},
        "streams": 0,
        "consumers": 0,
        "messages": 0,
        "bytes": 0,
        "total": 0,
    }


def _selected(opts: JszOptions) -> bool:
    """Whether the one account is in ``account_details``, as nats-server filters and pages."""
    if opts.account == GLOBAL_ACCOUNT:
        return True
    if not opts.accounts:
        return False
    # One account, sorted or not: the page holds it unless the offset skips past it.
    return opts.offset < 1


def _account(
    js: JetStreamService, streams: list[Stream], stats: dict[str, Any], opts: JszOptions
) -> dict[str, Any]:
    detail: dict[str, Any] = {
        "name": GLOBAL_ACCOUNT,
        "id": GLOBAL_ACCOUNT,
        "memory": stats["memory"],
        "storage": stats["storage"],
        # The account has no JetStream limits: nats-server prints its -1 as unsigned.
        "reserved_memory": UNLIMITED,
        "reserved_storage": UNLIMITED,
        "accounts": 0,
        "ha_assets": 0,
        "api": {"level": 0, "total": js.stats.total, "errors": js.stats.errors},
    }
    if opts.streams and streams:
        # stream-leader-only keeps every stream: each one hosted here is led here.
        detail["stream_detail"] = [_stream(js, s, opts) for s in streams]
    return detail


def _stream(js: JetStreamService, stream: Stream, opts: JszOptions) -> dict[str, Any]:
    out = js.stream_report(stream, opts.config)
    if opts.consumers:
        consumers = [js.consumer_report(c, opts.config) for c in stream.public_consumers()]
        if consumers:
            # Go's field order: consumer_detail before mirror and sources.
            tail = {k: out.pop(k) for k in ("mirror", "sources") if k in out}
            out["consumer_detail"] = consumers
            out.update(tail)
    return out


__all__ = ["JszOptions", "jsz"]
