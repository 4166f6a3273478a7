"""Defaults and validation of a stream config, and the STREAM.CREATE decision.

:func:`check_stream_config` follows the reference's ``checkStreamCfg`` step by step: it fills
defaults and validates in one pass, because the order decides which error a client sees when a
config is wrong in several ways (and pedantic mode turns some silent corrections into errors).
The texts of 10052 "invalid stream config" errors are the reference's own.

The order of the whole CREATE request (checked against nats-server 2.15.1):
decode (10025) -> name in subject (10056) -> path separators in the name (10128) -> sealed ->
mirror_direct without a mirror -> :func:`check_stream_config` -> features Headwater does not
run yet -> replicas > 1 (10074, we are never clustered) -> same name exists (identical config:
idempotent success; otherwise 10058) -> subjects overlap another stream (10065).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import msgspec

from . import errors
from .gojson import go_quote
from .streamconfig import Placement, StreamConfig, parse_stream_request
from .streamconfig_sources import check_sources, is_valid_asset_name
from .subject_overlap import CollisionIndex
from .subject_rules import (
    BAD_SUBJECT,
    is_subset_match,
    is_valid_subject,
    subjects_collide,
    transform_error,
    validate_mapping,
)
from .versioning import DYNAMIC_METADATA_KEYS, REQUIRED_LEVEL_KEY, with_static_metadata

__all__ = [
    "CLUSTER_LIMITS",
    "NO_LIMITS",
    "CreateOutcome",
    "StreamLimits",
    "apply_defaults",
    "check_replicas",
    "check_stream_config",
    "check_subject_name",
    "check_subjects_free",
    "create_stream_request",
    "go_duration",
    "refuse_templated",
    "refuse_unsupported",
    "required_api_level",
    "same_config",
    "validate_create",
]

SECOND = 1_000_000_000
DEFAULT_DUPLICATE_WINDOW = 120 * SECOND
MIN_WINDOW = 100_000_000  # 100ms: the smallest max_age / duplicate_window accepted
MAX_REPLICAS = 5
MAX_NAME_LEN = 255
MAX_DESCRIPTION_LEN = 4 * 1024
MAX_METADATA_LEN = 128 * 1024
_LIMIT_FIELDS = ("max_msgs", "max_msgs_per_subject", "max_bytes", "max_msg_size", "max_consumers")


@dataclass(frozen=True)
class StreamLimits:
    """Server and account limits a stream config must respect (zero means no limit)."""

    max_duplicate_window: int = 0
    """ns; nats-server's ``jetstream { limits { duplicate_window } }``."""
    max_bytes_required: bool = False
    """The account demands ``max_bytes`` on every stream (10113)."""
    memory_max_stream_bytes: int = 0
    """Account ceiling on ``max_bytes`` for memory streams (10122)."""
    storage_max_stream_bytes: int = 0
    """Account ceiling on ``max_bytes`` for file streams (10122)."""
    clustered: bool = False
    """The server is part of a cluster. A single server refuses more than one replica as
    nats-server does (10074); a cluster refuses them as not built yet (10052)."""


NO_LIMITS = StreamLimits()
CLUSTER_LIMITS = StreamLimits(clustered=True)

REPLICATED_TEMPLATES_NOT_YET = "templates of replicated streams are not supported yet"


def check_replicas(cfg: StreamConfig, limits: StreamLimits) -> None:
    """More than one replica: 10074 on a single server (nats-server's answer too)."""
    if cfg.num_replicas <= 1:
        return
    if not limits.clustered:
        raise errors.STREAM_REPLICAS_NOT_SUPPORTED.exc()


def refuse_templated(cfg: StreamConfig) -> None:
    """10052 for a template of replicated streams: templates stay with the server they were
    made on (docs/CLUSTERING.md), and their streams are made there alone."""
    if cfg.num_replicas > 1:
        raise errors.STREAM_INVALID_CONFIG.exc(err=REPLICATED_TEMPLATES_NOT_YET)


@dataclass(frozen=True)
class CreateOutcome:
    """What a valid STREAM.CREATE means: ``config`` to create, or ``existing`` to report."""

    config: StreamConfig
    existing: bool = False
    """True when a stream of that name already has this very config (create is idempotent)."""


def _invalid(text: str) -> errors.ApiErrorException:
    return errors.STREAM_INVALID_CONFIG.exc(err=text)


def _pedantic(text: str) -> errors.ApiErrorException:
    return errors.PEDANTIC.exc(err=text)


def go_duration(ns: int) -> str:
    """Go's ``time.Duration.String()`` (``2m0s``, ``1.5s``, ``100ms``), for error texts."""
    if ns == 0:
        return "0s"
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    if ns < SECOND:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= size:
                return sign + _decimal(ns, size) + unit
    hours, rest = divmod(ns, 3600 * SECOND)
    minutes, rest = divmod(rest, 60 * SECOND)
    text = _decimal(rest, SECOND) + "s"
    if hours or minutes:
        text = f"{minutes}m" + text
    if hours:
        text = f"{hours}h" + text
    return sign + text


def _decimal(value: int, unit: int) -> str:
    whole, frac = divmod(value, unit)
    if not frac:
        return str(whole)
    digits = str(frac).rjust(len(str(unit)) - 1, "0").rstrip("0")
    return f"{whole}.{digits}"


def _blen(text: str) -> int:
    return len(text.encode())


def required_api_level(cfg: StreamConfig) -> int:
    """ADR-44 ``_nats.req.level`` of a config: 1 when it uses per-message TTLs (2.11)."""
    return 1 if cfg.allow_msg_ttl or cfg.subject_delete_marker_ttl > 0 else 0


def _default_duplicates(cfg: StreamConfig, limits: StreamLimits, pedantic: bool) -> int:
    window = DEFAULT_DUPLICATE_WINDOW
    if 0 < limits.max_duplicate_window < window:
        if pedantic:
            raise _pedantic("duplicate window limits are higher than current limits")
        window = limits.max_duplicate_window
    if cfg.max_age != 0 and cfg.max_age < window:
        if pedantic:
            raise _pedantic("duplicate window cannot be bigger than max age")
        return cfg.max_age
    return window


def apply_defaults(cfg: StreamConfig, limits: StreamLimits = NO_LIMITS) -> StreamConfig:
    """The server's defaults for ``cfg``, without validating it.

    Replicas 0 -> 1; zero (or below -1) limits -> -1; the duplicate window -> 2m, or
    ``max_age`` when shorter (none for mirrors and sourcing streams); subjects -> ``[name]``
    (not for mirrors or sourcing streams); subject delete markers and schedules switch on what
    they depend on; an empty republish source means ``>``; an empty placement is dropped; and
    ``_nats.req.level`` is set in the metadata.
    """
    changes: dict[str, object] = {}
    if cfg.num_replicas == 0:
        changes["num_replicas"] = 1
    for name in _LIMIT_FIELDS:
        if getattr(cfg, name) == 0 or getattr(cfg, name) < -1:
            changes[name] = -1
    if cfg.duplicate_window == 0 and cfg.mirror is None and not cfg.sources:
        changes["duplicate_window"] = _default_duplicates(cfg, limits, pedantic=False)
    cfg = msgspec.structs.replace(cfg, **changes)
    cfg = _implied_flags(cfg, pedantic=False)
    if not cfg.subjects and cfg.mirror is None and not cfg.sources:
        cfg = msgspec.structs.replace(cfg, subjects=(cfg.name,))
    cfg = _default_republish(cfg, pedantic=False)
    if cfg.placement is not None and cfg.placement == Placement():
        cfg = msgspec.structs.replace(cfg, placement=None)
    return _with_static_metadata(cfg)


def _with_static_metadata(cfg: StreamConfig) -> StreamConfig:
    metadata = with_static_metadata(cfg.metadata, required_api_level(cfg))
    return msgspec.structs.replace(cfg, metadata=metadata)


def _marker_flags(cfg: StreamConfig, *, pedantic: bool) -> StreamConfig:
    """Subject delete markers are TTL'd messages placed by roll-up: they switch both on."""
    if cfg.subject_delete_marker_ttl <= 0:
        return cfg
    changes: dict[str, object] = {}
    if not cfg.allow_msg_ttl:
        if pedantic:
            raise _invalid("subject delete marker cannot be set if message TTLs are disabled")
        changes["allow_msg_ttl"] = True
    if not cfg.allow_rollup_hdrs:
        if pedantic:
            raise _invalid("subject delete marker cannot be set if roll-ups are disabled")
        changes |= {"allow_rollup_hdrs": True, "deny_purge": False}
    return msgspec.structs.replace(cfg, **changes) if changes else cfg


def _schedule_flags(cfg: StreamConfig, *, pedantic: bool) -> StreamConfig:
    """Message schedules roll up their schedule subjects, so they switch roll-ups on."""
    if not cfg.allow_msg_schedules or cfg.allow_rollup_hdrs:
        return cfg
    if pedantic:
        raise _invalid("message scheduling cannot be set if roll-ups are disabled")
    return msgspec.structs.replace(cfg, allow_rollup_hdrs=True, deny_purge=False)


def _implied_flags(cfg: StreamConfig, *, pedantic: bool) -> StreamConfig:
    return _schedule_flags(_marker_flags(cfg, pedantic=pedantic), pedantic=pedantic)


def _default_republish(cfg: StreamConfig, *, pedantic: bool) -> StreamConfig:
    rp = cfg.republish
    if rp is None:
        return cfg
    if not rp.src:
        if pedantic:
            raise _pedantic("republish source can not be empty")
        rp = msgspec.structs.replace(rp, src=">")
    st = cfg.subject_transform
    if (
        rp.src == ">"
        and rp.dest == ">"
        and st is not None
        and len(cfg.subjects) == 1
        and st.src == cfg.subjects[0]
    ):
        # A ">" to ">" republish follows the transform when it rewrites the only subject.
        if pedantic:
            raise _pedantic("implicit republish based on subject transform")
        rp = msgspec.structs.replace(rp, src=st.dest, dest=st.dest)
    return msgspec.structs.replace(cfg, republish=rp)


def _check_identity(cfg: StreamConfig) -> None:
    if not is_valid_asset_name(cfg.name):
        raise _invalid("stream name is required and can not contain '.', '*', '>', '\\', '/'")
    if _blen(cfg.name) > MAX_NAME_LEN:
        raise _invalid(f"stream name is too long, maximum allowed is {MAX_NAME_LEN}")
    if _blen(cfg.description) > MAX_DESCRIPTION_LEN:
        raise _invalid(f"stream description is too long, maximum allowed is {MAX_DESCRIPTION_LEN}")
    if sum(_blen(k) + _blen(v) for k, v in cfg.metadata.items()) > MAX_METADATA_LEN:
        raise _invalid(f"stream metadata exceeds maximum size of {MAX_METADATA_LEN} bytes")


def _check_limits(cfg: StreamConfig, limits: StreamLimits, pedantic: bool) -> StreamConfig:
    replicas = cfg.num_replicas or 1
    if replicas > MAX_REPLICAS:
        raise _invalid(f"maximum replicas is {MAX_REPLICAS}")
    if replicas < 0:
        raise errors.REPLICAS_COUNT_CANNOT_BE_NEGATIVE.exc()
    changes: dict[str, object] = {"num_replicas": replicas}
    for name in _LIMIT_FIELDS:
        value = getattr(cfg, name)
        if value == 0 or value < -1:
            if pedantic and value < -1:
                raise _pedantic(f"{name} must be set to -1")
            changes[name] = -1
    if cfg.max_age < 0:
        raise _invalid("max age can not be negative")
    if 0 < cfg.max_age < MIN_WINDOW:
        raise _invalid("max age needs to be >= 100ms")
    window = cfg.duplicate_window
    if window == 0 and cfg.mirror is None and not cfg.sources:
        window = _default_duplicates(cfg, limits, pedantic)
    if window < 0:
        raise _invalid("duplicates window can not be negative")
    if cfg.max_age != 0 and window > cfg.max_age:
        raise _invalid("duplicates window can not be larger then max age")
    if 0 < limits.max_duplicate_window < window:
        raise _invalid(
            "duplicates window can not be larger then server limit of "
            + go_duration(limits.max_duplicate_window)
        )
    if 0 < window < MIN_WINDOW:
        raise _invalid("duplicates window needs to be >= 100ms")
    changes["duplicate_window"] = window
    return msgspec.structs.replace(cfg, **changes)


def _check_features(cfg: StreamConfig, pedantic: bool) -> StreamConfig:
    if cfg.deny_purge and cfg.allow_rollup_hdrs:
        raise _invalid("roll-ups require the purge permission")
    if cfg.allow_msg_counter:
        if cfg.discard == "new":
            raise _invalid("counter stream cannot use discard new")
        if cfg.allow_msg_ttl:
            raise _invalid("counter stream cannot use message TTLs")
        if cfg.allow_msg_schedules:
            raise _invalid("counter stream cannot use message schedules")
        if cfg.retention != "limits":
            raise _invalid("counter stream can only use limits retention")
    if cfg.discard_new_per_subject:
        if cfg.discard != "new":
            raise _invalid("discard new per subject requires discard new policy to be set")
        if cfg.max_msgs_per_subject <= 0:
            raise _invalid("discard new per subject requires max msgs per subject > 0")
    if 0 < cfg.subject_delete_marker_ttl < SECOND:
        raise _invalid("subject delete marker TTL must be at least 1 second")
    if cfg.subject_delete_marker_ttl < 0:
        raise _invalid("subject delete marker TTL must not be negative")
    cfg = _marker_flags(cfg, pedantic=pedantic)
    if cfg.allow_msg_schedules and cfg.discard == "new":
        raise _invalid("message scheduling cannot use discard new")
    cfg = _schedule_flags(cfg, pedantic=pedantic)
    if cfg.persist_mode == "async":
        if cfg.storage != "file":
            raise _invalid("async persist mode is only supported on file storage")
        if cfg.num_replicas > 1:
            raise _invalid("async persist mode is not supported on replicated streams")
        if cfg.allow_atomic:
            raise _invalid("async persist mode is not supported with atomic batch publish")
    return cfg


_API_NAMESPACES = ("$JS.>", "$JSC.>", "$NRG.>")


def _check_subjects(cfg: StreamConfig) -> StreamConfig:
    if not cfg.subjects:
        if cfg.mirror is None and not cfg.sources:
            return msgspec.structs.replace(cfg, subjects=(cfg.name,))
        return cfg
    if cfg.mirror is not None:
        raise errors.MIRROR_WITH_SUBJECTS.exc()
    subjects = cfg.subjects
    first_overlap = _first_self_overlap(subjects)
    seen: set[str] = set()
    for index, subject in enumerate(subjects):
        if not is_valid_subject(subject):
            raise _invalid("invalid subject")
        if subject in seen:
            raise _invalid("duplicate subjects detected")
        if subject == ">":
            if not cfg.no_ack:
                raise _invalid("capturing all subjects requires no-ack to be true")
            if cfg.num_replicas != 1:
                raise _invalid("capturing all subjects requires replicas of 1")
        if not cfg.no_ack:
            # The API's own subjects would loop back into the stream; events are the exception.
            for namespace in _API_NAMESPACES:
                if subjects_collide(subject, namespace) and not is_subset_match(
                    subject, "$JS.EVENT.>"
                ):
                    raise _invalid(
                        "subjects that overlap with jetstream api require no-ack to be true"
                    )
            if subjects_collide(subject, "$SYS.>") and not is_subset_match(
                subject, "$SYS.ACCOUNT.>"
            ):
                raise _invalid("subjects that overlap with system api require no-ack to be true")
        if index == first_overlap:
            other = next(o for o in subjects[index + 1 :] if subjects_collide(o, subject))
            raise _invalid(f"subject {go_quote(subject)} overlaps with {go_quote(other)}")
        seen.add(subject)
    return cfg


def _first_self_overlap(subjects: tuple[str, ...]) -> int | None:
    """The first index whose subject collides with a later one, among the valid leading ones.

    The reference compares each subject with every later one, in order, so the first such
    index is the one it reports. A trie of the later subjects, filled from the end, finds it
    without comparing every pair (20,000 subjects took minutes pairwise).
    """
    first_bad = next(
        (i for i, subject in enumerate(subjects) if not is_valid_subject(subject)), len(subjects)
    )
    later = CollisionIndex()
    found: int | None = None
    for index in range(len(subjects) - 1, -1, -1):
        subject = subjects[index]
        # Only the valid leading subjects get as far as their overlap check.
        if index < first_bad and later.collides(subject):
            found = index
        later.add(subject)
    return found


def _check_transforms(cfg: StreamConfig, limits: StreamLimits, pedantic: bool) -> StreamConfig:
    ceiling = (
        limits.memory_max_stream_bytes
        if cfg.storage == "memory"
        else limits.storage_max_stream_bytes
    )
    if limits.max_bytes_required and cfg.max_bytes <= 0:
        raise errors.STREAM_MAX_BYTES_REQUIRED.exc()
    if ceiling > 0 and cfg.max_bytes > ceiling:
        raise errors.STREAM_MAX_STREAM_BYTES_EXCEEDED.exc()
    st = cfg.subject_transform
    if st is not None:
        if st.src and not is_valid_subject(st.src):
            raise errors.STREAM_TRANSFORM_INVALID_SOURCE.exc(err=f"{BAD_SUBJECT} {st.src}")
        if (problem := validate_mapping(st.src, st.dest)) is not None:
            raise errors.STREAM_TRANSFORM_INVALID_DESTINATION.exc(err=problem)
    cfg = _default_republish(cfg, pedantic=pedantic)
    rp = cfg.republish
    if rp is not None:
        if any(subjects_collide(rp.dest, subject) for subject in cfg.subjects):
            raise _invalid("stream configuration for republish destination forms a cycle")
        if transform_error(rp.src, rp.dest) is not None:
            raise _invalid(
                f"stream configuration for republish with transform from '{rp.src}' "
                f"to '{rp.dest}' not valid"
            )
    if cfg.placement is not None and cfg.placement == Placement():
        cfg = msgspec.structs.replace(cfg, placement=None)
    if cfg.placement is not None and cfg.placement.preferred:
        raise _invalid("preferred server not permitted in placement")
    return cfg


def check_stream_config(
    cfg: StreamConfig,
    limits: StreamLimits = NO_LIMITS,
    *,
    pedantic: bool = False,
    streams: Mapping[str, StreamConfig] | None = None,
) -> StreamConfig:
    """Default and validate one config, as the reference's ``checkStreamCfg`` does.

    ``streams`` (the account's other streams by name) lets mirror and source checks look at
    the streams they name. Returns the defaulted config with ``_nats.req.level`` set; raises
    ``ApiErrorException`` (mostly 10052, 10157 in pedantic mode) in the reference's order.
    """
    _check_identity(cfg)
    cfg = _check_limits(cfg, limits, pedantic)
    cfg = _check_features(cfg, pedantic)
    known = streams or {}
    cfg = check_sources(cfg, known.get, pedantic=pedantic)
    cfg = _check_subjects(cfg)
    cfg = _check_transforms(cfg, limits, pedantic)
    return _with_static_metadata(cfg)


_UNSUPPORTED = (
    ("allow_msg_counter", "message counters are not supported yet"),
    ("allow_atomic", "atomic batch publish is not supported yet"),
    ("allow_msg_schedules", "message schedules are not supported yet"),
)


def refuse_unsupported(cfg: StreamConfig) -> None:
    """Refuse (10052) features Headwater accepts on the wire but does not run yet.

    Silently storing them would tell a client its mirror or counter works when it does not.
    """
    for name, text in _UNSUPPORTED:
        if getattr(cfg, name):
            raise _invalid(text)
    if cfg.persist_mode == "async":
        raise _invalid("async persist mode is not supported yet")


def check_subject_name(cfg: StreamConfig, name_in_subject: str) -> None:
    """10056 when the request body names another stream than its subject does."""
    if cfg.name != name_in_subject:
        raise errors.STREAM_MISMATCH.exc()


def check_subjects_free(cfg: StreamConfig, others: Iterable[StreamConfig]) -> None:
    """10065 when a subject of ``cfg`` could match a subject of another stream."""
    mine: CollisionIndex | None = None  # built once, only when another stream exists
    for other in others:
        if other.name == cfg.name or not other.subjects:
            continue
        if mine is None:
            mine = CollisionIndex(cfg.subjects)
        if any(mine.collides(subject) for subject in other.subjects):
            raise errors.STREAM_SUBJECT_OVERLAP.exc()


def _comparable(cfg: StreamConfig) -> StreamConfig:
    ignored = DYNAMIC_METADATA_KEYS | {REQUIRED_LEVEL_KEY}
    metadata = {k: v for k, v in cfg.metadata.items() if k not in ignored}
    return msgspec.structs.replace(cfg, metadata=metadata)


def same_config(new: StreamConfig, existing: StreamConfig) -> bool:
    """Whether a CREATE of ``new`` (already checked) repeats ``existing``; versioning ignored."""
    return _comparable(new) == _comparable(existing)


def validate_create(
    cfg: StreamConfig,
    other_streams: Iterable[StreamConfig],
    limits: StreamLimits = NO_LIMITS,
    *,
    pedantic: bool = False,
) -> CreateOutcome:
    """Validate a decoded CREATE config against the account's streams (see module order).

    ``other_streams`` are the stored configs of the account's streams, possibly including one
    with the same name. Raises ``ApiErrorException``; otherwise says what to do.
    """
    streams = {s.name: s for s in other_streams}
    if "\\" in cfg.name or "/" in cfg.name:
        raise errors.STREAM_NAME_CONTAINS_PATH_SEPARATORS.exc()
    if cfg.sealed:
        raise _invalid("stream configuration for create can not be sealed")
    if cfg.mirror_direct and cfg.mirror is None:
        raise _invalid("stream has no mirror but does have mirror direct")
    checked = check_stream_config(cfg, limits, pedantic=pedantic, streams=streams)
    refuse_unsupported(checked)
    check_replicas(checked, limits)
    existing = streams.get(checked.name)
    if existing is not None:
        if same_config(checked, existing):
            return CreateOutcome(existing, existing=True)
        raise errors.STREAM_NAME_EXIST.exc()
    check_subjects_free(checked, streams.values())
    return CreateOutcome(checked)


def create_stream_request(
    body: bytes,
    name_in_subject: str,
    streams: Iterable[StreamConfig],
    limits: StreamLimits = NO_LIMITS,
) -> CreateOutcome:
    """The whole ``$JS.API.STREAM.CREATE.<name>`` decision, errors in the reference's order."""
    cfg, pedantic = parse_stream_request(body, name_in_subject)
    return validate_create(cfg, streams, limits, pedantic=pedantic)
