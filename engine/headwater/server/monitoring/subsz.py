"""/subsz (alias /subscriptionsz): subscription index statistics, optionally with the list.

The statistics are the sublist's own counters under nats-server's names. ``subs=1`` adds
``subscriptions_list``, paged with ``offset``/``limit`` (``total`` counts every match before
paging); ``test=<subject>`` keeps only subscriptions a publish to that literal subject would
reach. Listing walks the whole index, which is fine for a monitoring request, and never calls
``Sublist.match``, so looking does not move the match or cache counters it reports.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from headwater.server.monitoring.formats import go_number, rfc3339
from headwater.server.monitoring.params import BadRequest, Query
from headwater.server.routing.subjects import subject_matches, valid_literal_subject

if TYPE_CHECKING:
    from headwater.server.node import Server
    from headwater.server.subscription import Subscription

DEFAULT_LIMIT = 1024

#: Every client is in nats-server's global account when no accounts are configured.
GLOBAL_ACCOUNT = "$G"


@dataclass(frozen=True)
class SubszOptions:
    subs: bool = False
    offset: int = 0
    limit: int = DEFAULT_LIMIT
    test: str = ""

    def __post_init__(self) -> None:
        if self.test and not valid_literal_subject(self.test):
            raise BadRequest(f"invalid test subject, must be valid publish subject: {self.test}")

    @classmethod
    def from_query(cls, query: Query) -> SubszOptions:
        subs = query.boolean("subs")
        offset = max(query.integer("offset"), 0)
        limit = query.integer("limit")
        return cls(
            subs=subs,
            offset=offset,
            limit=limit if limit > 0 else DEFAULT_LIMIT,
            test=query.get("test"),
        )


def subsz(
    server: Server, options: SubszOptions | None = None, now: float | None = None
) -> dict[str, Any]:
    """The /subsz document for ``server``."""
    opts = options or SubszOptions()
    now = time.time() if now is None else now
    out: dict[str, Any] = {"server_id": server.server_id, "now": rfc3339(now)}
    for name, value in server.sublist.stats().items():
        out[name] = go_number(value) if isinstance(value, float) else value
    out.update({"total": 0, "offset": opts.offset, "limit": opts.limit})
    if opts.subs:
        subs = server.sublist.all()
        if opts.test:
            subs = [s for s in subs if subject_matches(s.subject, opts.test)]
        # A stable order, so paging through the list visits every subscription once.
        subs.sort(key=_order)
        out["total"] = len(subs)
        page = subs[opts.offset : opts.offset + opts.limit]
        if page:
            out["subscriptions_list"] = [_detail(s) for s in page]
    return out


def _order(sub: Subscription) -> tuple[int, int, str]:
    sid = sub.sid
    return (sub.client.cid, int(sid) if sid.isascii() and sid.isdigit() else -1, sid)


def _detail(sub: Subscription) -> dict[str, Any]:
    detail: dict[str, Any] = {
        "account": GLOBAL_ACCOUNT,
        "account_tag": GLOBAL_ACCOUNT,
        "subject": sub.subject,
    }
    if sub.queue:
        detail["qgroup"] = sub.queue
    detail["sid"] = sub.sid
    detail["msgs"] = sub.delivered
    if sub.max_msgs:
        detail["max"] = sub.max_msgs
    detail["cid"] = sub.client.cid
    return detail
