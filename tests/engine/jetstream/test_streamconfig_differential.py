"""Differential test: STREAM.CREATE/UPDATE decisions against a real nats-server.

Each scenario is a short sequence of raw API requests. They go to the reference server (with
nats-py, as a client would send them) and through our pure functions, which keep their own
model of the account's streams. Every step must end the same way: the same ``err_code`` and
description, or success with the same resulting config. The reference's dynamic metadata
(``_nats.ver``, ``_nats.level``) names its own version and is left out of the comparison.

Steps marked ``UNSUPPORTED`` are intended differences: the reference accepts them, Headwater
refuses them with 10052 "... not supported yet" until it runs counters, atomic batches,
schedules and async persistence.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import nats
import pytest

from headwater.server.jetstream.errors import ApiErrorException
from headwater.server.jetstream.streamconfig import StreamConfig, config_to_json
from headwater.server.jetstream.streamconfig_update import update_stream_request
from headwater.server.jetstream.streamconfig_validate import create_stream_request
from support.jsreference import delete_all_streams, normalized_config, reference_outcome

pytestmark = pytest.mark.differential

SAME = "same"
UNSUPPORTED = "unsupported"
SEC = 1_000_000_000


@dataclass(frozen=True)
class Step:
    verb: str
    name: str
    body: bytes
    expect: str = SAME


def _body(body: dict[str, Any] | str) -> bytes:
    return (body if isinstance(body, str) else json.dumps(body)).encode()


def create(name: str, expect: str = SAME, **fields: Any) -> Step:
    return Step("CREATE", name, _body({"name": name, **fields}), expect)


def update(name: str, **fields: Any) -> Step:
    return Step("UPDATE", name, _body({"name": name, **fields}))


def raw(verb: str, name: str, body: str) -> Step:
    return Step(verb, name, body.encode())


SCENARIOS: dict[str, list[Step]] = {
    # decoding
    "truncated": [raw("CREATE", "S", "{")],
    "truncated-update": [create("S"), raw("UPDATE", "S", '{"name":"S",')],
    "trailing-garbage": [raw("CREATE", "S", '{"name":"S"} x')],
    "bad-literal": [raw("CREATE", "S", '{"name":tru}')],
    "bad-number": [raw("CREATE", "S", '{"name":"S","max_msgs":1.}')],
    "bad-escape": [raw("CREATE", "S", '{"name":"S\\q"}')],
    "control-char": [raw("CREATE", "S", '{"name":"S","description":"a\tb"}')],
    "missing-colon": [raw("CREATE", "S", '{"name" "S"}')],
    "array-body": [raw("CREATE", "S", "[1]")],
    "null-body": [raw("CREATE", "S", "null")],
    "empty-body": [raw("CREATE", "S", "")],
    "empty-update-body": [create("S"), raw("UPDATE", "S", "")],
    "enum-unknown": [create("S", retention="Limits")],
    "enum-null": [create("S", storage=None)],
    "compression-empty": [create("S", compression="")],
    "compression-null": [create("S", compression=None)],
    "duration-string": [create("S", max_age="1s")],
    "float-int": [create("S", max_msgs=1.5)],
    "int32-overflow": [create("S", max_msg_size=3_000_000_000)],
    "uint-negative": [create("S", first_seq=-1)],
    "subjects-string": [create("S", subjects="s")],
    "subjects-number": [create("S", subjects=[1])],
    "bool-number": [create("S", sealed=1)],
    "nested-type": [create("S", placement={"cluster": 1})],
    "source-element-type": [create("S", sources=[{"name": 1}])],
    "metadata-value-type": [create("S", metadata={"a": 1})],
    "nulls-ignored": [create("S", max_age=None, sealed=None, subjects=None)],
    "case-insensitive-keys": [raw("CREATE", "S", '{"name":"S","SUBJECTS":["s.x"]}')],
    "last-key-wins": [raw("CREATE", "S", '{"name":"S","NAME":"T"}')],
    "unknown-field": [create("S", foo=1)],
    "enum-number": [create("S", retention=5)],
    "compression-number": [create("S", compression=5)],
    "exponent-int": [raw("CREATE", "S", '{"name":"S","max_msgs":1e3}')],
    "int-overflow": [raw("CREATE", "S", '{"name":"S","num_replicas":9223372036854775808}')],
    "struct-string": [create("S", placement="x")],
    "map-array": [create("S", metadata=[])],
    "null-collections": [create("S", metadata=None, consumer_limits=None, sources=None)],
    "null-source": [create("S", sources=[None])],
    "null-in-string-list": [create("S", subjects=["s", None])],
    "null-map-value": [create("S", metadata={"a": None})],
    "null-transform-element": [create("S", mirror={"name": "O", "subject_transforms": [None]})],
    "bad-start-time": [create("S", mirror={"name": "O", "opt_start_time": "bad"})],
    # names
    "name-mismatch": [Step("CREATE", "S", _body({"name": "T"}))],
    "name-missing": [raw("CREATE", "S", '{"subjects":["s"]}')],
    "name-path-separator": [create("a/b")],
    "name-too-long": [create("N" * 256)],
    "description-too-long": [create("S", description="d" * 4097)],
    "metadata-too-large": [create("S", metadata={"k": "v" * (128 * 1024)})],
    # defaults
    "defaults": [create("S")],
    "defaults-explicit-subjects": [create("S", subjects=["s.*", "t"])],
    "max-age-shortens-window": [create("S", max_age=60 * SEC)],
    "explicit-window": [create("S", duplicate_window=SEC)],
    "negative-limits-become-unlimited": [
        create("S", max_msgs=-5, max_bytes=-9, max_consumers=-3, max_msg_size=-7)
    ],
    "all-flags": [
        create(
            "S",
            description="hi",
            retention="workqueue",
            storage="memory",
            discard="new",
            compression="s2",
            first_seq=100,
            no_ack=True,
            allow_direct=True,
            deny_delete=True,
            deny_purge=True,
            max_msgs_per_subject=5,
            discard_new_per_subject=True,
            consumer_limits={"inactive_threshold": SEC, "max_ack_pending": 10},
            metadata={"team": "x", "_nats.ver": "9", "_nats.custom": "y"},
        )
    ],
    "ttl-sets-required-level": [create("S", allow_msg_ttl=True)],
    "markers-imply-ttl-and-rollup": [create("S", subject_delete_marker_ttl=SEC)],
    "empty-placement-dropped": [create("S", placement={})],
    "placement-cluster": [create("S", placement={"cluster": "c", "tags": ["a"]})],
    "republish-default-source": [create("S", republish={"dest": "rp.>"})],
    "subject-transform": [create("S", subject_transform={"src": "S", "dest": "x.S"})],
    "transform-functions": [
        create(
            "S",
            subjects=["s.*.*"],
            subject_transform={"src": "s.*.*", "dest": "x.{{partition(3,1,2)}}.$2.{{split(1,-)}}"},
        )
    ],
    "implicit-republish": [
        create(
            "S",
            subjects=["in.>"],
            subject_transform={"src": "in.>", "dest": "out.>"},
            republish={"src": ">", "dest": ">"},
        )
    ],
    "pedantic-implicit-republish": [
        create(
            "S",
            pedantic=True,
            subjects=["in.>"],
            subject_transform={"src": "in.>", "dest": "out.>"},
            republish={"src": ">", "dest": ">"},
        )
    ],
    # validation
    "replicas-3": [create("S", num_replicas=3)],
    "replicas-6": [create("S", num_replicas=6)],
    "replicas-negative": [create("S", num_replicas=-1)],
    "replicas-after-config-error": [create("S", num_replicas=3, max_age=-5)],
    "max-age-negative": [create("S", max_age=-5)],
    "max-age-too-small": [create("S", max_age=50_000_000)],
    "window-negative": [create("S", duplicate_window=-5)],
    "window-too-small": [create("S", duplicate_window=5)],
    "window-above-max-age": [create("S", max_age=SEC, duplicate_window=2 * SEC)],
    "subjects-overlap-self": [create("S", subjects=["a.*", "a.b"])],
    "subjects-duplicate": [create("S", subjects=["a", "a"])],
    "subject-invalid": [create("S", subjects=["a..b"])],
    "subject-empty": [create("S", subjects=["a", ""])],
    "subject-whitespace": [create("S", subjects=["a b"])],
    "subject-fwc-not-last": [create("S", subjects=["a.>.b"])],
    "capture-all": [create("S", subjects=[">"])],
    "capture-all-no-ack": [create("S", subjects=[">"], no_ack=True)],
    "js-api-subjects": [create("S", subjects=["$JS.API.>"])],
    "jsc-subjects": [create("S", subjects=["$JSC.x"])],
    "js-event-subjects": [create("S", subjects=["$JS.EVENT.>"])],
    "sys-subjects": [create("S", subjects=["$SYS.>"])],
    "sys-account-subjects": [create("S", subjects=["$SYS.ACCOUNT.x"])],
    "sealed-on-create": [create("S", sealed=True, max_age=-1)],
    "mirror-direct-without-mirror": [create("S", mirror_direct=True)],
    "rollup-without-purge": [create("S", deny_purge=True, allow_rollup_hdrs=True)],
    "discard-new-per-subject-old": [create("S", discard_new_per_subject=True)],
    "discard-new-per-subject-no-limit": [create("S", discard_new_per_subject=True, discard="new")],
    "markers-below-1s": [create("S", subject_delete_marker_ttl=500_000_000)],
    "markers-negative": [create("S", subject_delete_marker_ttl=-1)],
    "preferred-placement": [create("S", placement={"preferred": "x"})],
    "republish-cycle": [create("S", subjects=["q.>"], republish={"src": "q.>", "dest": "q.x"})],
    "republish-bad-transform": [create("S", subjects=["s"], republish={"src": "s", "dest": "r.*"})],
    "transform-bad-source": [create("S", subject_transform={"src": "s..", "dest": "x"})],
    "transform-bad-index": [
        create("S", subject_transform={"src": "s.*", "dest": "x.{{wildcard(2)}}"})
    ],
    "transform-unknown-function": [
        create("S", subject_transform={"src": "s.*", "dest": "x.{{nope(1)}}"})
    ],
    "mirror-with-subjects": [create("S", subjects=["m"], mirror={"name": "O"})],
    "mirror-with-sources": [create("S", mirror={"name": "O"}, sources=[{"name": "P"}])],
    "mirror-bad-name": [create("S", mirror={"name": "a.b"})],
    "source-duplicate": [create("S", sources=[{"name": "O"}, {"name": "O"}])],
    "counter-discard-new": [create("S", allow_msg_counter=True, discard="new")],
    "counter-with-ttl": [create("S", allow_msg_counter=True, allow_msg_ttl=True)],
    "schedules-discard-new": [create("S", allow_msg_schedules=True, discard="new")],
    "async-memory": [create("S", persist_mode="async", storage="memory")],
    "persist-mode-unknown": [create("S", persist_mode="foo")],
    # pedantic
    "pedantic-limit": [create("S", pedantic=True, max_msgs=-7)],
    "pedantic-window": [create("S", pedantic=True, max_age=60 * SEC)],
    "pedantic-markers": [create("S", pedantic=True, subject_delete_marker_ttl=SEC)],
    "pedantic-markers-rollup": [
        create("S", pedantic=True, subject_delete_marker_ttl=SEC, allow_msg_ttl=True)
    ],
    "pedantic-republish": [create("S", pedantic=True, republish={"dest": "r"})],
    "pedantic-ok": [create("S", pedantic=True, duplicate_window=120 * SEC)],
    # mirrors and sources (run since issue 5)
    "mirror": [create("S", mirror={"name": "O"})],
    "sources": [create("S", sources=[{"name": "O"}])],
    # not supported yet (intended differences)
    "counter": [create("S", UNSUPPORTED, allow_msg_counter=True)],
    "atomic": [create("S", UNSUPPORTED, allow_atomic=True)],
    "schedules": [create("S", UNSUPPORTED, allow_msg_schedules=True)],
    "async": [create("S", UNSUPPORTED, persist_mode="async")],
    # existing streams
    "create-idempotent": [create("S", subjects=["s"]), create("S", subjects=["s"])],
    "create-idempotent-metadata": [
        create("S", metadata={"a": "b"}),
        create("S", metadata={"a": "b", "_nats.ver": "1", "_nats.req.level": "7"}),
    ],
    "create-different": [create("S", subjects=["s"]), create("S", subjects=["t"])],
    "create-metadata-differs": [create("S", metadata={"a": "b"}), create("S")],
    "create-overlap": [create("S", subjects=["a.>"]), create("T", subjects=["a.b"])],
    "create-overlap-wildcards": [create("S", subjects=["*.b"]), create("T", subjects=["a.*"])],
    "create-no-overlap": [create("S", subjects=["a.*"]), create("T", subjects=["a.b.c"])],
    "replicas-before-existing": [create("S"), create("S", num_replicas=3, subjects=["x"])],
    # updates
    "update-missing": [update("S", subjects=["s"])],
    "update-missing-invalid": [update("S", max_age=-1)],
    "update-name-mismatch": [create("S"), Step("UPDATE", "S", _body({"name": "T"}))],
    "update-storage": [create("S"), update("S", storage="memory")],
    "update-retention-workqueue": [create("S"), update("S", retention="workqueue")],
    "update-retention-interest": [create("S"), update("S", retention="interest")],
    "update-limits": [
        create("S"),
        update("S", max_msgs=10, max_bytes=1000, max_age=3600 * SEC, max_consumers=5),
    ],
    "update-replicas": [create("S"), update("S", num_replicas=3)],
    "update-deny-delete": [create("S", deny_delete=True), update("S")],
    "update-deny-purge": [create("S", deny_purge=True), update("S")],
    "update-ttl-disable": [create("S", allow_msg_ttl=True), update("S")],
    "update-ttl-enable": [create("S"), update("S", allow_msg_ttl=True)],
    "update-seal": [
        create("S", max_age=3600 * SEC, allow_rollup_hdrs=True),
        update("S", sealed=True, max_age=3600 * SEC, allow_rollup_hdrs=True),
    ],
    "update-unseal": [create("S"), update("S", sealed=True), update("S")],
    "update-add-mirror": [create("S"), update("S", mirror={"name": "O"})],
    "update-persist-mode": [create("S"), update("S", persist_mode="async")],
    "update-counter": [create("S"), update("S", allow_msg_counter=True)],
    "update-mirror-direct": [create("S"), update("S", mirror_direct=True)],
    "update-first-seq": [create("S"), update("S", first_seq=10)],
    "update-subjects-overlap": [
        create("S", subjects=["a"]),
        create("T", subjects=["b"]),
        update("T", subjects=["a"]),
    ],
    "update-subjects-change": [create("S", subjects=["a"]), update("S", subjects=["a", "b"])],
    "update-drops-metadata": [create("S", metadata={"k": "v"}), update("S")],
    "update-invalid": [create("S"), update("S", max_age=-1)],
    "update-discard-new-per-subject": [create("S"), update("S", discard_new_per_subject=True)],
}


class Model:
    """Our side: the account's streams and the pure decision functions."""

    def __init__(self) -> None:
        self.streams: dict[str, StreamConfig] = {}

    def apply(self, step: Step) -> tuple[Any, ...]:
        try:
            if step.verb == "CREATE":
                outcome = create_stream_request(step.body, step.name, self.streams.values())
                cfg = outcome.config
            else:
                cfg = update_stream_request(step.body, step.name, self.streams)
        except ApiErrorException as exc:
            return ("error", exc.error.err_code, exc.error.description)
        self.streams[cfg.name] = cfg
        return ("ok", normalized_config(config_to_json(cfg)))


@pytest.mark.parametrize("steps", SCENARIOS.values(), ids=SCENARIOS.keys())
async def test_same_decision_as_reference(reference_server: Any, steps: list[Step]) -> None:
    nc = await nats.connect(reference_server.url)
    try:
        await delete_all_streams(nc)
        model = Model()
        for index, step in enumerate(steps):
            reply = await nc.request(
                f"$JS.API.STREAM.{step.verb}.{step.name}", step.body, timeout=5
            )
            theirs = reference_outcome(json.loads(reply.data))
            ours = model.apply(step)
            where = f"step {index} ({step.verb} {step.body[:80]!r})"
            if step.expect == UNSUPPORTED:
                assert theirs[0] == "ok", f"{where}: reference refused {theirs}"
                assert ours[:2] == ("error", 10052), f"{where}: we did not refuse: {ours}"
                assert ours[2].endswith("not supported yet"), where
            else:
                assert ours == theirs, f"{where}\n ours:   {ours}\n theirs: {theirs}"
    finally:
        await delete_all_streams(nc)
        await nc.close()


async def test_reference_is_a_jetstream_server(reference_server: Any) -> None:
    # Guards the fixture: the comparison above is meaningless against a wrong binary.
    assert reference_server.version.startswith("2.")
    nc = await nats.connect(reference_server.url)
    try:
        reply = await nc.request("$JS.API.INFO", b"", timeout=5)
    finally:
        await nc.close()
    assert "error" not in json.loads(reply.data)


ROUND_TRIP = {
    "name": "RT",
    "subjects": ["rt.*", "other"],
    "description": "round trip",
    "max_age": 3600 * SEC,
    "max_msgs_per_subject": 3,
    "discard": "new",
    "discard_new_per_subject": True,
    "allow_rollup_hdrs": True,
    "allow_direct": True,
    "allow_msg_ttl": True,
    "subject_delete_marker_ttl": 5 * SEC,
    "compression": "s2",
    "republish": {"src": "rt.*", "dest": "copy.rt.$1", "headers_only": True},
    "consumer_limits": {"inactive_threshold": 30 * SEC, "max_ack_pending": 100},
    "metadata": {"owner": "ops"},
}


async def test_nats_py_round_trip_update_matches(reference_server: Any) -> None:
    """An update built by nats-py from a returned config is a no-op on both sides."""
    from nats.js.api import StreamConfig as ClientConfig

    body = json.dumps(ROUND_TRIP).encode()
    nc = await nats.connect(reference_server.url)
    try:
        await delete_all_streams(nc)
        model = Model()
        reply = await nc.request("$JS.API.STREAM.CREATE.RT", body, timeout=5)
        created = json.loads(reply.data)
        assert model.apply(Step("CREATE", "RT", body)) == reference_outcome(created)
        for source in (created["config"], config_to_json(model.streams["RT"])):
            echoed = json.dumps(
                ClientConfig.from_response(copy.deepcopy(source)).as_dict()
            ).encode()
            reply = await nc.request("$JS.API.STREAM.UPDATE.RT", echoed, timeout=5)
            theirs = reference_outcome(json.loads(reply.data))
            ours = model.apply(Step("UPDATE", "RT", echoed))
            assert ours == theirs
            assert ours[1] == normalized_config(created["config"])
    finally:
        await delete_all_streams(nc)
        await nc.close()
