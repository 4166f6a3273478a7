"""What a replicated stream's log says, and how every replica applies it (docs/REPLICATION.md,
"Applying: an entry is the command, not its effect").

An op is a msgpack array whose first element names its kind, the others its fields in order
(msgspec's array-like tagged structs, as ``replicated.wire`` encodes the replication
messages): a publish (subject, headers, payload, and the time the leader gave it), a message
deleted, a purge, and an expiry up to a time (the leader's clock: replicas run no expiry
timer of their own). The entry a new leader appends first (``core.NOOP``, empty) is no op.

:func:`apply` runs an op on a replica's stream the way a single server runs the request, and
returns what the leader answers with. It reads no clock (the op's time is the stream's clock
meanwhile, :meth:`Stream.at`) and nothing else a server has of its own (the storage budget is
the leader's check before proposing), so replicas in the same state reach the same state and
the same outcome. Request checks that depend on the configuration only (sealed, deny delete)
are the leader's before proposing, as on one server. What fails on this server alone (a full
disk, a failed write: a ``StoreError`` other than the stream's own limits) is raised: the
replica stops rather than differ from the others.

A committed entry that does not decode (a corrupt log, an op of a newer version) is
:class:`OpError`: the replica cannot go on, and stops as on a failed write.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
import orjson

from headwater.server.replicated.wire import Count
from headwater.server.store.base import LimitExceeded

from . import publish
from .replication.storing import store_mirrored
from .streamconfig import StreamConfig, config_from_json, config_to_json

if TYPE_CHECKING:
    from .stream import Stream

__all__ = [
    "ConsumerAdd",
    "ConsumerDelete",
    "ConsumerOp",
    "ConsumerState",
    "DeleteMsg",
    "DropUnneeded",
    "Expire",
    "Mirrored",
    "Op",
    "OpError",
    "Publish",
    "Purge",
    "UpdateConfig",
    "apply",
    "decode",
    "encode",
]


class OpError(ValueError):
    """Bytes in a committed entry that are not an op."""


class _Op(msgspec.Struct, array_like=True, frozen=True, forbid_unknown_fields=True):
    """An op: a msgpack array, its kind (the tag) first, then its fields in order."""


class Publish(_Op, tag=1):
    subject: str
    hdr: bytes
    payload: bytes
    ts: Count
    """ns since the epoch: the leader's clock when it proposed the message."""


class DeleteMsg(_Op, tag=2):
    seq: Count
    erase: bool


class Purge(_Op, tag=3):
    subject: str
    seq: Count
    keep: Count


class Expire(_Op, tag=4):
    now: Count
    """Remove what max_age and TTLs have expired by this time (ns; the leader's clock)."""


class ConsumerAdd(_Op, tag=5):
    """A consumer created, or its config updated (same name): applied by
    :class:`.groupconsumers.GroupConsumers`, not by :func:`apply`."""

    name: str
    config: bytes
    """The config as ``meta.inf`` keeps it (JSON)."""
    created: Count
    """ns since the epoch: when the leader created it (kept across updates)."""


class ConsumerState(_Op, tag=6):
    """A consumer's whole delivery state, as the leader's live consumer has it now (the
    JSON a single server writes to ``o.json``)."""

    name: str
    state: bytes


class ConsumerDelete(_Op, tag=7):
    name: str


class DropUnneeded(_Op, tag=9):
    """Interest retention, after a consumer was deleted: remove those of ``seqs`` that no
    consumer needs at this entry (the leader walks the stream and proposes them in batches;
    each replica decides by its records alike)."""

    seqs: list[Count]


class UpdateConfig(_Op, tag=8):
    """STREAM.UPDATE: the new config (JSON, as ``meta.inf`` keeps it), validated by the
    leader against the config its log had applied."""

    config: bytes


class Mirrored(_Op, tag=10):
    """A message a mirror's leader took from its origin: stored by every replica at the
    origin's sequence (:func:`.replication.storing.store_mirrored`), at ``now``."""

    subject: str
    hdr: bytes
    payload: bytes
    seq: Count
    """Its sequence in the origin."""
    ts: Count
    """Its time in the origin (ns)."""
    now: Count
    """The leader's clock when it proposed it."""


Op = (
    Publish
    | DeleteMsg
    | Purge
    | Expire
    | ConsumerAdd
    | ConsumerState
    | ConsumerDelete
    | DropUnneeded
    | UpdateConfig
    | Mirrored
)
ConsumerOp = ConsumerAdd | ConsumerState | ConsumerDelete | DropUnneeded
Outcome = publish.Outcome | bool | int

_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(Op)


def encode(op: Op) -> bytes:
    return _ENCODER.encode(op)


def encode_config(cfg: StreamConfig) -> bytes:
    """A stream config as a replica group keeps it (an UpdateConfig, a checkpoint): the JSON
    ``meta.inf`` holds."""
    return orjson.dumps(config_to_json(cfg, dynamic_metadata=False))


def decode_config(data: bytes) -> StreamConfig:
    try:
        return config_from_json(orjson.loads(data))
    except Exception as exc:  # any decoding failure: state this replica cannot take
        raise OpError(f"not a stream config: {exc}") from None


def decode(data: bytes) -> Op | None:
    """The op in a committed entry; None for the no-op entry."""
    if not data:
        return None
    try:
        return _DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise OpError(f"not a stream op: {exc}") from None


def apply(
    stream: Stream, op: Publish | DeleteMsg | Purge | Expire | UpdateConfig | Mirrored
) -> Outcome:
    """Run ``op`` on ``stream``; what the leader answers with: for a publish, what
    :func:`publish.admit` decided (a stored sequence, a duplicate, or the error nats-server
    gives); for a delete, whether the message was there; for a purge and an expiry, how many
    messages went."""
    match op:
        case Publish():
            with stream.at(op.ts):
                outcome = publish.admit(
                    stream, op.subject, op.hdr or None, op.payload, applying=True
                )
            if outcome is publish.HOLD:
                # The owner loads the window before it applies anything: a replica cannot
                # wait in the middle of its log.
                raise RuntimeError(f"stream {stream.name!r}: duplicate window not loaded")
            return outcome
        case DeleteMsg():
            return op.seq > 0 and stream.store.remove_msg(op.seq, op.erase)
        case Purge():
            return stream.purge(op.subject, op.seq, op.keep)
        case Expire():
            with stream.at(op.now):
                return stream.store.expire(now_ns=op.now)
        case UpdateConfig():
            stream.reconfigure(decode_config(op.config))
            return True
        case Mirrored():
            try:
                with stream.at(op.now):
                    return store_mirrored(stream, op.subject, op.hdr, op.payload, op.seq, op.ts)
            except LimitExceeded:
                return 0  # the mirror's own discard-new limit: alike on every replica
