"""What a STREAM.UPDATE may change, following the reference's ``configUpdateCheck``.

The order of the whole UPDATE request (checked against nats-server 2.15.1):
decode (10025) -> :func:`.check_stream_config` on the new config -> name in subject (10056)
-> the stream exists (10059) -> the rules below -> subjects overlap another stream (10065).

Refused (10052 unless noted): more than one replica (10074), a different storage type,
retention to or from ``workqueue``, any change to a template-owned stream or making a stream
template-owned (Headwater keeps 2.11's template rules), unsealing, cancelling ``deny_delete``
or ``deny_purge``, a different mirror (10055; removing it is allowed), disabling
``allow_msg_ttl``, changing ``allow_msg_counter`` or ``persist_mode``, disabling
``allow_msg_schedules``. Sealing forces ``max_age`` 0, discard ``new``, ``deny_delete`` and
``deny_purge`` on and roll-ups off. ``max_consumers`` and ``first_seq`` may change, as 2.15
allows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from . import errors
from .streamconfig import StreamConfig, parse_stream_request
from .streamconfig_validate import (
    NO_LIMITS,
    StreamLimits,
    check_replicas,
    check_stream_config,
    check_subject_name,
    check_subjects_free,
    refuse_unsupported,
    required_api_level,
)
from .versioning import with_static_metadata

__all__ = ["update_stream_request", "validate_update"]


def _invalid(text: str) -> errors.ApiErrorException:
    return errors.STREAM_INVALID_CONFIG.exc(err=text)


def _check_transition(old: StreamConfig, cfg: StreamConfig, limits: StreamLimits) -> None:
    if cfg.name != old.name:
        raise _invalid("stream configuration name must match original")
    check_replicas(cfg, limits)
    if cfg.storage != old.storage:
        raise _invalid("stream configuration update can not change storage type")
    if cfg.retention != old.retention and "workqueue" in (cfg.retention, old.retention):
        raise _invalid(
            "stream configuration update can not change retention policy to/from workqueue"
        )
    if old.template_owner:
        raise _invalid("stream configuration update not allowed on template owned stream")
    if cfg.template_owner:
        raise _invalid("stream configuration update can not be owned by a template")
    if old.sealed and not cfg.sealed:
        raise _invalid("stream configuration update can not unseal a sealed stream")
    if old.deny_delete and not cfg.deny_delete:
        raise _invalid("stream configuration update can not cancel deny message deletes")
    if old.deny_purge and not cfg.deny_purge:
        raise _invalid("stream configuration update can not cancel deny purge")
    if cfg.mirror is not None and cfg.mirror != old.mirror:
        raise errors.STREAM_MIRROR_NOT_UPDATABLE.exc()
    if old.allow_msg_ttl and not cfg.allow_msg_ttl:
        raise _invalid("message TTL status can not be disabled")
    if cfg.allow_msg_counter != old.allow_msg_counter:
        raise _invalid("stream configuration update can not change message counter setting")
    if old.allow_msg_schedules and not cfg.allow_msg_schedules:
        raise _invalid("message schedules can not be disabled")
    if cfg.persist_mode != old.persist_mode:
        raise _invalid("stream configuration update can not change persist mode")


def validate_update(
    old: StreamConfig,
    new: StreamConfig,
    other_streams: Iterable[StreamConfig] = (),
    limits: StreamLimits = NO_LIMITS,
    *,
    pedantic: bool = False,
) -> StreamConfig:
    """The config to store when ``old`` is updated to the decoded ``new``, or raise.

    ``other_streams`` may include the stream itself (it is skipped in the overlap check).
    Checks against the stream's consumers (``consumer_limits`` lowered below what a consumer
    uses) need the live consumers and are left to the caller.
    """
    streams = {s.name: s for s in other_streams}
    cfg = check_stream_config(new, limits, pedantic=pedantic, streams=streams)
    _check_transition(old, cfg, limits)
    refuse_unsupported(cfg)
    if cfg.sealed:
        # A sealed stream never changes again, so what would remove or add messages goes.
        cfg = msgspec.structs.replace(
            cfg,
            max_age=0,
            discard="new",
            deny_delete=True,
            deny_purge=True,
            allow_rollup_hdrs=False,
        )
        cfg = msgspec.structs.replace(
            cfg, metadata=with_static_metadata(cfg.metadata, required_api_level(cfg))
        )
    check_subjects_free(cfg, streams.values())
    return cfg


def update_stream_request(
    body: bytes,
    name_in_subject: str,
    streams: Mapping[str, StreamConfig],
    limits: StreamLimits = NO_LIMITS,
) -> StreamConfig:
    """The whole ``$JS.API.STREAM.UPDATE.<name>`` decision, errors in the reference's order.

    ``streams`` maps the account's stream names to their stored configs.
    """
    cfg, pedantic = parse_stream_request(body, name_in_subject, check_name=False)
    check_stream_config(cfg, limits, pedantic=pedantic, streams=streams)
    check_subject_name(cfg, name_in_subject)
    old = streams.get(name_in_subject)
    if old is None:
        raise errors.STREAM_NOT_FOUND.exc()
    return validate_update(old, cfg, streams.values(), limits, pedantic=pedantic)
