"""/connz: one entry per client connection, open or recently closed, with paging and sorting.

Parameters and their semantics are nats-server's (``ConnzOptions`` in monitor.go): ``sort``
(``cid`` and ``start`` ascending, counters descending, ``stop``/``reason`` only with
``state=closed``), ``subs=1`` for subject lists or ``subs=detail`` for full subscription
records, ``offset``/``limit`` paging (limit 1024 by default), ``cid=<n>`` for one connection
(the limit then is 1), ``state=open|closed|all``, and ``auth=1`` to show the user name.

The connections are sorted and paged on raw numbers first and only the page is formatted,
so a scrape of a server with tens of thousands of clients formats at most ``limit`` entries.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from headwater.server.monitoring.formats import rfc3339, rtt, uptime
from headwater.server.monitoring.params import BadRequest, Query

if TYPE_CHECKING:
    from headwater.server.connections.client import ClientConnection
    from headwater.server.node import Server
    from headwater.server.subscription import Subscription

DEFAULT_LIMIT = 1024

OPEN = "open"
CLOSED = "closed"
ALL = "all"

_STATES = {"open": OPEN, "closed": CLOSED, "all": ALL, "any": ALL}


@dataclass(slots=True)
class _Row:
    """The sortable numbers of one connection, and where to read the rest from."""

    cid: int
    start: float
    last: float
    stop: float  # 0.0 while open
    rtt: float
    pending: int
    nsubs: int
    in_msgs: int
    out_msgs: int
    in_bytes: int
    out_bytes: int
    reason: str
    client: ClientConnection | None
    record: Mapping[str, Any] | None


# sort option -> (key, descending). "start" orders like "cid": cids are given out in order.
_SORTS: dict[str, tuple[Callable[[_Row], Any], bool]] = {
    "cid": (lambda r: r.cid, False),
    "start": (lambda r: r.cid, False),
    "subs": (lambda r: r.nsubs, True),
    "pending": (lambda r: r.pending, True),
    "msgs_to": (lambda r: r.out_msgs, True),
    "msgs_from": (lambda r: r.in_msgs, True),
    "bytes_to": (lambda r: r.out_bytes, True),
    "bytes_from": (lambda r: r.in_bytes, True),
    "last": (lambda r: r.last, True),
    # Longest idle first: the oldest last activity.
    "idle": (lambda r: r.last, False),
    "rtt": (lambda r: r.rtt, True),
    "stop": (lambda r: r.stop, True),
    "reason": (lambda r: r.reason, False),
}
_CLOSED_ONLY = frozenset({"stop", "reason"})


@dataclass(frozen=True)
class ConnzOptions:
    sort: str = "cid"
    auth: bool = False
    subs: bool = False
    subs_detail: bool = False
    offset: int = 0
    limit: int = DEFAULT_LIMIT
    cid: int = 0
    state: str = OPEN
    user: str = ""

    def __post_init__(self) -> None:
        if self.sort not in _SORTS and self.sort != "uptime":
            raise BadRequest(f"invalid sorting option: {self.sort}")
        if self.state not in (OPEN, CLOSED, ALL):
            raise BadRequest(f"Error decoding state for {self.state}")
        if self.sort in _CLOSED_ONLY and self.state != CLOSED:
            raise BadRequest(f"sort by {self.sort} only valid on closed connections")

    @classmethod
    def from_query(cls, query: Query) -> ConnzOptions:
        sort = query.get("sort") or "cid"
        auth = query.boolean("auth")
        detail = query.get("subs").lower() == "detail"
        subs = not detail and query.boolean("subs")
        offset = max(query.integer("offset"), 0)
        limit = query.integer("limit")
        if limit <= 0:
            limit = DEFAULT_LIMIT
        cid = query.unsigned("cid")
        state_text = query.get("state")
        state = _STATES.get(state_text.lower(), state_text) if state_text else OPEN
        if cid:
            limit = 1
        return cls(
            sort=sort,
            auth=auth,
            subs=subs,
            subs_detail=detail,
            offset=offset,
            limit=limit,
            cid=cid,
            state=state,
            user=query.get("user"),
        )


def connz(
    server: Server, options: ConnzOptions | None = None, now: float | None = None
) -> dict[str, Any]:
    """The /connz document for ``server``."""
    opts = options or ConnzOptions()
    now = time.time() if now is None else now
    clients = server.clients
    closed = server.closed_clients if opts.state != OPEN else []
    total = (len(clients) if opts.state != CLOSED else 0) + len(closed)

    rows: list[_Row] = []
    if opts.state != CLOSED:
        if opts.cid:
            client = clients.get(opts.cid)
            rows.extend(_open_rows([client] if client is not None else []))
        else:
            rows.extend(_open_rows(clients.values()))
    if opts.state != OPEN:
        records: Iterable[Mapping[str, Any]] = closed
        if opts.cid:
            records = [r for r in closed if r.get("cid") == opts.cid][:1]
        rows.extend(_closed_row(r) for r in records)
    if opts.user:
        rows = [r for r in rows if _user(r) == opts.user]

    rows.sort(key=lambda r: r.cid)
    if opts.sort == "uptime":
        # Shortest-lived first; a closed connection's uptime ended when it closed.
        rows.sort(key=lambda r: (r.stop or now) - r.start)
    elif opts.sort not in ("cid", "start"):
        key, descending = _SORTS[opts.sort]
        # Stable: ties keep cid order, also when descending.
        rows.sort(key=key, reverse=descending)

    page = rows[opts.offset : opts.offset + opts.limit]
    return {
        "server_id": server.server_id,
        "now": rfc3339(now),
        "num_connections": len(page),
        "total": total,
        "offset": opts.offset,
        "limit": opts.limit,
        "connections": [_info(r, now, opts) for r in page],
    }


def closed_record(client: ClientConnection, stop: float | None = None) -> dict[str, Any]:
    """What /connz?state=closed needs to remember about a connection that just closed.

    Meant for ``Server.client_closed``; it must run before the client's subscriptions are
    dropped if the closed entry is to list them.
    """
    record: dict[str, Any] = {
        "cid": client.cid,
        "ip": client.ip,
        "port": client.port,
        "start": client.start,
        "last_activity": client.last_activity,
        "stop": time.time() if stop is None else stop,
        "reason": client.close_reason,
        "rtt": client.rtt,
        "in_msgs": client.in_msgs,
        "out_msgs": client.out_msgs,
        "in_bytes": client.in_bytes,
        "out_bytes": client.out_bytes,
        "name": client.name,
        "lang": client.lang,
        "version": client.version,
        "tls_version": client.tls_version,
        "user": client.user,
        "subs": [_sub_detail(sub, client.cid) for sub in client.subs.values()],
    }
    return record


# --- rows -----------------------------------------------------------------------------------


def _open_rows(clients: Iterable[ClientConnection]) -> Iterable[_Row]:
    for c in clients:
        yield _Row(
            cid=c.cid,
            start=c.start,
            last=c.last_activity,
            stop=0.0,
            rtt=c.rtt,
            pending=_pending(c),
            nsubs=len(c.subs),
            in_msgs=c.in_msgs,
            out_msgs=c.out_msgs,
            in_bytes=c.in_bytes,
            out_bytes=c.out_bytes,
            reason="",
            client=c,
            record=None,
        )


def _closed_row(rec: Mapping[str, Any]) -> _Row:
    """A closed entry; fields the record lacks read as zero or empty."""
    subs = rec.get("subs") or ()
    return _Row(
        cid=int(rec.get("cid", 0)),
        start=float(rec.get("start", 0.0)),
        last=float(rec.get("last_activity", rec.get("start", 0.0))),
        stop=float(rec.get("stop", 0.0)),
        rtt=float(rec.get("rtt", 0.0)),
        pending=0,
        nsubs=len(subs),
        in_msgs=int(rec.get("in_msgs", 0)),
        out_msgs=int(rec.get("out_msgs", 0)),
        in_bytes=int(rec.get("in_bytes", 0)),
        out_bytes=int(rec.get("out_bytes", 0)),
        reason=str(rec.get("reason", "")),
        client=None,
        record=rec,
    )


def _pending(client: ClientConnection) -> int:
    """Bytes queued for the client: our outbound list plus what the transport still holds."""
    transport = client.transport
    buffered = 0
    if transport is not None and not client.closed:
        buffered = transport.get_write_buffer_size()
    return client.out_size + buffered


def _user(row: _Row) -> str:
    return str(_field(row, "user"))


def _field(row: _Row, name: str) -> Any:
    """A descriptive field (ip, name, lang, ...) from the live client or the closed record."""
    if row.client is not None:
        return getattr(row.client, name, "")
    return row.record.get(name, "") if row.record is not None else ""


# --- formatting -----------------------------------------------------------------------------


def _info(row: _Row, now: float, opts: ConnzOptions) -> dict[str, Any]:
    end = row.stop or now
    info: dict[str, Any] = {
        "cid": row.cid,
        "kind": "Client",
        "type": "nats",
        "ip": _field(row, "ip") or "",
        "port": _field(row, "port") or 0,
        "start": rfc3339(row.start),
        "last_activity": rfc3339(row.last),
    }
    if row.record is not None:
        if row.stop:
            info["stop"] = rfc3339(row.stop)
        info["reason"] = row.reason
    info.update(
        {
            "rtt": rtt(row.rtt),
            "uptime": uptime(end - row.start),
            "idle": uptime(end - row.last),
            "pending_bytes": row.pending,
            "in_msgs": row.in_msgs,
            "out_msgs": row.out_msgs,
            "in_bytes": row.in_bytes,
            "out_bytes": row.out_bytes,
            "subscriptions": row.nsubs,
        }
    )
    # nats-server leaves these out when empty.
    for name in ("name", "lang", "version"):
        value = _field(row, name)
        if value:
            info[name] = value
    tls_version = _field(row, "tls_version")
    if tls_version:
        info["tls_version"] = _tls_version(tls_version)
    if opts.auth:
        user = _field(row, "user")
        if user:
            info["authorized_user"] = user
    if row.nsubs and (opts.subs or opts.subs_detail):
        details = _details(row)
        if opts.subs_detail:
            info["subscriptions_list_detail"] = details
        else:
            info["subscriptions_list"] = [d["subject"] for d in details]
    return info


def _details(row: _Row) -> list[dict[str, Any]]:
    if row.client is not None:
        return [_sub_detail(sub, row.cid) for sub in row.client.subs.values()]
    assert row.record is not None
    return [{**d, "cid": row.cid} for d in row.record.get("subs") or ()]


def _sub_detail(sub: Subscription, cid: int) -> dict[str, Any]:
    """nats-server's SubDetail for a client's own list (no account field there)."""
    detail: dict[str, Any] = {"subject": sub.subject}
    if sub.queue:
        detail["qgroup"] = sub.queue
    detail["sid"] = sub.sid
    detail["msgs"] = sub.delivered
    if sub.max_msgs:
        detail["max"] = sub.max_msgs
    detail["cid"] = cid
    return detail


def _tls_version(version: str) -> str:
    """Python says "TLSv1.3"; nats-server says "1.3"."""
    return version[4:] if version.startswith("TLSv") else version
