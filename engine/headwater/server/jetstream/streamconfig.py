"""The stream configuration: its type, how requests decode into it, and its JSON shape.

``StreamConfig`` holds every field of the reference's StreamConfig at the 2.12 level, plus
``template_owner`` (the reference dropped stream templates in 2.14; Headwater keeps them).
Durations are nanosecond integers, as on the wire. Instances are frozen; derive changed
copies with :func:`msgspec.structs.replace`.

Requests are decoded with Go ``encoding/json`` semantics (see :mod:`.gojson`) so that odd
bodies are accepted or refused exactly as nats-server does, and refusals carry its wording.
Responses are shaped by :func:`config_to_json`, which omits the fields the reference tags
``omitempty`` so that clients that round-trip the config (nats-py's ``StreamConfig.
from_response`` then ``as_dict``) send back what they received.

Validation lives in :mod:`.streamconfig_validate` (create and the checks shared with update)
and :mod:`.streamconfig_update` (what an update may change).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from . import errors
from .gojson import GoJSONError, GoType, Obj, decode_struct, go_quote, loads
from .versioning import with_dynamic_metadata

__all__ = [
    "ConsumerLimits",
    "ExternalStream",
    "Placement",
    "RePublish",
    "StreamConfig",
    "StreamSource",
    "SubjectTransform",
    "config_from_json",
    "config_to_json",
    "parse_stream_request",
]

Retention = Literal["limits", "interest", "workqueue"]
Discard = Literal["old", "new"]
Storage = Literal["file", "memory"]
Compression = Literal["none", "s2"]
PersistMode = Literal["default", "async"]


class SubjectTransform(msgspec.Struct, frozen=True, omit_defaults=False):
    """``{src, dest}``: rewrite subjects matching ``src`` to ``dest``."""

    src: str = ""
    dest: str = ""


class Placement(msgspec.Struct, frozen=True, omit_defaults=False):
    cluster: str = ""
    tags: tuple[str, ...] = ()
    preferred: str = ""


class ExternalStream(msgspec.Struct, frozen=True, omit_defaults=False):
    """Where a sourced or mirrored stream lives when it is in another account or domain."""

    api: str = ""
    deliver: str = ""


class StreamSource(msgspec.Struct, frozen=True, omit_defaults=False):
    """A mirror or source. ``opt_start_time`` is kept as its RFC 3339 text."""

    name: str = ""
    opt_start_seq: int = 0
    opt_start_time: str | None = None
    filter_subject: str = ""
    subject_transforms: tuple[SubjectTransform, ...] = ()
    external: ExternalStream | None = None


class RePublish(msgspec.Struct, frozen=True, omit_defaults=False):
    src: str = ""
    dest: str = ""
    headers_only: bool = False


class ConsumerLimits(msgspec.Struct, frozen=True, omit_defaults=False):
    """Defaults (and ceilings) for the stream's consumers; ``inactive_threshold`` in ns."""

    inactive_threshold: int = 0
    max_ack_pending: int = 0


class StreamConfig(msgspec.Struct, frozen=True, omit_defaults=False, kw_only=True):
    """A stream's configuration. Defaults are the JSON zero values, as a request decodes them;
    :func:`.streamconfig_validate.apply_defaults` turns them into the server's defaults."""

    name: str = ""
    description: str = ""
    subjects: tuple[str, ...] = ()
    retention: Retention = "limits"
    max_consumers: int = 0
    max_msgs: int = 0
    max_bytes: int = 0
    max_age: int = 0
    max_msgs_per_subject: int = 0
    max_msg_size: int = 0
    discard: Discard = "old"
    storage: Storage = "file"
    num_replicas: int = 0
    no_ack: bool = False
    template_owner: str = ""
    duplicate_window: int = 0
    placement: Placement | None = None
    mirror: StreamSource | None = None
    sources: tuple[StreamSource, ...] = ()
    compression: Compression = "none"
    first_seq: int = 0
    subject_transform: SubjectTransform | None = None
    republish: RePublish | None = None
    allow_direct: bool = False
    mirror_direct: bool = False
    discard_new_per_subject: bool = False
    sealed: bool = False
    deny_delete: bool = False
    deny_purge: bool = False
    allow_rollup_hdrs: bool = False
    consumer_limits: ConsumerLimits = ConsumerLimits()
    allow_msg_ttl: bool = False
    subject_delete_marker_ttl: int = 0
    allow_msg_counter: bool = False
    allow_atomic: bool = False
    allow_msg_schedules: bool = False
    persist_mode: PersistMode = "default"
    metadata: dict[str, str] = msgspec.field(default_factory=dict)


# --- the request's Go types ----------------------------------------------------------------


def _enum(go_name: str, values: tuple[str, ...]) -> GoType:
    # The reference's enum unmarshalers quote the raw JSON bytes they refused.
    return GoType(
        go_name,
        "enum",
        enum=frozenset(values),
        enum_error=lambda raw: f"can not unmarshal {go_quote(raw)}",
    )


def _compression_error(raw: str) -> str:
    # StoreCompression decodes into a Go string first, then matches it.
    if raw == "null" or raw.startswith('"'):
        return "unknown compression algorithm"
    kind = {"{": "object", "[": "array", "t": "bool", "f": "bool"}.get(raw[0], "number")
    return f"json: cannot unmarshal {kind} into Go value of type string"


_STR = GoType("string", "str")
_BOOL = GoType("bool", "bool")
_INT = GoType("int", "int")
_INT32 = GoType("int32", "int")
_INT64 = GoType("int64", "int")
_UINT64 = GoType("uint64", "int")
_DURATION = GoType("time.Duration", "int")
_STRS = GoType("[]string", "strs")
_TRANSFORM = GoType("server.SubjectTransformConfig", "struct", {"src": _STR, "dest": _STR})
_TRANSFORM_PTR = GoType(_TRANSFORM.name, "struct", _TRANSFORM.fields, pointer=True)
_EXTERNAL = GoType("server.ExternalStream", "struct", {"api": _STR, "deliver": _STR}, pointer=True)
_SOURCE = GoType(
    "server.StreamSource",
    "struct",
    {
        "name": _STR,
        "opt_start_seq": _UINT64,
        "opt_start_time": GoType("time.Time", "time", pointer=True),
        "filter_subject": _STR,
        "subject_transforms": GoType(
            "[]server.SubjectTransformConfig", "structs", {"[]": _TRANSFORM}
        ),
        "external": _EXTERNAL,
    },
    pointer=True,
)
_REQUEST = GoType(
    "server.StreamConfigRequest",
    "struct",
    {
        "name": _STR,
        "description": _STR,
        "subjects": _STRS,
        "retention": _enum("server.RetentionPolicy", ("limits", "interest", "workqueue")),
        "max_consumers": _INT,
        "max_msgs": _INT64,
        "max_bytes": _INT64,
        "max_age": _DURATION,
        "max_msgs_per_subject": _INT64,
        "max_msg_size": _INT32,
        "discard": _enum("server.DiscardPolicy", ("old", "new")),
        "storage": _enum("server.StorageType", ("file", "memory")),
        "num_replicas": _INT,
        "no_ack": _BOOL,
        "template_owner": _STR,
        "duplicate_window": _DURATION,
        "placement": GoType(
            "server.Placement",
            "struct",
            {"cluster": _STR, "tags": _STRS, "preferred": _STR},
            pointer=True,
        ),
        "mirror": _SOURCE,
        "sources": GoType("[]*server.StreamSource", "structs", {"[]": _SOURCE}),
        "compression": GoType(
            "server.StoreCompression",
            "enum",
            enum=frozenset({"none", "s2"}),
            enum_error=_compression_error,
        ),
        "first_seq": _UINT64,
        "subject_transform": _TRANSFORM_PTR,
        "republish": GoType(
            "server.RePublish",
            "struct",
            {"src": _STR, "dest": _STR, "headers_only": _BOOL},
            pointer=True,
        ),
        "allow_direct": _BOOL,
        "mirror_direct": _BOOL,
        "discard_new_per_subject": _BOOL,
        "sealed": _BOOL,
        "deny_delete": _BOOL,
        "deny_purge": _BOOL,
        "allow_rollup_hdrs": _BOOL,
        "consumer_limits": GoType(
            "server.StreamConsumerLimits",
            "struct",
            {"inactive_threshold": _DURATION, "max_ack_pending": _INT},
        ),
        "allow_msg_ttl": _BOOL,
        "subject_delete_marker_ttl": _DURATION,
        "allow_msg_counter": _BOOL,
        "allow_atomic": _BOOL,
        "allow_msg_schedules": _BOOL,
        "persist_mode": _enum("server.PersistModeType", ("default", "async")),
        "metadata": GoType("map[string]string", "strmap"),
        "pedantic": _BOOL,
    },
)


def _drop_nil(value: Any) -> Any:
    """Go nil slices and maps become our empty defaults; a nil source pointer an empty one."""
    if isinstance(value, dict):
        return {k: _drop_nil(v) for k, v in value.items() if v is not None or k in _NULLABLE}
    if isinstance(value, list):
        return [{} if v is None else _drop_nil(v) for v in value]
    return value


_NULLABLE = frozenset(
    {"placement", "mirror", "subject_transform", "republish", "external", "opt_start_time"}
)


def config_from_json(data: Mapping[str, Any]) -> StreamConfig:
    """Build a config from already-decoded JSON (e.g. one we stored); field names exact."""
    return msgspec.convert(_drop_nil(dict(data)), StreamConfig)


def parse_stream_request(
    body: bytes, name_in_subject: str, *, check_name: bool = True
) -> tuple[StreamConfig, bool]:
    """Decode a ``STREAM.CREATE``/``UPDATE`` body; returns the config and its ``pedantic`` flag.

    An empty (or all-whitespace) body is an empty config, as the reference treats it. Raises
    ``ApiErrorException`` with 10025 for undecodable JSON and, when ``check_name`` is set, 10056
    when the body's name differs from the subject's. (The reference checks the name before
    validating on create but after validating on update; pass ``check_name=False`` there and
    call :func:`.streamconfig_validate.check_subject_name` at that point.)
    """
    text = body.decode("utf-8", errors="replace")
    try:
        raw = loads(text) if text.strip(" \t\r\n") else None
        fields = decode_struct(raw, _REQUEST, "StreamConfigRequest")
    except GoJSONError as exc:
        raise errors.INVALID_JSON.exc(err=exc.message) from None
    _refuse_origin_consumer(raw)
    pedantic = bool(fields.pop("pedantic", False))
    cfg = config_from_json(fields)
    if check_name and cfg.name != name_in_subject:
        raise errors.STREAM_MISMATCH.exc()
    return cfg, pedantic


def _member(obj: object, key: str) -> Any:
    """A member of a decoded JSON object as Go finds it: the last match, case-insensitive."""
    found = None
    if isinstance(obj, Obj):
        for name, value in obj:
            if name.lower() == key:
                found = value
    return found


def _refuse_origin_consumer(raw: object) -> None:
    """10052 for the 2.14 ``consumer`` member of a mirror or source (durable flow-control
    consumers on the origin), which we do not run: dropping it would leave the client
    believing its link uses the consumer it named."""
    if _member(_member(raw, "mirror"), "consumer") is not None:
        raise errors.STREAM_INVALID_CONFIG.exc(
            err="mirror consumer configuration is not supported yet"
        )
    sources = _member(raw, "sources")
    if isinstance(sources, list) and any(_member(s, "consumer") is not None for s in sources):
        raise errors.STREAM_INVALID_CONFIG.exc(
            err="source consumer configuration is not supported yet"
        )


# --- the response shape --------------------------------------------------------------------


def _transform_json(t: SubjectTransform) -> dict[str, Any]:
    return {"src": t.src, "dest": t.dest}


def _source_json(s: StreamSource) -> dict[str, Any]:
    out: dict[str, Any] = {"name": s.name}
    if s.opt_start_seq:
        out["opt_start_seq"] = s.opt_start_seq
    if s.opt_start_time is not None:
        out["opt_start_time"] = s.opt_start_time
    if s.filter_subject:
        out["filter_subject"] = s.filter_subject
    if s.subject_transforms:
        out["subject_transforms"] = [_transform_json(t) for t in s.subject_transforms]
    if s.external is not None:
        out["external"] = {"api": s.external.api, "deliver": s.external.deliver}
    return out


def _placement_json(p: Placement) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if p.cluster:
        out["cluster"] = p.cluster
    if p.tags:
        out["tags"] = list(p.tags)
    if p.preferred:
        out["preferred"] = p.preferred
    return out


def config_to_json(cfg: StreamConfig, *, dynamic_metadata: bool = True) -> dict[str, Any]:
    """The config as the reference serializes it, keys in its order, ``omitempty`` honoured.

    ``dynamic_metadata`` adds ``_nats.ver``/``_nats.level`` for API responses; store the
    config with it off. Metadata keys are sorted, as Go marshals maps.
    """
    out: dict[str, Any] = {"name": cfg.name}
    if cfg.description:
        out["description"] = cfg.description
    if cfg.subjects:
        out["subjects"] = list(cfg.subjects)
    out |= {
        "retention": cfg.retention,
        "max_consumers": cfg.max_consumers,
        "max_msgs": cfg.max_msgs,
        "max_bytes": cfg.max_bytes,
        "max_age": cfg.max_age,
        "max_msgs_per_subject": cfg.max_msgs_per_subject,
    }
    if cfg.max_msg_size:
        out["max_msg_size"] = cfg.max_msg_size
    out |= {"discard": cfg.discard, "storage": cfg.storage, "num_replicas": cfg.num_replicas}
    if cfg.no_ack:
        out["no_ack"] = True
    if cfg.template_owner:
        out["template_owner"] = cfg.template_owner
    if cfg.duplicate_window:
        out["duplicate_window"] = cfg.duplicate_window
    if cfg.placement is not None:
        out["placement"] = _placement_json(cfg.placement)
    if cfg.mirror is not None:
        out["mirror"] = _source_json(cfg.mirror)
    if cfg.sources:
        out["sources"] = [_source_json(s) for s in cfg.sources]
    out["compression"] = cfg.compression
    if cfg.first_seq:
        out["first_seq"] = cfg.first_seq
    if cfg.subject_transform is not None:
        out["subject_transform"] = _transform_json(cfg.subject_transform)
    if cfg.republish is not None:
        republish: dict[str, Any] = {"dest": cfg.republish.dest}
        if cfg.republish.src:
            republish = {"src": cfg.republish.src} | republish
        if cfg.republish.headers_only:
            republish["headers_only"] = True
        out["republish"] = republish
    out |= {"allow_direct": cfg.allow_direct, "mirror_direct": cfg.mirror_direct}
    if cfg.discard_new_per_subject:
        out["discard_new_per_subject"] = True
    limits: dict[str, Any] = {}
    if cfg.consumer_limits.inactive_threshold:
        limits["inactive_threshold"] = cfg.consumer_limits.inactive_threshold
    if cfg.consumer_limits.max_ack_pending:
        limits["max_ack_pending"] = cfg.consumer_limits.max_ack_pending
    out |= {
        "sealed": cfg.sealed,
        "deny_delete": cfg.deny_delete,
        "deny_purge": cfg.deny_purge,
        "allow_rollup_hdrs": cfg.allow_rollup_hdrs,
        "consumer_limits": limits,
        "allow_msg_ttl": cfg.allow_msg_ttl,
    }
    if cfg.subject_delete_marker_ttl:
        out["subject_delete_marker_ttl"] = cfg.subject_delete_marker_ttl
    for flag in ("allow_msg_counter", "allow_atomic", "allow_msg_schedules"):
        if getattr(cfg, flag):
            out[flag] = True
    if cfg.persist_mode != "default":
        out["persist_mode"] = cfg.persist_mode
    metadata = with_dynamic_metadata(cfg.metadata) if dynamic_metadata else cfg.metadata
    if metadata:
        out["metadata"] = dict(sorted(metadata.items()))
    return out
