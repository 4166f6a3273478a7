"""The reference's checks on a stream's ``mirror`` and ``sources``, in its order.

A config the reference would refuse for a specific reason gets that reason and code here
too. The mirrors and sources themselves run in :mod:`.replication`.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from . import errors
from .gojson import go_quote
from .streamconfig import StreamConfig, StreamSource
from .subject_rules import (
    BAD_SUBJECT,
    is_subset_match,
    is_valid_publish_subject,
    is_valid_subject,
    subjects_collide,
    validate_mapping,
)

__all__ = ["check_sources", "is_valid_asset_name"]

JS_API_PREFIX = "$JS.API"
_NAME_FORBIDDEN = frozenset(" \t\r\n\f.*>\\/")

Lookup = Callable[[str], StreamConfig | None]


def is_valid_asset_name(name: str) -> bool:
    """Stream/consumer names: non-empty, no whitespace, ``.``, ``*``, ``>``, ``\\`` or ``/``."""
    return bool(name) and not any(c in _NAME_FORBIDDEN for c in name)


def _invalid(text: str) -> errors.ApiErrorException:
    return errors.STREAM_INVALID_CONFIG.exc(err=text)


def _identity(src: StreamSource) -> tuple[object, ...]:
    # Two sources are duplicates when name, external API and every filter/transform pair match.
    pairs: tuple[tuple[str, str], ...]
    if src.subject_transforms:
        pairs = tuple((t.src or ">", t.dest or ">") for t in src.subject_transforms)
    else:
        pairs = ((src.filter_subject or ">", ">"),)
    api = src.external.api if src.external is not None else None
    return (src.name, api, pairs)


def _check_mirror(cfg: StreamConfig, lookup: Lookup, pedantic: bool, found: _Found) -> StreamConfig:
    mirror = cfg.mirror
    assert mirror is not None
    if cfg.first_seq > 0:
        raise errors.MIRROR_WITH_FIRST_SEQ.exc()
    if cfg.subjects:
        raise errors.MIRROR_WITH_SUBJECTS.exc()
    if cfg.sources:
        raise errors.MIRROR_WITH_SOURCES.exc()
    if cfg.allow_msg_counter:
        raise errors.MIRROR_WITH_COUNTERS.exc()
    if cfg.allow_atomic:
        raise errors.MIRROR_WITH_ATOMIC_PUBLISH.exc()
    if cfg.allow_msg_schedules:
        raise errors.MIRROR_WITH_MSG_SCHEDULES.exc()
    if mirror.filter_subject and mirror.subject_transforms:
        raise errors.MIRROR_MULTIPLE_FILTERS_NOT_ALLOWED.exc()
    if cfg.subject_delete_marker_ttl > 0:
        # Markers would consume sequence numbers and make the mirror diverge from its origin.
        raise _invalid("subject delete markers forbidden on mirrors")
    for outer, tr in enumerate(mirror.subject_transforms):
        if tr.src and not is_valid_subject(tr.src):
            raise errors.MIRROR_INVALID_SUBJECT_FILTER.exc(err=f"{BAD_SUBJECT} {tr.src}")
        if (problem := validate_mapping(tr.src, tr.dest)) is not None:
            raise errors.MIRROR_INVALID_TRANSFORM_DESTINATION.exc(err=problem)
        for inner, other in enumerate(mirror.subject_transforms):
            if inner != outer and subjects_collide(tr.src, other.src):
                raise errors.MIRROR_OVERLAPPING_SUBJECT_FILTERS.exc()
    if mirror.external is None:
        if not is_valid_asset_name(mirror.name):
            raise errors.MIRROR_INVALID_STREAM_NAME.exc()
        origin = lookup(mirror.name)
        if origin is not None:
            found.subjects.extend(origin.subjects)
            if 0 < cfg.max_msg_size < origin.max_msg_size:
                raise errors.MIRROR_MAX_MESSAGE_SIZE_TOO_BIG.exc()
            if pedantic and cfg.mirror_direct != origin.allow_direct:
                raise errors.PEDANTIC.exc(
                    err="origin stream has direct get set, mirror has it disabled"
                )
            cfg = msgspec.structs.replace(cfg, mirror_direct=origin.allow_direct)
    else:
        found.add_external(mirror)
    return cfg


class _Found:
    """Subjects of sourced streams and external prefixes gathered while checking."""

    def __init__(self) -> None:
        self.subjects: list[str] = []
        self.deliver_prefixes: list[str] = []
        self.api_prefixes: list[str] = []

    def add_external(self, src: StreamSource) -> None:
        assert src.external is not None
        if src.external.deliver:
            self.deliver_prefixes.append(src.external.deliver)
        if src.external.api:
            self.api_prefixes.append(src.external.api)


def _check_source_list(cfg: StreamConfig, lookup: Lookup, found: _Found) -> None:
    if cfg.sources and cfg.allow_msg_schedules:
        raise errors.SOURCE_WITH_MSG_SCHEDULES.exc()
    seen: set[tuple[object, ...]] = set()
    for src in cfg.sources:
        if not is_valid_asset_name(src.name):
            raise errors.SOURCE_INVALID_STREAM_NAME.exc()
        identity = _identity(src)
        if identity in seen:
            raise errors.SOURCE_DUPLICATE_DETECTED.exc()
        seen.add(identity)
        if src.filter_subject and src.subject_transforms:
            raise errors.SOURCE_MULTIPLE_FILTERS_NOT_ALLOWED.exc()
        for tr in src.subject_transforms:
            if tr.src and not is_valid_subject(tr.src):
                raise errors.SOURCE_INVALID_SUBJECT_FILTER.exc(err=f"{BAD_SUBJECT} {tr.src}")
            if (problem := validate_mapping(tr.src, tr.dest)) is not None:
                raise errors.SOURCE_INVALID_TRANSFORM_DESTINATION.exc(err=problem)
        for outer, tr in enumerate(src.subject_transforms):
            for inner, other in enumerate(src.subject_transforms):
                if inner != outer and is_subset_match(tr.src, other.src):
                    raise errors.SOURCE_OVERLAPPING_SUBJECT_FILTERS.exc()
        if src.external is None:
            origin = lookup(src.name)
            if origin is not None:
                found.subjects.extend(origin.subjects)
                if 0 < cfg.max_msg_size < origin.max_msg_size:
                    raise errors.SOURCE_MAX_MESSAGE_SIZE_TOO_BIG.exc()
        else:
            found.add_external(src)


def _check_prefixes(found: _Found) -> None:
    for prefix in found.deliver_prefixes:
        if not is_valid_publish_subject(prefix):
            raise errors.STREAM_INVALID_EXTERNAL_DELIVERY_SUBJ.exc(prefix=prefix)
        for subject in found.subjects:
            if subjects_collide(subject, f"{prefix}.{subject}"):
                raise errors.STREAM_EXTERNAL_DEL_PREFIX_OVERLAPS.exc(prefix=prefix, subject=subject)
    for prefix in found.api_prefixes:
        if not is_valid_publish_subject(prefix):
            raise _invalid(
                f"stream external api prefix {go_quote(prefix)} must be a valid subject "
                "without wildcards"
            )
        if subjects_collide(prefix, JS_API_PREFIX):
            raise errors.STREAM_EXTERNAL_API_OVERLAP.exc(prefix=prefix, subject=JS_API_PREFIX)


def _check_cycles(cfg: StreamConfig, lookup: Lookup) -> None:
    """Refuse a config whose sources or mirror lead back to itself with overlapping subjects."""
    to_visit = [cfg]
    visited: set[str] = set()
    while to_visit:
        current = to_visit.pop(0)
        visited.add(current.name)
        for src in current.sources:
            if src.external is not None:
                continue
            if src.name in visited:
                if not src.filter_subject or any(
                    subjects_collide(s, src.filter_subject) for s in current.subjects
                ):
                    raise _invalid("detected cycle")
            elif (origin := lookup(src.name)) is not None:
                to_visit.append(origin)
        mirror = current.mirror
        if mirror is not None and mirror.external is None:
            if mirror.name in visited:
                raise _invalid("detected cycle")
            if (origin := lookup(mirror.name)) is not None:
                to_visit.append(origin)


def check_sources(cfg: StreamConfig, lookup: Lookup, *, pedantic: bool) -> StreamConfig:
    """Run the mirror, source, prefix and cycle checks; may inherit ``mirror_direct``."""
    found = _Found()
    if cfg.mirror is not None:
        cfg = _check_mirror(cfg, lookup, pedantic, found)
    _check_source_list(cfg, lookup, found)
    _check_prefixes(found)
    _check_cycles(cfg, lookup)
    return cfg
