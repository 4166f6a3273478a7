"""Differential test: CONSUMER.CREATE decisions against a real nats-server.

Every scenario starts from the same streams (``S`` limits on ``s.>``, ``W`` work queue on
``w.>``, ``I`` interest on ``i.>``, ``L`` with consumer limits on ``l.>``), then sends raw
CONSUMER.CREATE requests, as nats-py would, to the reference server and through our pure
functions, which keep their own model of each stream's consumers. Each step must end the same
way: the same ``err_code`` and description, or success with the same resulting config. The
reference's dynamic metadata (``_nats.ver``, ``_nats.level``) names its own version and is left
out of the comparison.

Steps marked ``NEWER`` are intended differences: the reference (2.15) decodes the 2.14
``flow_control`` ack policy, which Headwater, at the 2.12 level, refuses while decoding (10025).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import nats
import pytest

from headwater.server.jetstream.consumerconfig import (
    ConsumerConfig,
    consumer_config_to_json,
    parse_consumer_request,
)
from headwater.server.jetstream.consumerconfig_validate import (
    apply_consumer_defaults,
    validate_consumer,
)
from headwater.server.jetstream.errors import STREAM_NOT_FOUND, ApiErrorException
from headwater.server.jetstream.streamconfig import StreamConfig
from headwater.server.jetstream.streamconfig_validate import create_stream_request
from support.jsreference import delete_all_streams, normalized_config, reference_outcome

pytestmark = pytest.mark.differential

SAME = "same"
NEWER = "newer"
SEC = 1_000_000_000
MS = 1_000_000

STREAMS: dict[str, dict[str, Any]] = {
    "S": {"subjects": ["s.>"], "storage": "memory"},
    "W": {"subjects": ["w.>"], "storage": "memory", "retention": "workqueue"},
    "I": {"subjects": ["i.>"], "storage": "memory", "retention": "interest"},
    "L": {
        "subjects": ["l.>"],
        "storage": "memory",
        "consumer_limits": {"inactive_threshold": 10 * SEC, "max_ack_pending": 50},
    },
}


@dataclass(frozen=True)
class Step:
    subject: str
    body: bytes
    expect: str = SAME


def cc(subject: str, config: dict[str, Any] | None = None, **request: Any) -> Step:
    """A CONSUMER.CREATE step; the body's stream name is the subject's unless overridden."""
    expect = request.pop("expect", SAME)
    stream = subject.split(".")[0]
    body = {"stream_name": stream, "config": config or {}} | request
    return Step(f"CONSUMER.CREATE.{subject}", json.dumps(body).encode(), expect)


def raw(subject: str, body: str) -> Step:
    return Step(subject, body.encode())


EXPLICIT = {"ack_policy": "explicit"}

SCENARIOS: dict[str, list[Step]] = {
    # decoding
    "empty-body": [raw("CONSUMER.CREATE.S", "")],
    "null-body": [raw("CONSUMER.CREATE.S", "null")],
    "truncated": [raw("CONSUMER.CREATE.S", '{"stream_name":"S",')],
    "config-string": [raw("CONSUMER.CREATE.S", '{"stream_name":"S","config":"x"}')],
    "ack-policy-unknown": [cc("S", {"ack_policy": "bad"})],
    "ack-policy-flow-control": [cc("S.C", {"ack_policy": "flow_control"}, expect=NEWER)],
    "replay-null": [cc("S", {"replay_policy": None})],
    "deliver-undefined": [cc("S", {"deliver_policy": "undefined"})],
    "priority-policy-unknown": [cc("S", {"priority_policy": "bad"})],
    "action-unknown": [cc("S.C", {}, action="x")],
    "backoff-string": [cc("S", {"backoff": ["x"]})],
    "int-string": [cc("S", {"max_deliver": "1"})],
    "bad-start-time": [cc("S", {"opt_start_time": "bad"})],
    "unknown-field": [cc("S.C", {"foo": 1}, bar=2)],
    "case-insensitive": [
        raw("CONSUMER.CREATE.S.C", '{"STREAM_NAME":"S","Config":{"ACK_POLICY":"all"}}')
    ],
    # the handler's checks
    "stream-mismatch": [cc("S.C", stream_name="T")],
    "stream-missing": [cc("T.C")],
    "ephemeral-with-durable": [cc("S", {"durable_name": "D"})],
    "durable-mismatch-subject": [cc("S.C", {"durable_name": "X"})],
    "name-replaced-by-subject": [cc("S.C", {"name": "X"})],
    "durable-and-name": [cc("S.C", {"durable_name": "C", "name": "D"})],
    "durable-name-mismatch": [cc("S", {"name": "A", "durable_name": "B"})],
    "filter-mismatch": [cc("S.C.s.x", {"filter_subject": "s.y"})],
    "filter-missing": [cc("S.C.s.x")],
    "filter-match": [cc("S.C.s.x", {"filter_subject": "s.x"})],
    "filters-with-subject-api": [cc("S.C.s.x", {"filter_subjects": ["s.x"]})],
    "subject-path-separator": [cc("S.a/b")],
    "config-path-separator": [cc("S", {"name": "a\\b"})],
    "separator-before-durable": [cc("S.a/b", {"durable_name": "x"})],
    "legacy-durable": [
        raw("CONSUMER.DURABLE.CREATE.S.D", '{"stream_name":"S","config":{"durable_name":"D"}}')
    ],
    "legacy-durable-unset": [raw("CONSUMER.DURABLE.CREATE.S.D", '{"stream_name":"S"}')],
    "legacy-durable-mismatch": [
        raw("CONSUMER.DURABLE.CREATE.S.D", '{"stream_name":"S","config":{"durable_name":"E"}}')
    ],
    "replicas-3": [cc("S.C", {"num_replicas": 3, "name": "a.b"})],
    "replicas-negative": [cc("S.C", {"num_replicas": -1, "ack_wait": -1})],
    # defaults
    "defaults-ephemeral": [cc("S")],
    "defaults-named": [cc("S.C")],
    "defaults-durable": [cc("S.D", {"durable_name": "D"})],
    "defaults-explicit": [cc("S.C", EXPLICIT)],
    "defaults-all": [cc("S.C", {"ack_policy": "all"})],
    "defaults-push": [cc("S.C", {"deliver_subject": "d"})],
    "backoff-sets-ack-wait": [cc("S.C", EXPLICIT | {"backoff": [2 * SEC, 3 * SEC]})],
    "backoff-ack-none": [cc("S.C", {"backoff": [2 * SEC, 3 * SEC]})],
    "negatives-clamped": [
        cc(
            "S.C",
            EXPLICIT
            | {
                "max_ack_pending": -5,
                "max_waiting": -1,
                "max_batch": -1,
                "max_expires": -1,
                "max_bytes": -1,
                "inactive_threshold": -1,
                "priority_timeout": -1,
                "max_deliver": -7,
            },
        )
    ],
    "stream-consumer-limits": [cc("L.A", EXPLICIT), cc("L.B", {"durable_name": "B"})],
    "pinned-default-timeout": [
        cc("S.C", {"priority_policy": "pinned_client", "priority_groups": ["A"]})
    ],
    "prioritized": [cc("S.C", {"priority_policy": "prioritized", "priority_groups": ["A"]})],
    "pause-until": [cc("S.C", {"pause_until": "2099-01-01T00:00:00Z"})],
    "start-time": [
        cc(
            "S.C",
            {"deliver_policy": "by_start_time", "opt_start_time": "2024-01-01T00:00:00.5+02:00"},
        )
    ],
    "start-seq": [cc("S.C", {"deliver_policy": "by_start_sequence", "opt_start_seq": 5})],
    "everything": [
        cc(
            "S.C",
            {
                "description": "d",
                "ack_policy": "explicit",
                "ack_wait": 5 * SEC,
                "max_deliver": 9,
                "backoff": [5 * SEC, 6 * SEC],
                "filter_subjects": ["s.a", "s.b.>"],
                "replay_policy": "original",
                "sample_freq": "50%",
                "max_ack_pending": 20,
                "headers_only": True,
                "max_batch": 10,
                "max_expires": 30 * SEC,
                "max_bytes": 1024,
                "inactive_threshold": 60 * SEC,
                "num_replicas": 1,
                "mem_storage": True,
                "metadata": {"team": "x", "_nats.ver": "0"},
            },
        )
    ],
    "push-everything": [
        cc(
            "S.C",
            {
                "deliver_subject": "out",
                "deliver_group": "q",
                "flow_control": True,
                "idle_heartbeat": SEC,
                "rate_limit_bps": 1000,
                "ack_policy": "explicit",
                "max_batch": 3,
            },
        )
    ],
    "deliver-group-on-pull": [cc("S.C", {"deliver_group": "g"})],
    # pedantic
    "pedantic-max-deliver": [cc("S.C", {"max_deliver": -5, "name": "a.b"}, pedantic=True)],
    "pedantic-negative-waiting": [cc("S.C", {"max_waiting": -1}, pedantic=True)],
    "pedantic-backoff": [cc("S.C", EXPLICIT | {"backoff": [2 * SEC]}, pedantic=True)],
    "pedantic-backoff-ok": [
        cc("S.C", EXPLICIT | {"ack_wait": 2 * SEC, "backoff": [2 * SEC]}, pedantic=True)
    ],
    "pedantic-limits": [cc("L.C", EXPLICIT, pedantic=True)],
    "pedantic-ok": [cc("S.C", {"description": "x"}, pedantic=True)],
    # checkConsumerCfg
    "name-invalid": [cc("S", {"name": "a.b"})],
    "name-whitespace": [cc("S", {"name": "a b"})],
    "subject-name-wildcard": [cc("S.a*b")],
    "replicas-interest-mismatch": [cc("I.C", {"num_replicas": 1})],
    "backoff-negative": [cc("S.C", EXPLICIT | {"backoff": [-1]})],
    "ack-wait-negative": [cc("S.C", {"ack_wait": -1})],
    "backoff-too-long": [cc("S.C", {"backoff": [SEC, 2 * SEC], "max_deliver": 1})],
    "description-too-long": [cc("S.C", {"description": "d" * 4097})],
    "deliver-wildcard": [cc("S.C", {"deliver_subject": "d.*"})],
    "deliver-invalid": [cc("S.C", {"deliver_subject": "a..b"})],
    "deliver-cycle": [cc("S.C", {"deliver_subject": "s.x"})],
    "push-max-waiting": [cc("S.C", {"deliver_subject": "d", "max_waiting": 3})],
    "push-max-ack-pending-no-ack": [cc("S.C", {"deliver_subject": "d", "max_ack_pending": 5})],
    "push-small-heartbeat": [cc("S.C", {"deliver_subject": "d", "idle_heartbeat": 50 * MS})],
    "pull-no-ack-workqueue": [cc("W.C")],
    "pull-rate-limit": [cc("S.C", {"rate_limit_bps": 5})],
    "pull-heartbeat": [cc("S.C", {"idle_heartbeat": SEC})],
    "pull-flow-control": [cc("S.C", {"flow_control": True})],
    "pull-small-expires": [cc("S.C", {"max_expires": 5})],
    "limits-ack-pending": [cc("L.C", EXPLICIT | {"max_ack_pending": 100})],
    "limits-inactive": [cc("L.C", EXPLICIT | {"inactive_threshold": 20 * SEC})],
    "direct-pull": [cc("S.C", {"direct": True})],
    "direct-durable": [cc("S.G", {"deliver_subject": "d", "direct": True, "durable_name": "G"})],
    "filters-both": [cc("S.C", {"filter_subject": "s.a", "filter_subjects": ["s.b"]})],
    "filter-invalid": [cc("S.C", {"filter_subject": "s..y"})],
    "filters-empty": [cc("S.C", {"filter_subjects": ["s.a", ""]})],
    "filters-invalid": [cc("S.C", {"filter_subjects": ["s.a", "s.>.b"]})],
    "filters-overlap": [cc("S.C", {"filter_subjects": ["s.a", "s.*"]})],
    "filter-outside-stream": [cc("S.C", {"filter_subject": "x.y"})],
    "start-seq-with-all": [cc("S.C", {"opt_start_seq": 4})],
    "start-time-with-new": [
        cc("S.C", {"deliver_policy": "new", "opt_start_time": "2024-01-01T00:00:00Z"})
    ],
    "by-seq-without-seq": [cc("S.C", {"deliver_policy": "by_start_sequence"})],
    "by-time-with-seq": [
        cc(
            "S.C",
            {
                "deliver_policy": "by_start_time",
                "opt_start_time": "2024-01-01T00:00:00Z",
                "opt_start_seq": 3,
            },
        )
    ],
    "last-per-subject-unfiltered": [cc("S.C", {"deliver_policy": "last_per_subject"})],
    "sample-bad": [cc("S.C", {"sample_freq": "x%"})],
    "sample-negative": [cc("S.C", {"sample_freq": "-5"})],
    "flow-control-no-heartbeat": [cc("S.C", {"flow_control": True, "deliver_subject": "d"})],
    "metadata-too-large": [cc("S.C", {"metadata": {"k": "v" * (128 * 1024)}})],
    "priority-without-group": [cc("S.C", {"priority_policy": "overflow"})],
    "priority-groups-policy-none": [cc("S.C", {"priority_groups": ["A"]})],
    "priority-timeout-policy-none": [cc("S.C", {"priority_timeout": 5})],
    "priority-group-invalid": [
        cc("S.C", {"priority_policy": "overflow", "priority_groups": ["A.B"]})
    ],
    "priority-group-empty": [cc("S.C", {"priority_policy": "overflow", "priority_groups": [""]})],
    "priority-push": [
        cc(
            "S.C",
            {"priority_policy": "overflow", "priority_groups": ["A"], "deliver_subject": "d"},
        )
    ],
    # work queues
    "wq-ack-all": [cc("W.C", {"ack_policy": "all"})],
    "wq-deliver-new": [cc("W.C", EXPLICIT | {"deliver_policy": "new"})],
    "wq-ok": [cc("W.C", EXPLICIT)],
    "wq-second-unfiltered": [cc("W.C", EXPLICIT), cc("W.D", EXPLICIT)],
    "wq-filtered-after-unfiltered": [
        cc("W.C", EXPLICIT),
        cc("W.D", EXPLICIT | {"filter_subject": "w.a"}),
    ],
    "wq-disjoint-filters": [
        cc("W.C", EXPLICIT | {"filter_subject": "w.a"}),
        cc("W.D", EXPLICIT | {"filter_subjects": ["w.b", "w.c.>"]}),
    ],
    "wq-overlapping-filters": [
        cc("W.C", EXPLICIT | {"filter_subject": "w.*.x"}),
        cc("W.D", EXPLICIT | {"filter_subject": "w.>"}),
    ],
    "wq-update-overlap": [
        cc("W.C", EXPLICIT | {"filter_subject": "w.a"}),
        cc("W.D", EXPLICIT | {"filter_subject": "w.b"}),
        cc("W.D", EXPLICIT | {"filter_subject": "w.a"}),
    ],
    "wq-replicas-match": [cc("W.C", EXPLICIT | {"num_replicas": 1})],
    # existing consumers and actions
    "update-missing": [cc("S.C", action="update")],
    "create-twice-identical": [cc("S.C", EXPLICIT, action="create")] * 2,
    "create-twice-different": [
        cc("S.C", action="create"),
        cc("S.C", {"description": "y"}, action="create"),
    ],
    "create-then-update": [
        cc("S.C", action="create"),
        cc("S.C", {"description": "y"}, action="update"),
    ],
    "update-deliver-policy": [cc("S.C"), cc("S.C", {"deliver_policy": "new"})],
    "update-replay": [cc("S.C"), cc("S.C", {"replay_policy": "original"})],
    "update-storage": [cc("S.C"), cc("S.C", {"mem_storage": True})],
    "update-max-waiting": [cc("S.C"), cc("S.C", {"max_waiting": 10})],
    "update-pull-to-push": [cc("S.C"), cc("S.C", {"deliver_subject": "dd"})],
    "update-push-to-pull": [cc("S.C", {"deliver_subject": "d"}), cc("S.C")],
    "update-ack-policy": [cc("S.C"), cc("S.C", EXPLICIT)],
    "update-start-seq": [
        cc("S.C", {"deliver_policy": "by_start_sequence", "opt_start_seq": 5}),
        cc("S.C", {"deliver_policy": "by_start_sequence", "opt_start_seq": 6}),
    ],
    "update-heartbeat-first": [
        cc("S.C", {"deliver_subject": "d"}),
        cc("S.C", {"deliver_subject": "d", "flow_control": True, "idle_heartbeat": SEC}),
    ],
    "update-push-subject": [
        cc("S.C", {"deliver_subject": "d"}),
        cc("S.C", {"deliver_subject": "e"}),
    ],
    "update-allowed": [
        cc("S.C"),
        cc(
            "S.C",
            {
                "description": "y",
                "metadata": {"a": "b"},
                "max_batch": 5,
                "max_expires": 5 * MS,
                "headers_only": True,
                "max_deliver": 5,
                "filter_subjects": ["s.a", "s.b"],
                "inactive_threshold": 7 * SEC,
                "num_replicas": 1,
                "priority_policy": "overflow",
                "priority_groups": ["A"],
            },
        ),
    ],
    "update-backoff-too-long": [
        cc("S.C", EXPLICIT | {"deliver_subject": "d", "backoff": [SEC]}),
        cc("S.C", EXPLICIT | {"deliver_subject": "d", "backoff": [SEC, SEC], "max_deliver": 1}),
    ],
    "update-keeps-pause": [
        cc("S.D", {"durable_name": "D"}),
        cc("S.D", {"durable_name": "D", "pause_until": "2099-01-01T00:00:00Z"}),
    ],
    "update-drops-metadata": [cc("S.C", {"metadata": {"k": "v"}}), cc("S.C")],
    "update-invalid-config": [cc("S.C"), cc("S.C", {"ack_wait": -1})],
    # more edges
    "legacy-durable-other-name": [
        raw(
            "CONSUMER.DURABLE.CREATE.S.D",
            '{"stream_name":"S","config":{"durable_name":"D","name":"X"}}',
        )
    ],
    "start-time-with-all": [cc("S.C", {"opt_start_time": "2024-01-01T00:00:00Z"})],
    "start-seq-with-last-per-subject": [
        cc("S.C", {"deliver_policy": "last_per_subject", "opt_start_seq": 2})
    ],
    "last-per-subject-filtered": [
        cc("S.C", {"deliver_policy": "last_per_subject", "filter_subjects": ["s.a", "s.b"]})
    ],
    "wildcard-filter-in-subject": [cc("S.C.s.*.x", {"filter_subject": "s.*.x"})],
    "description-at-limit": [cc("S.C", {"description": "d" * 4096})],
    "sample-plain-number": [cc("S.C", {"sample_freq": "101"})],
    "sample-overflow": [cc("S.C", {"sample_freq": "99999999999999999999%"})],
    "sample-empty-percent": [cc("S.C", {"sample_freq": "%"})],
    "interest-no-ack-pull": [cc("I.C")],
    "interest-replicas-zero": [cc("I.C", EXPLICIT | {"num_replicas": 0})],
    "backoff-unlimited-deliver": [cc("S.C", EXPLICIT | {"backoff": [SEC, 2 * SEC, 4 * SEC]})],
    "backoff-enough-deliver": [cc("S.C", EXPLICIT | {"backoff": [SEC, 2 * SEC], "max_deliver": 2})],
    "group-too-long": [cc("S.C", {"priority_policy": "overflow", "priority_groups": ["G" * 17]})],
    "group-max-length": [
        cc("S.C", {"priority_policy": "overflow", "priority_groups": ["a-b_c/d=e" + "x" * 7]})
    ],
    "client-sets-level": [cc("S.C", {"metadata": {"_nats.req.level": "9", "_nats.level": "3"}})],
    "pause-in-past": [cc("S.C", {"pause_until": "2001-01-01T00:00:00Z"})],
    "heartbeat-at-minimum": [cc("S.C", {"deliver_subject": "d", "idle_heartbeat": 100 * MS})],
    "expires-at-minimum": [cc("S.C", {"max_expires": MS})],
    "create-or-update-twice": [cc("S.C", EXPLICIT)] * 2,
    "ephemerals-twice": [cc("S"), cc("S")],
    "durable-create-twice": [cc("S.D", {"durable_name": "D"}, action="create")] * 2,
    "durable-create-different": [
        cc("S.D", {"durable_name": "D"}, action="create"),
        cc("S.D", {"durable_name": "D", "max_deliver": 3}, action="create"),
    ],
    "durable-update-start-time": [
        cc(
            "S.D",
            {
                "durable_name": "D",
                "deliver_policy": "by_start_time",
                "opt_start_time": "2024-01-01T00:00:00Z",
            },
        ),
        cc(
            "S.D",
            {
                "durable_name": "D",
                "deliver_policy": "by_start_time",
                "opt_start_time": "2024-01-01T01:00:00+01:00",
            },
        ),
        cc(
            "S.D",
            {
                "durable_name": "D",
                "deliver_policy": "by_start_time",
                "opt_start_time": "2024-01-02T00:00:00Z",
            },
        ),
    ],
    "update-flow-control": [
        cc("S.C", {"deliver_subject": "d", "idle_heartbeat": SEC}),
        cc("S.C", {"deliver_subject": "d", "idle_heartbeat": SEC, "flow_control": True}),
    ],
    "update-direct": [
        cc("S", {"name": "E", "deliver_subject": "d"}),
        cc("S", {"name": "E", "deliver_subject": "d", "direct": True}),
    ],
    "pedantic-ephemeral": [cc("S", {}, pedantic=True)],
    "pedantic-pinned": [
        cc(
            "S.C",
            {"priority_policy": "pinned_client", "priority_groups": ["A"]},
            pedantic=True,
        )
    ],
    "pedantic-push": [cc("S.C", {"deliver_subject": "d", "ack_policy": "all"}, pedantic=True)],
    "sample-plus-sign": [cc("S.C", {"sample_freq": "+5"})],
    "sample-space": [cc("S.C", {"sample_freq": " 5"})],
    "max-ack-pending-unlimited": [cc("S.C", EXPLICIT | {"max_ack_pending": -1})],
    "description-multibyte": [cc("S.C", {"description": "é" * 2049})],
    "metadata-updated-level": [
        cc("S.D", {"durable_name": "D", "priority_policy": "overflow", "priority_groups": ["A"]}),
        cc("S.D", {"durable_name": "D"}),
    ],
    "durable-then-named-same": [cc("S.D", {"durable_name": "D"}), cc("S.D")],
    "named-then-durable-same": [cc("S.D"), cc("S.D", {"durable_name": "D"})],
    "durable-clear-threshold": [
        cc("S.D", {"durable_name": "D", "inactive_threshold": SEC}),
        cc("S.D", {"durable_name": "D"}),
    ],
    "named-clear-threshold": [cc("S.C", {"inactive_threshold": SEC}), cc("S.C")],
    "named-set-threshold": [cc("S.C"), cc("S.C", {"inactive_threshold": SEC})],
    "wq-push-explicit": [cc("W.C", EXPLICIT | {"deliver_subject": "d"})],
    "wq-push-no-ack": [cc("W.C", {"deliver_subject": "d"})],
    "wq-overlap-disjoint-wildcards": [
        cc("W.C", EXPLICIT | {"filter_subject": "w.a.*"}),
        cc("W.D", EXPLICIT | {"filter_subject": "w.*.b"}),
    ],
}


class Model:
    """Our side: the streams, their consumers, and the pure decision functions."""

    def __init__(self) -> None:
        self.streams: dict[str, StreamConfig] = {}
        self.consumers: dict[str, dict[str, ConsumerConfig]] = {}
        for name, fields in STREAMS.items():
            body = json.dumps({"name": name} | fields).encode()
            self.streams[name] = create_stream_request(body, name, []).config
            self.consumers[name] = {}

    def apply(self, step: Step) -> tuple[Any, ...]:
        try:
            cfg = self._create(step.subject, step.body)
        except ApiErrorException as exc:
            return ("error", exc.error.err_code, exc.error.description)
        return ("ok", normalized_config(consumer_config_to_json(cfg)))

    def _create(self, subject: str, body: bytes) -> ConsumerConfig:
        tokens = subject.split(".")
        legacy = tokens[1] == "DURABLE"
        rest = tokens[3:] if legacy else tokens[2:]
        stream_name = rest[0]
        name = rest[1] if len(rest) > 1 else None
        filt = ".".join(rest[2:]) if len(rest) > 2 else None
        request = parse_consumer_request(body, stream_name, name, filt, legacy_durable=legacy)
        stream = self.streams.get(stream_name)
        if stream is None:
            raise STREAM_NOT_FOUND.exc()
        cfg = apply_consumer_defaults(request.config, stream, pedantic=request.pedantic)
        key = cfg.durable_name or cfg.name
        consumers = self.consumers[stream_name]
        cfg = validate_consumer(
            cfg,
            stream,
            is_pull=not cfg.deliver_subject,
            existing=consumers.get(key) if key else None,
            action=request.action,
            others=[c for n, c in consumers.items() if n != key],
        )
        consumers[key or f"_eph{len(consumers)}"] = cfg
        return cfg


async def _reset(nc: nats.NATS) -> None:
    await delete_all_streams(nc)
    for name, fields in STREAMS.items():
        body = json.dumps({"name": name} | fields).encode()
        reply = await nc.request(f"$JS.API.STREAM.CREATE.{name}", body, timeout=5)
        assert "error" not in json.loads(reply.data)


@pytest.mark.parametrize("steps", SCENARIOS.values(), ids=SCENARIOS.keys())
async def test_same_decision_as_reference(reference_server: Any, steps: list[Step]) -> None:
    nc = await nats.connect(reference_server.url)
    try:
        await _reset(nc)
        model = Model()
        for index, step in enumerate(steps):
            reply = await nc.request(f"$JS.API.{step.subject}", step.body, timeout=5)
            theirs = reference_outcome(json.loads(reply.data))
            ours = model.apply(step)
            where = f"step {index} ({step.subject} {step.body[:100]!r})"
            if step.expect == NEWER:
                assert theirs[:2] != ("error", 10025), f"{where}: reference did not decode it"
                assert ours[:2] == ("error", 10025), f"{where}: we did not refuse: {ours}"
            else:
                assert ours == theirs, f"{where}\n ours:   {ours}\n theirs: {theirs}"
    finally:
        await nc.close()


ROUND_TRIP = {
    "durable_name": "RT",
    "description": "round trip",
    "ack_policy": "explicit",
    "ack_wait": 10 * SEC,
    "max_deliver": 5,
    "backoff": [10 * SEC, 20 * SEC],
    "filter_subjects": ["s.a", "s.b"],
    "sample_freq": "30%",
    "max_ack_pending": 100,
    "headers_only": True,
    "max_batch": 50,
    "max_expires": 30 * SEC,
    "inactive_threshold": 3600 * SEC,
    "metadata": {"owner": "ops"},
}


async def test_nats_py_round_trip_update_matches(reference_server: Any) -> None:
    """An update nats-py builds from a returned config ends the same way on both sides."""
    from nats.js.api import ConsumerConfig as ClientConfig

    body = json.dumps({"stream_name": "S", "config": ROUND_TRIP}).encode()
    nc = await nats.connect(reference_server.url)
    try:
        await _reset(nc)
        model = Model()
        step = Step("CONSUMER.CREATE.S.RT", body)
        reply = await nc.request(f"$JS.API.{step.subject}", body, timeout=5)
        created = json.loads(reply.data)
        assert model.apply(step) == reference_outcome(created)
        ours = consumer_config_to_json(model.consumers["S"]["RT"])
        for source in (created["config"], ours):
            client_cfg = ClientConfig.from_response(copy.deepcopy(source))
            echoed = json.dumps({"stream_name": "S", "config": client_cfg.as_dict()}).encode()
            echo = Step("CONSUMER.CREATE.S.RT", echoed)
            reply = await nc.request(f"$JS.API.{echo.subject}", echoed, timeout=5)
            theirs = reference_outcome(json.loads(reply.data))
            assert model.apply(echo) == theirs
            assert theirs[0] == "ok"
            # nats-py does not carry max_batch/max_expires, so only those may differ.
            expected = {
                k: v for k, v in created["config"].items() if k not in ("max_batch", "max_expires")
            }
            assert theirs[1] == normalized_config(expected)
    finally:
        await nc.close()


def _nats_py_step(stream: str, **fields: Any) -> Step:
    """The request nats-py's ``add_consumer`` sends for these ConsumerConfig fields."""
    from nats.js.api import ConsumerConfig as ClientConfig

    config = ClientConfig(**fields)
    body = json.dumps({"stream_name": stream, "config": config.as_dict()}).encode()
    if config.name:
        subject = f"CONSUMER.CREATE.{stream}.{config.name}"
        if config.filter_subject and config.filter_subject != ">":
            subject += f".{config.filter_subject}"
    elif config.durable_name:
        subject = f"CONSUMER.DURABLE.CREATE.{stream}.{config.durable_name}"
    else:
        subject = f"CONSUMER.CREATE.{stream}"
    return Step(subject, body)


def _nats_py_cases() -> dict[str, list[Step]]:
    from nats.js.api import AckPolicy, DeliverPolicy, ReplayPolicy

    return {
        "durable-pull": [_nats_py_step("S", durable_name="D", ack_policy=AckPolicy.EXPLICIT)],
        "durable-pull-again": [_nats_py_step("S", durable_name="D")] * 2,
        "ephemeral-push": [
            _nats_py_step("S", deliver_subject="in.box", idle_heartbeat=5, flow_control=True)
        ],
        "named-filtered": [_nats_py_step("S", name="N", filter_subject="s.a.*")],
        "named-filter-all": [_nats_py_step("S", name="N", filter_subject=">")],
        "named-multi-filter": [_nats_py_step("S", name="N", filter_subjects=["s.a", "s.b"])],
        "backoff": [
            _nats_py_step(
                "S",
                durable_name="B",
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=2,
                backoff=[2, 4, 8],
                max_deliver=5,
            )
        ],
        "start-time": [
            _nats_py_step(
                "S",
                name="T",
                deliver_policy=DeliverPolicy.BY_START_TIME,
                opt_start_time="2024-01-01T00:00:00Z",
                replay_policy=ReplayPolicy.ORIGINAL,
            )
        ],
        "workqueue": [
            _nats_py_step("W", durable_name="A", ack_policy=AckPolicy.EXPLICIT),
            _nats_py_step("W", durable_name="B", ack_policy=AckPolicy.EXPLICIT),
        ],
        "update-description": [
            _nats_py_step("S", durable_name="D"),
            _nats_py_step("S", durable_name="D", description="now with a description"),
        ],
        "inactive-named": [_nats_py_step("S", name="I", inactive_threshold=30)],
        "metadata": [_nats_py_step("S", name="M", metadata={"team": "x"})],
    }


@pytest.mark.parametrize("case", list(_nats_py_cases()))
async def test_nats_py_requests(reference_server: Any, case: str) -> None:
    """The requests nats-py's add_consumer builds end the same way on both sides."""
    steps = _nats_py_cases()[case]
    nc = await nats.connect(reference_server.url)
    try:
        await _reset(nc)
        model = Model()
        for index, step in enumerate(steps):
            reply = await nc.request(f"$JS.API.{step.subject}", step.body, timeout=5)
            theirs = reference_outcome(json.loads(reply.data))
            ours = model.apply(step)
            assert ours == theirs, f"step {index} ({step.subject} {step.body!r})"
    finally:
        await nc.close()
