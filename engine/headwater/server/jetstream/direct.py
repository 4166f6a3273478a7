"""Reading single messages: ``STREAM.MSG.GET`` (JSON) and ``DIRECT.GET`` (raw message).

``STREAM.MSG.GET.<stream>`` answers ``{"message": {subject, seq, hdrs, data, time}}`` with
base64 bodies, or 10037 "no message found". ``DIRECT.GET.<stream>`` answers with the stored
message itself, its headers extended by ``Nats-Stream``, ``Nats-Subject``, ``Nats-Sequence``
and ``Nats-Time-Stamp``; failures are status-only replies (``404 Message Not Found``, ``408``
for empty, malformed or contradictory requests). Batches (``batch``) and ``multi_last`` send
several messages with ``Nats-Num-Pending``/``Nats-Last-Sequence`` and end with a
``204 EOB`` status. ``DIRECT.GET.<stream>.<subject>`` is "last message on subject" with an
empty body. Direct gets run inline in routing: they only read the in-memory index and blocks.

On a replicated stream (only its leader subscribes the direct-get subjects) a direct get first
passes the group's read barrier (:meth:`StreamGroup.read`, docs/REPLICATION.md "Reads"), so a
leader cut off from the others never answers from a state a newer leader moved past; a
replica that may not answer leaves the request unanswered, as a nats-server replica that does
not lead does (the client times out and asks again). ``STREAM.MSG.GET`` goes through the same
barrier in :mod:`.streamapi`.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from headwater.server.protocol import headers
from headwater.server.store.base import StoredMsg, StreamStore

from . import errors
from .gojson import GoType
from .layout import parse_time
from .wire import rfc3339, with_headers

if TYPE_CHECKING:
    from .stream import Stream

__all__ = ["MSG_GET_REQUEST", "handle_last_by_subject", "handle_request", "msg_get"]

MAX_MULTI_RESULTS = 1024
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
"""Cap on a batch's bytes when the request sets none (nats-server uses max_pending)."""

_STR = GoType("string", "str")
_U64 = GoType("uint64", "int")
_INT = GoType("int", "int")
MSG_GET_REQUEST = GoType(
    "server.JSApiMsgGetRequest",
    "struct",
    {
        "seq": _U64,
        "last_by_subj": _STR,
        "next_by_subj": _STR,
        "batch": _INT,
        "max_bytes": _INT,
        "start_time": GoType("time.Time", "time", pointer=True),
        "multi_last": GoType("[]string", "strs"),
        "up_to_seq": _U64,
        "up_to_time": GoType("time.Time", "time", pointer=True),
        "no_hdr": GoType("bool", "bool"),
    },
)

_NOT_FOUND = headers.status(404, "Message Not Found")
_NO_RESULTS = headers.status(404, "No Results")
_EMPTY = headers.status(408, "Empty Request")
_MALFORMED = headers.status(408, "Malformed Request")
_BAD = headers.status(408, "Bad Request")
_TOO_MANY = headers.status(413, "Too Many Results")


# --- STREAM.MSG.GET ----------------------------------------------------------------------


def _stored_json(msg: StoredMsg) -> dict[str, Any]:
    out: dict[str, Any] = {"subject": msg.subject, "seq": msg.seq}
    if msg.hdr:
        out["hdrs"] = base64.b64encode(msg.hdr).decode()
    if msg.data:
        out["data"] = base64.b64encode(msg.data).decode()
    out["time"] = rfc3339(msg.ts)
    return out


def msg_get(stream: Stream, req: dict[str, Any]) -> dict[str, Any]:
    """The ``STREAM.MSG.GET`` body for a decoded request; raises 10003/10037."""
    seq = req.get("seq") or 0
    last_for = req.get("last_by_subj") or ""
    next_for = req.get("next_by_subj") or ""
    start = req.get("start_time")
    if (
        (seq > 0 and last_for)
        or (seq == 0 and not last_for and not next_for and start is None)
        or (seq > 0 and start is not None)
        or (start is not None and last_for)
        or (last_for and next_for)
        or (req.get("batch") or 0) > 0
        or req.get("multi_last")
    ):
        raise errors.BAD_REQUEST.exc()
    store = stream.store
    if start is not None:
        seq = store.seq_from_time(parse_time(start))
    msg: StoredMsg | None
    if next_for:
        msg = store.load_next(next_for, seq)
    elif seq > 0:
        msg = store.load_msg(seq) if start is None else store.load_next(">", seq)
    else:
        msg = store.load_last(last_for)
    if msg is None:
        raise errors.NO_MESSAGE_FOUND.exc()
    return {"message": _stored_json(msg)}


# --- DIRECT.GET --------------------------------------------------------------------------


def _direct_headers(stream: Stream, msg: StoredMsg, extra: list[tuple[str, str]]) -> bytes:
    pairs = [
        ("Nats-Stream", stream.name),
        ("Nats-Subject", msg.subject),
        ("Nats-Sequence", str(msg.seq)),
        ("Nats-Time-Stamp", rfc3339(msg.ts)),
        *extra,
    ]
    return with_headers(msg.hdr, pairs)


def _decode(payload: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    if value is None:
        return {}
    if not isinstance(value, dict):
        return None
    types = {
        "seq": int,
        "batch": int,
        "max_bytes": int,
        "up_to_seq": int,
        "last_by_subj": str,
        "next_by_subj": str,
        "start_time": str,
        "up_to_time": str,
        "multi_last": list,
        "no_hdr": bool,
    }
    out: dict[str, Any] = {}
    for key, kind in types.items():
        item = value.get(key)
        if item is None:
            continue
        if kind is int and (isinstance(item, bool) or not isinstance(item, int)):
            return None
        if not isinstance(item, kind):
            return None
        out[key] = item
    if any(k in out and out[k] < 0 for k in ("seq", "up_to_seq")):
        return None
    return out


def _when_readable(stream: Stream, answer: Callable[[], None]) -> None:
    """``answer`` now (one replica), or once a replicated stream's read barrier passed; never
    when this replica may not answer (the request goes unanswered)."""
    group = stream.group
    if group is None:
        answer()
        return

    def ready(ok: bool) -> None:
        if ok:
            answer()

    group.read(ready)


def handle_request(stream: Stream, reply: str, payload: bytes) -> None:
    """``DIRECT.GET.<stream>`` with a JSON request."""
    _when_readable(stream, lambda: _handle_request(stream, reply, payload))


def _handle_request(stream: Stream, reply: str, payload: bytes) -> None:
    send = stream.client.publish
    if not payload:
        send(reply, b"", hdr=_EMPTY)
        return
    req = _decode(payload)
    if req is None:
        send(reply, b"", hdr=_MALFORMED)
        return
    seq = req.get("seq", 0)
    last_for = req.get("last_by_subj", "")
    next_for = req.get("next_by_subj", "")
    start = req.get("start_time")
    multi = req.get("multi_last") or []
    batch = req.get("batch", 0)
    if seq == 0 and not last_for and not next_for and not multi and start is None:
        send(reply, b"", hdr=_EMPTY)
        return
    if (
        (seq > 0 and last_for)
        or (seq > 0 and start is not None)
        or (start is not None and last_for)
        or (last_for and next_for)
        or (last_for and batch > 0)
        or (last_for and multi)
        or (next_for and multi)
        or (req.get("up_to_seq", 0) > 0 and req.get("up_to_time") is not None)
    ):
        send(reply, b"", hdr=_BAD)
        return
    if multi:
        _multi_last(stream, reply, req)
    else:
        _get(stream, reply, req)


def handle_last_by_subject(stream: Stream, reply: str, key: str, payload: bytes) -> None:
    """``DIRECT.GET.<stream>.<subject>``: the last message on ``subject`` (empty body only)."""
    _when_readable(stream, lambda: _last_by_subject(stream, reply, key, payload))


def _last_by_subject(stream: Stream, reply: str, key: str, payload: bytes) -> None:
    send = stream.client.publish
    if payload or not key:
        send(reply, b"", hdr=_MALFORMED if payload else _BAD)
        return
    msg = stream.store.load_last(key)
    if msg is None:
        send(reply, b"", hdr=_NOT_FOUND)
        return
    send(reply, msg.data, hdr=_direct_headers(stream, msg, []))


def _get(stream: Stream, reply: str, req: dict[str, Any]) -> None:
    store = stream.store
    send = stream.client.publish
    start = req.get("start_time")
    seq = store.seq_from_time(parse_time(start)) if start is not None else req.get("seq", 0)
    next_for = req.get("next_by_subj", "")
    last_for = req.get("last_by_subj", "")
    requested = req.get("batch", 0)
    is_batch = requested > 0
    batch = requested if is_batch else 1
    pending = store.num_pending(next_for or ">", seq) if is_batch else 0
    max_bytes = req.get("max_bytes", 0) or DEFAULT_MAX_BYTES
    sent_bytes = 0
    last_sent = 0
    for i in range(batch):
        msg: StoredMsg | None
        if seq > 0 and not next_for:
            msg = store.load_msg(seq) if i == 0 else store.load_next(">", seq)
        elif next_for:
            msg = store.load_next(next_for, seq)
        else:
            msg = store.load_last(last_for)
        if msg is None:
            if is_batch and i > 0:
                break
            send(reply, b"", hdr=_NOT_FOUND)
            return
        seq = msg.seq + 1
        extra: list[tuple[str, str]] = []
        if is_batch:
            pending = max(pending - 1, 0)
            extra = [("Nats-Num-Pending", str(pending)), ("Nats-Last-Sequence", str(last_sent))]
        send(reply, msg.data, hdr=_direct_headers(stream, msg, extra))
        last_sent = msg.seq
        sent_bytes += len(msg.subject) + len(msg.hdr) + len(msg.data)
        if sent_bytes >= max_bytes:
            break
    if is_batch:
        eob = headers.status(
            204, "EOB", {"Nats-Num-Pending": str(pending), "Nats-Last-Sequence": str(last_sent)}
        )
        send(reply, b"", hdr=eob)


def _multi_last(stream: Stream, reply: str, req: dict[str, Any]) -> None:
    store = stream.store
    send = stream.client.publish
    up_to = req.get("up_to_seq", 0)
    if req.get("up_to_time") is not None:
        up_to = store.seq_from_time(parse_time(req["up_to_time"]))
        if up_to <= store.state().first_seq:
            send(reply, b"", hdr=_NO_RESULTS)
            return
        up_to -= 1
    if up_to == 0:
        up_to = store.state().last_seq
    seqs = _last_seqs(store, req["multi_last"], up_to)
    if seqs is None:
        send(reply, b"", hdr=_TOO_MANY)
        return
    if not seqs:
        send(reply, b"", hdr=_NO_RESULTS)
        return
    floor = req.get("seq", 0)
    batch = req.get("batch", 0)
    max_bytes = req.get("max_bytes", 0) or DEFAULT_MAX_BYTES
    pending = len(seqs) - 1
    last_sent = sent = sent_bytes = 0
    for seq in seqs:
        if seq < floor:
            pending = max(pending - 1, 0)
            continue
        msg = store.load_msg(seq)
        if msg is None:
            send(reply, b"", hdr=_NOT_FOUND)
            return
        extra = [("Nats-Num-Pending", str(pending)), ("Nats-Last-Sequence", str(last_sent))]
        send(reply, msg.data, hdr=_direct_headers(stream, msg, extra))
        pending = max(pending - 1, 0)
        last_sent = msg.seq
        sent_bytes += len(msg.subject) + len(msg.hdr) + len(msg.data)
        if sent_bytes >= max_bytes:
            break
        sent += 1
        if 0 < batch <= sent:
            break
    eob = headers.status(
        204,
        "EOB",
        {
            "Nats-Num-Pending": str(pending),
            "Nats-Last-Sequence": str(last_sent),
            "Nats-UpTo-Sequence": str(up_to),
        },
    )
    send(reply, b"", hdr=eob)


def _last_seqs(store: StreamStore, filters: list[Any], up_to: int) -> list[int] | None:
    """Sorted last sequences (≤ ``up_to``) of the subjects matching any filter; None: too many."""
    found: set[int] = set()
    for flt in filters:
        if not isinstance(flt, str):
            continue
        for subject, seq in store.subjects_last(flt).items():
            if seq > up_to:
                prev = store.load_prev(subject, up_to)
                if prev is None:
                    continue
                seq = prev.seq
            found.add(seq)
            if len(found) > MAX_MULTI_RESULTS:
                return None
    return sorted(found)
