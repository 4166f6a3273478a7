"""The consumer configuration: its type, how CONSUMER.CREATE requests decode, and its JSON shape.

``ConsumerConfig`` holds every field of the reference's ConsumerConfig at the 2.12 level.
Durations are nanosecond integers and times (``opt_start_time``, ``pause_until``) are kept as
the RFC 3339 text the client sent, because the reference echoes that text back unchanged.
Instances are frozen; derive changed copies with :func:`msgspec.structs.replace`.

Requests decode with Go ``encoding/json`` semantics (see :mod:`.gojson`), so odd bodies are
accepted or refused as nats-server does. :func:`parse_consumer_request` then applies the
checks the reference's API handler makes before it looks at the stream, in its order
(checked against nats-server 2.15.1):

decode (10025) -> stream name in the body vs the subject (10056) -> path separators in the
subject's consumer name (10127) -> durable name vs the subject (10016-10020) -> the subject's
filter vs the config (10137, 10131) -> path separators in the config's names (10127) -> more
than one replica (10074; Headwater is never clustered).

Defaults and validation against the stream live in :mod:`.consumerconfig_validate`; what an
update may change lives in :mod:`.consumerconfig_update`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from . import errors
from .gojson import GoJSONError, GoType, decode_struct, go_quote, loads
from .versioning import with_dynamic_metadata

__all__ = [
    "ACTIONS",
    "DEFAULT_EPHEMERAL_INACTIVE",
    "ConsumerConfig",
    "ConsumerRequest",
    "consumer_api_level",
    "consumer_config_from_json",
    "consumer_config_to_json",
    "is_durable",
    "parse_consumer_request",
]

DeliverPolicy = Literal[
    "all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject"
]
AckPolicy = Literal["none", "all", "explicit"]
ReplayPolicy = Literal["instant", "original"]
PriorityPolicy = Literal["none", "overflow", "pinned_client", "prioritized"]
Action = Literal["", "create", "update"]

#: How long (ns) a consumer without a durable name survives without interest, by default.
DEFAULT_EPHEMERAL_INACTIVE = 5_000_000_000

#: The request's ``action`` values: create-or-update (empty), create only, update only.
ACTIONS: tuple[Action, ...] = ("", "create", "update")


class ConsumerConfig(msgspec.Struct, frozen=True, omit_defaults=False, kw_only=True):
    """A consumer's configuration. Defaults are the JSON zero values, as a request decodes them;
    :func:`.consumerconfig_validate.apply_consumer_defaults` turns them into server defaults."""

    durable_name: str = ""
    name: str = ""
    description: str = ""
    deliver_policy: DeliverPolicy = "all"
    opt_start_seq: int = 0
    opt_start_time: str | None = None
    ack_policy: AckPolicy = "none"
    ack_wait: int = 0
    max_deliver: int = 0
    backoff: tuple[int, ...] = ()
    filter_subject: str = ""
    filter_subjects: tuple[str, ...] = ()
    replay_policy: ReplayPolicy = "instant"
    rate_limit_bps: int = 0
    sample_freq: str = ""
    max_waiting: int = 0
    max_ack_pending: int = 0
    flow_control: bool = False
    headers_only: bool = False
    max_batch: int = 0
    max_expires: int = 0
    max_bytes: int = 0
    deliver_subject: str = ""
    deliver_group: str = ""
    idle_heartbeat: int = 0
    inactive_threshold: int = 0
    num_replicas: int = 0
    mem_storage: bool = False
    direct: bool = False
    metadata: dict[str, str] = msgspec.field(default_factory=dict)
    pause_until: str | None = None
    priority_groups: tuple[str, ...] = ()
    priority_policy: PriorityPolicy = "none"
    priority_timeout: int = 0


class ConsumerRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A decoded CONSUMER.CREATE request after the handler-level checks."""

    stream_name: str
    config: ConsumerConfig
    action: Action = ""
    pedantic: bool = False


def is_durable(cfg: ConsumerConfig) -> bool:
    """Durable consumers survive inactivity; only ``durable_name`` makes one (not ``name``)."""
    return bool(cfg.durable_name)


def consumer_api_level(cfg: ConsumerConfig) -> int:
    """ADR-44 ``_nats.req.level``: 1 when the config pauses or uses priority groups (2.11).

    The reference rates the request as sent, before defaults: a negative ``priority_timeout``
    (later clamped to 0) still counts.
    """
    uses_priority = cfg.priority_policy != "none" or cfg.priority_groups or cfg.priority_timeout
    return 1 if cfg.pause_until is not None or uses_priority else 0


# --- the request's Go types ----------------------------------------------------------------


def _quoted_enum(go_name: str, values: tuple[str, ...]) -> GoType:
    # DeliverPolicy/AckPolicy/ReplayPolicy unmarshalers quote the raw bytes they refused.
    return GoType(
        go_name,
        "enum",
        enum=frozenset(values),
        enum_error=lambda raw: f"can not unmarshal {go_quote(raw)}",
    )


def _plain_enum(go_name: str, values: tuple[str, ...], what: str) -> GoType:
    # PriorityPolicy and ConsumerAction print the raw bytes unquoted after their own prefix.
    return GoType(
        go_name, "enum", enum=frozenset(values), enum_error=lambda raw: f"unknown {what}: {raw}"
    )


_STR = GoType("string", "str")
_BOOL = GoType("bool", "bool")
_INT = GoType("int", "int")
_UINT64 = GoType("uint64", "int")
_DURATION = GoType("time.Duration", "int")
_STRS = GoType("[]string", "strs")
_TIME = GoType("time.Time", "time", pointer=True)
_DELIVER_POLICIES = (
    "all",
    "undefined",  # the reference reads its own String() of an unknown policy back as "all"
    "last",
    "new",
    "by_start_sequence",
    "by_start_time",
    "last_per_subject",
)
_CONFIG = GoType(
    "server.ConsumerConfig",
    "struct",
    {
        "durable_name": _STR,
        "name": _STR,
        "description": _STR,
        "deliver_policy": _quoted_enum("server.DeliverPolicy", _DELIVER_POLICIES),
        "opt_start_seq": _UINT64,
        "opt_start_time": _TIME,
        "ack_policy": _quoted_enum("server.AckPolicy", ("none", "all", "explicit")),
        "ack_wait": _DURATION,
        "max_deliver": _INT,
        # A slice of durations: each element decodes (and is worded) as a time.Duration.
        "backoff": GoType("[]time.Duration", "structs", {"[]": _DURATION}),
        "filter_subject": _STR,
        "filter_subjects": _STRS,
        "replay_policy": _quoted_enum("server.ReplayPolicy", ("instant", "original")),
        "rate_limit_bps": _UINT64,
        "sample_freq": _STR,
        "max_waiting": _INT,
        "max_ack_pending": _INT,
        "flow_control": _BOOL,
        "headers_only": _BOOL,
        "max_batch": _INT,
        "max_expires": _DURATION,
        "max_bytes": _INT,
        "deliver_subject": _STR,
        "deliver_group": _STR,
        "idle_heartbeat": _DURATION,
        "inactive_threshold": _DURATION,
        "num_replicas": _INT,
        "mem_storage": _BOOL,
        "direct": _BOOL,
        "metadata": GoType("map[string]string", "strmap"),
        "pause_until": _TIME,
        "priority_groups": _STRS,
        "priority_policy": _plain_enum(
            "server.PriorityPolicy",
            ("none", "overflow", "pinned_client", "prioritized"),
            "priority policy",
        ),
        "priority_timeout": _DURATION,
    },
)
_REQUEST = GoType(
    "server.CreateConsumerRequest",
    "struct",
    {
        "stream_name": _STR,
        "config": _CONFIG,
        "action": _plain_enum("server.ConsumerAction", ("", "create", "update"), "consumer action"),
        "pedantic": _BOOL,
    },
)

_NULLABLE = frozenset({"opt_start_time", "pause_until"})


def consumer_config_from_json(data: Mapping[str, Any]) -> ConsumerConfig:
    """Build a config from already-decoded JSON (a stored config, a decoded request)."""
    fields = {k: v for k, v in data.items() if v is not None or k in _NULLABLE}
    if fields.get("deliver_policy") == "undefined":
        fields["deliver_policy"] = "all"
    if "backoff" in fields:
        fields["backoff"] = [0 if v is None else v for v in fields["backoff"]]
    return msgspec.convert(fields, ConsumerConfig)


def _has_path_separator(name: str) -> bool:
    return "/" in name or "\\" in name


def parse_consumer_request(
    body: bytes,
    stream_in_subject: str,
    name_in_subject: str | None,
    filter_in_subject: str | None,
    *,
    legacy_durable: bool = False,
    clustered: bool = False,
) -> ConsumerRequest:
    """Decode a CONSUMER.CREATE body and make the API handler's checks (see module docs).

    ``name_in_subject`` is the consumer token of ``CONSUMER.CREATE.<s>.<c>[.<filter>]`` and
    ``filter_in_subject`` the rest of that subject (None when absent). ``legacy_durable``
    selects ``CONSUMER.DURABLE.CREATE.<s>.<c>``, which demands a durable name matching the
    subject. A consumer name in the subject replaces the body's ``name`` (on either subject
    form), as the reference does. An empty body is an empty request (so it fails on the stream
    name, 10056). ``num_replicas`` above 1 is for a cluster's servers (``clustered``): 10074
    on a single server.
    """
    text = body.decode("utf-8", errors="replace")
    try:
        raw = loads(text) if text.strip(" \t\r\n") else None
        fields = decode_struct(raw, _REQUEST, "CreateConsumerRequest")
    except GoJSONError as exc:
        raise errors.INVALID_JSON.exc(err=exc.message) from None
    cfg = consumer_config_from_json(fields.get("config") or {})
    stream_name = fields.get("stream_name", "")
    if stream_name != stream_in_subject:
        raise errors.STREAM_MISMATCH.exc()
    if name_in_subject is not None and _has_path_separator(name_in_subject):
        raise errors.CONSUMER_NAME_CONTAINS_PATH_SEPARATORS.exc()
    cfg = _check_names(cfg, name_in_subject, legacy_durable)
    if filter_in_subject is not None:
        if cfg.filter_subjects:
            raise errors.CONSUMER_MULTIPLE_FILTERS_NOT_ALLOWED.exc()
        if cfg.filter_subject != filter_in_subject:
            raise errors.CONSUMER_CREATE_FILTER_SUBJECT_MISMATCH.exc()
    if _has_path_separator(cfg.name) or _has_path_separator(cfg.durable_name):
        raise errors.CONSUMER_NAME_CONTAINS_PATH_SEPARATORS.exc()
    if cfg.num_replicas > 1 and not clustered:
        raise errors.STREAM_REPLICAS_NOT_SUPPORTED.exc()
    return ConsumerRequest(
        stream_name=stream_name,
        config=cfg,
        action=fields.get("action", ""),
        pedantic=bool(fields.get("pedantic", False)),
    )


def _check_names(
    cfg: ConsumerConfig, name_in_subject: str | None, legacy_durable: bool
) -> ConsumerConfig:
    if legacy_durable:
        if name_in_subject is None:
            raise errors.CONSUMER_DURABLE_NAME_NOT_IN_SUBJECT.exc()
        if not cfg.durable_name:
            raise errors.CONSUMER_DURABLE_NAME_NOT_SET.exc()
        if cfg.durable_name != name_in_subject:
            raise errors.CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT.exc()
        return msgspec.structs.replace(cfg, name=name_in_subject)
    if name_in_subject is None:
        if cfg.durable_name:
            raise errors.CONSUMER_EPHEMERAL_WITH_DURABLE_NAME.exc()
        return cfg
    if cfg.durable_name and cfg.durable_name != name_in_subject:
        raise errors.CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT.exc()
    return msgspec.structs.replace(cfg, name=name_in_subject)


# --- the response shape --------------------------------------------------------------------

# Fields in the reference's struct order with their omitempty-ness (False = always written).
_ORDER: tuple[tuple[str, bool], ...] = (
    ("durable_name", True),
    ("name", True),
    ("description", True),
    ("deliver_policy", False),
    ("opt_start_seq", True),
    ("opt_start_time", True),
    ("ack_policy", False),
    ("ack_wait", True),
    ("max_deliver", True),
    ("backoff", True),
    ("filter_subject", True),
    ("filter_subjects", True),
    ("replay_policy", False),
    ("rate_limit_bps", True),
    ("sample_freq", True),
    ("max_waiting", True),
    ("max_ack_pending", True),
    ("flow_control", True),
    ("headers_only", True),
    ("max_batch", True),
    ("max_expires", True),
    ("max_bytes", True),
    ("deliver_subject", True),
    ("deliver_group", True),
    ("idle_heartbeat", True),
    ("inactive_threshold", True),
    ("num_replicas", False),
    ("mem_storage", True),
    ("direct", True),
    ("metadata", True),
    ("pause_until", True),
    ("priority_groups", True),
    ("priority_policy", True),
    ("priority_timeout", True),
)


def consumer_config_to_json(
    cfg: ConsumerConfig, *, dynamic_metadata: bool = True
) -> dict[str, Any]:
    """The config as ConsumerInfo.config carries it: reference key order, ``omitempty`` honoured.

    ``dynamic_metadata`` adds ``_nats.ver``/``_nats.level`` for API responses; store the config
    with it off. ``priority_policy`` is omitted when ``none`` (its Go zero value).
    """
    out: dict[str, Any] = {}
    for name, omit_empty in _ORDER:
        value = getattr(cfg, name)
        if name == "metadata":
            value = with_dynamic_metadata(value) if dynamic_metadata else value
            value = dict(sorted(value.items()))
        elif name == "priority_policy" and value == "none":
            continue
        elif isinstance(value, tuple):
            value = list(value)
        if omit_empty and not value:
            continue
        out[name] = value
    return out
