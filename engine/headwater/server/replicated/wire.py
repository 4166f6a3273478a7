"""`Append`, `AppendReply` and `TimeoutNow` as bytes on the routes: msgpack arrays, checked on
the way in.

A message is a msgpack array whose first element names its kind (1 = Append, 2 = AppendReply,
3 = TimeoutNow) and whose others are the fields in declaration order (msgspec's array-like,
tagged structs: no field names on the wire). An entry is `[index, epoch, op]`. The last field
of Append and AppendReply, the read round (the core's rule 9), may be left out (0): a message
of a server from before read rounds still decodes.

`decode` refuses with `WireError` anything that is not such a message: bytes that are not
msgpack, an unknown kind, a missing or mistyped field, a negative number, an empty name, and
Appends the core could not take safely (it trusts their shape): an epoch or entry index below
1, entries that do not follow on from `prev_index` one by one, an entry of a later epoch than
the message's or of an earlier one than the entry before it, and a `prev_epoch` above the
message's epoch (or not 0 when `prev_index` is). The receiver logs and drops what it refuses;
the leader resends from what the follower confirmed, so nothing waits on a dropped message.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from headwater.server.replicated.messages import Append, AppendReply, Entry, Message, TimeoutNow

Count = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
Positive = Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1)]  # indexes; epochs (from 1)
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class WireError(ValueError):
    """Bytes that are not a well-formed replication message."""


class _Entry(msgspec.Struct, array_like=True, frozen=True, forbid_unknown_fields=True):
    index: Positive
    epoch: Positive
    op: bytes


class _Append(msgspec.Struct, array_like=True, frozen=True, forbid_unknown_fields=True, tag=1):
    epoch: Positive
    leader: Name
    prev_index: Count
    prev_epoch: Count
    entries: list[_Entry]
    commit: Count
    read: Count = 0


class _Reply(msgspec.Struct, array_like=True, frozen=True, forbid_unknown_fields=True, tag=2):
    epoch: Count
    sender: Name
    ok: bool
    durable: Count
    hint: Count
    read: Count = 0


class _TimeoutNow(msgspec.Struct, array_like=True, frozen=True, forbid_unknown_fields=True, tag=3):
    epoch: Positive
    leader: Name


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Append | _Reply | _TimeoutNow)


def encode(msg: Message) -> bytes:
    if isinstance(msg, Append):
        entries = [_Entry(e.index, e.epoch, e.op) for e in msg.entries]
        wire: _Append | _Reply | _TimeoutNow = _Append(
            msg.epoch, msg.leader, msg.prev_index, msg.prev_epoch, entries, msg.commit, msg.read
        )
    elif isinstance(msg, AppendReply):
        wire = _Reply(msg.epoch, msg.sender, msg.ok, msg.durable, msg.hint, msg.read)
    elif isinstance(msg, TimeoutNow):
        wire = _TimeoutNow(msg.epoch, msg.leader)
    else:
        raise TypeError(f"not a replication message: {type(msg).__name__}")
    return _encoder.encode(wire)


def decode(data: bytes) -> Message:
    """The message in `data`; `WireError` when it is not a well-formed one."""
    try:
        wire = _decoder.decode(data)
    except (msgspec.DecodeError, ValueError) as exc:
        # ValueError: msgspec lets UnicodeDecodeError out for a string that is not UTF-8.
        raise WireError(f"malformed replication message: {exc}") from None
    if isinstance(wire, _Reply):
        return AppendReply(wire.epoch, wire.sender, wire.ok, wire.durable, wire.hint, wire.read)
    if isinstance(wire, _TimeoutNow):
        return TimeoutNow(wire.epoch, wire.leader)
    _check_append(wire)
    entries = tuple(Entry(e.index, e.epoch, e.op) for e in wire.entries)
    return Append(
        wire.epoch, wire.leader, wire.prev_index, wire.prev_epoch, entries, wire.commit, wire.read
    )


def _check_append(m: _Append) -> None:
    if m.prev_epoch > m.epoch or (m.prev_index == 0 and m.prev_epoch != 0):
        raise WireError(f"Append: prev_epoch {m.prev_epoch} at {m.prev_index} in {m.epoch}")
    epoch = m.prev_epoch
    for i, e in enumerate(m.entries, m.prev_index + 1):
        if e.index != i:
            raise WireError(f"Append: entry {e.index} where {i} belongs")
        if not epoch <= e.epoch <= m.epoch:
            raise WireError(f"Append: entry {i} of epoch {e.epoch} (between {epoch}, {m.epoch})")
        epoch = e.epoch
