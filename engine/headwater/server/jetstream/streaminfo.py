"""The ``StreamInfo`` JSON shapes: what CREATE, UPDATE, INFO and LIST answer with.

nats-server varies the shape by endpoint and clients' tests see it: INFO carries the paging
fields (``total``/``offset``/``limit``, for subject details) and ``cluster.leader``; CREATE and
UPDATE carry neither; LIST shows the stored config (no ``_nats.ver``/``_nats.level``). The
``state`` object omits its optional members when empty, in Go's field order.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from headwater.server.store.base import StreamState

from .replication import replication_info
from .streamconfig import config_to_json
from .wire import rfc3339

if TYPE_CHECKING:
    from .stream import Stream

__all__ = ["MAX_SUBJECT_DETAILS", "info_for_list", "info_for_request", "info_plain", "state_json"]

MAX_SUBJECT_DETAILS = 100_000
"""The most ``state.subjects`` entries one STREAM.INFO returns (nats-server's limit)."""


def state_json(
    state: StreamState,
    subjects: dict[str, int] | None = None,
    deleted: list[int] | None = None,
    consumer_count: int = 0,
) -> dict[str, Any]:
    """``StreamState`` as JSON. A stream that never held a message reports ``first_seq`` 0."""
    first_seq = state.first_seq if state.last_seq or state.msgs else 0
    out: dict[str, Any] = {
        "messages": state.msgs,
        "bytes": state.bytes,
        "first_seq": first_seq,
        "first_ts": rfc3339(state.first_ts if state.msgs else 0),
        "last_seq": state.last_seq,
        "last_ts": rfc3339(state.last_ts),
    }
    if state.num_subjects:
        out["num_subjects"] = state.num_subjects
    if subjects:
        out["subjects"] = subjects
    if state.num_deleted:
        out["num_deleted"] = state.num_deleted
    if deleted:
        out["deleted"] = deleted
    out["consumer_count"] = consumer_count
    return out


def info_plain(stream: Stream) -> dict[str, Any]:
    """CREATE/UPDATE responses: config (with dynamic metadata), created, state, ts."""
    return {
        "config": config_to_json(stream.config),
        "created": rfc3339(stream.created_ns),
        "state": state_json(stream.state(), consumer_count=stream.consumer_count()),
        **replication_info(stream),
        "ts": rfc3339(time.time_ns()),
    }


def info_for_list(stream: Stream) -> dict[str, Any]:
    """One entry of STREAM.LIST: the stored config, no cluster block."""
    return {
        "config": config_to_json(stream.config, dynamic_metadata=False),
        "created": rfc3339(stream.created_ns),
        "state": state_json(stream.state(), consumer_count=stream.consumer_count()),
        **replication_info(stream),
        "ts": rfc3339(time.time_ns()),
    }


def _subject_page(totals: dict[str, int], offset: int) -> dict[str, int]:
    if offset == 0 and len(totals) <= MAX_SUBJECT_DETAILS:
        return dict(sorted(totals.items()))
    names = sorted(totals)
    offset = min(max(offset, 0), len(names))
    return {name: totals[name] for name in names[offset : offset + MAX_SUBJECT_DETAILS]}


def info_for_request(
    stream: Stream,
    *,
    cluster: dict[str, Any],
    domain: str | None,
    deleted_details: bool = False,
    subjects_filter: str = "",
    offset: int = 0,
) -> dict[str, Any]:
    """The STREAM.INFO body (after ``type``): paging, config, created, state, cluster, ts."""
    state = stream.state(deleted_details)
    paging = {"total": 0, "offset": 0, "limit": 0}
    subjects: dict[str, int] | None = None
    if subjects_filter:
        totals = stream.store.subject_state(subjects_filter)
        if totals:
            paging = {"total": len(totals), "offset": offset, "limit": MAX_SUBJECT_DETAILS}
            subjects = _subject_page(totals, offset)
    body: dict[str, Any] = paging | {
        "config": config_to_json(stream.config),
        "created": rfc3339(stream.created_ns),
        "state": state_json(
            state,
            subjects,
            state.deleted if deleted_details else None,
            consumer_count=stream.consumer_count(),
        ),
    }
    if domain:
        body["domain"] = domain
    body["cluster"] = cluster
    body.update(replication_info(stream))
    body["ts"] = rfc3339(time.time_ns())
    return body
