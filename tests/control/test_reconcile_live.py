"""Plan and apply against a real server of each kind (Headwater and nats-server).

Every scenario runs twice through ``js_server``: the plan after an apply must be empty on both
servers, which is what shows the model's defaults equal each server's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from nats.aio.client import Client

from headwater.control import api
from headwater.control.apply import ApplyRefused, ApplyReport, Status, apply_plan
from headwater.control.documents import Resource, load_documents, parse_documents
from headwater.control.live import read_live
from headwater.control.models import MANAGED_BY_KEY, Consumer, ResourceKey, Stream
from headwater.control.plan import Action, Plan, make_plan
from headwater.control.reconcile import export_documents, plan_resources
from headwater.testing import ServerProcess
from tests.control.conftest import run_on

ORDERS_DOCS = """
apiVersion: headwater.io/v1
kind: Stream
metadata: {name: orders}
spec: {name: ORDERS, subjects: ["ORDERS.*"], maxAge: 1y}
---
apiVersion: headwater.io/v1
kind: Consumer
metadata: {name: orders-new}
spec: {streamName: ORDERS, durableName: NEW, filterSubject: ORDERS.received, maxDeliver: 20}
"""


def resources(text: str) -> list[Resource]:
    loaded, errors = parse_documents(text, "test.yaml")
    assert errors == []
    return loaded


def plan_on(server: ServerProcess, docs: list[Resource], **options: Any) -> Plan:
    options.setdefault("owner", "cli")

    async def body(nc: Client) -> Plan:
        plan, _ = await plan_resources(nc, docs, **options)
        return plan

    return run_on(server, body)


def apply_on(server: ServerProcess, docs: list[Resource], **options: Any) -> ApplyReport:
    options.setdefault("owner", "cli")

    async def body(nc: Client) -> ApplyReport:
        plan, _ = await plan_resources(nc, docs, **options)
        return await apply_plan(nc, plan)

    return run_on(server, body)


def actions(plan: Plan) -> dict[str, str]:
    return {str(change.key): change.action.value for change in plan.changes}


def raw(server: ServerProcess, api_name: str, body: dict[str, Any] | None = None) -> Any:
    async def call(nc: Client) -> Any:
        return await api.request(nc, api_name, body)

    return run_on(server, call)


def test_minimal_server_configs_equal_model_defaults(clean_server: ServerProcess) -> None:
    """Configs created with nothing but a name read back as the models' defaults."""
    raw(clean_server, "STREAM.CREATE.RAW", {"name": "RAW"})
    raw(
        clean_server,
        "CONSUMER.CREATE.RAW.PULL",
        {"stream_name": "RAW", "config": {"durable_name": "PULL", "ack_policy": "explicit"}},
    )
    raw(
        clean_server,
        "CONSUMER.CREATE.RAW.PUSH",
        {"stream_name": "RAW", "config": {"durable_name": "PUSH", "deliver_subject": "out.x"}},
    )
    live = run_on(clean_server, read_live)
    expected = {
        ResourceKey("Stream", "RAW"): Stream(name="RAW"),
        ResourceKey("Consumer", "PULL", "RAW"): Consumer(stream_name="RAW", durable_name="PULL"),
        # The JSON zero value of ack_policy is none, which is what a bare request gets.
        ResourceKey("Consumer", "PUSH", "RAW"): Consumer(
            stream_name="RAW", durable_name="PUSH", deliver_subject="out.x", ack_policy="none"
        ),
    }
    for key, spec in expected.items():
        assert live.spec(key).comparable(control=False) == spec.comparable(control=False), key
    assert sorted(map(str, live.resource_keys())) == sorted(map(str, expected))


def test_plan_apply_then_empty_plan(clean_server: ServerProcess) -> None:
    docs = resources(ORDERS_DOCS)
    first = plan_on(clean_server, docs)
    assert actions(first) == {"Stream/ORDERS": "create", "Consumer/ORDERS/NEW": "create"}
    assert first.has_changes
    report = apply_on(clean_server, docs)
    assert report.ok
    assert [r.status for r in report.results] == [Status.APPLIED, Status.APPLIED]
    second = plan_on(clean_server, docs)
    assert not second.has_changes
    assert set(actions(second).values()) == {"noop"}
    info = raw(clean_server, "STREAM.INFO.ORDERS")
    assert info["config"]["max_age"] == 365 * 24 * 3600 * 10**9
    assert info["config"]["metadata"][MANAGED_BY_KEY] == "cli"


def test_in_place_update_lists_fields(clean_server: ServerProcess) -> None:
    apply_on(clean_server, resources(ORDERS_DOCS))
    changed = ORDERS_DOCS.replace("maxAge: 1y", "maxAge: 90d, description: orders").replace(
        "maxDeliver: 20", "maxDeliver: 5"
    )
    plan = plan_on(clean_server, resources(changed))
    by_key = {str(c.key): c for c in plan.changes}
    stream = by_key["Stream/ORDERS"]
    assert stream.action is Action.UPDATE
    fields = {f.path: (f.before, f.after) for f in stream.fields}
    day = 24 * 3600 * 10**9
    assert fields == {"description": (None, "orders"), "max_age": (365 * day, 90 * day)}
    assert stream.spec is not None and stream.spec.display("max_age", 90 * day) == "90d"
    consumer = by_key["Consumer/ORDERS/NEW"]
    assert consumer.action is Action.UPDATE
    assert [(f.path, f.before, f.after) for f in consumer.fields] == [("max_deliver", 20, 5)]
    assert apply_on(clean_server, resources(changed)).ok
    assert not plan_on(clean_server, resources(changed)).has_changes
    assert raw(clean_server, "CONSUMER.INFO.ORDERS.NEW")["config"]["max_deliver"] == 5


def test_replace_is_refused_then_allowed(clean_server: ServerProcess) -> None:
    apply_on(clean_server, resources(ORDERS_DOCS))
    memory = ORDERS_DOCS.replace("maxAge: 1y", "maxAge: 1y, storage: memory")
    plan = plan_on(clean_server, resources(memory))
    stream = next(c for c in plan.changes if c.key.kind == "Stream")
    assert stream.action is Action.REPLACE
    assert stream.destructive
    assert stream.reasons == ["storage type can not change in place"]
    assert "allow-replace" in stream.refused
    # The consumer goes with its stream, so it is created again.
    consumer = next(c for c in plan.changes if c.key.kind == "Consumer")
    assert consumer.action is Action.CREATE

    async def refused(nc: Client) -> None:
        with pytest.raises(ApplyRefused):
            await apply_plan(nc, plan)

    run_on(clean_server, refused)
    assert raw(clean_server, "STREAM.INFO.ORDERS")["config"]["storage"] == "file"

    annotated = memory.replace(
        "metadata: {name: orders}",
        'metadata: {name: orders, annotations: {"headwater.io/allow-replace": "true"}}',
    )
    report = apply_on(clean_server, resources(annotated))
    assert report.ok, report.to_dict()
    assert raw(clean_server, "STREAM.INFO.ORDERS")["config"]["storage"] == "memory"
    assert raw(clean_server, "CONSUMER.INFO.ORDERS.NEW")["config"]["max_deliver"] == 20
    assert not plan_on(clean_server, resources(annotated)).has_changes


def test_consumer_replace_with_flag(clean_server: ServerProcess) -> None:
    apply_on(clean_server, resources(ORDERS_DOCS))
    changed = ORDERS_DOCS.replace("maxDeliver: 20", "maxDeliver: 20, deliverPolicy: new")
    plan = plan_on(clean_server, resources(changed))
    consumer = next(c for c in plan.changes if c.key.kind == "Consumer")
    assert consumer.action is Action.REPLACE
    assert consumer.reasons == ["deliver policy can not be updated"]
    assert consumer.refused
    assert apply_on(clean_server, resources(changed), allow_replace=True).ok
    assert raw(clean_server, "CONSUMER.INFO.ORDERS.NEW")["config"]["deliver_policy"] == "new"


def test_prune_deletes_only_owned(clean_server: ServerProcess) -> None:
    apply_on(clean_server, resources(ORDERS_DOCS))
    raw(clean_server, "STREAM.CREATE.HANDMADE", {"name": "HANDMADE"})
    raw(
        clean_server,
        "CONSUMER.CREATE.ORDERS.MANUAL",
        {"stream_name": "ORDERS", "config": {"durable_name": "MANUAL", "ack_policy": "explicit"}},
    )
    only_stream = resources(ORDERS_DOCS.split("---")[0])
    without_prune = plan_on(clean_server, only_stream)
    assert not without_prune.has_changes
    plan = plan_on(clean_server, only_stream, prune=True)
    assert actions(plan) == {"Stream/ORDERS": "noop", "Consumer/ORDERS/NEW": "delete"}
    assert apply_on(clean_server, only_stream, prune=True).ok
    names = raw(clean_server, "CONSUMER.NAMES.ORDERS")["consumers"]
    assert sorted(names) == ["MANUAL"]
    assert "HANDMADE" in raw(clean_server, "STREAM.NAMES", {})["streams"]
    # With no documents for the stream either, prune takes it (and its consumers).
    other = resources(
        "apiVersion: headwater.io/v1\nkind: Stream\nmetadata: {name: other}\nspec: {name: OTHER}\n"
    )
    plan = plan_on(clean_server, other, prune=True)
    assert actions(plan) == {
        "Stream/OTHER": "create",
        "Stream/ORDERS": "delete",
        "Consumer/ORDERS/MANUAL": "delete",
    }
    assert next(c for c in plan.changes if c.key.name == "MANUAL").implicit
    assert apply_on(clean_server, other, prune=True).ok
    assert sorted(raw(clean_server, "STREAM.NAMES", {})["streams"]) == ["HANDMADE", "OTHER"]


def test_stream_deleted_by_hand_is_drift(clean_server: ServerProcess) -> None:
    docs = resources(ORDERS_DOCS)
    apply_on(clean_server, docs)
    raw(clean_server, "STREAM.DELETE.ORDERS")
    plan = plan_on(clean_server, docs)
    assert actions(plan) == {"Stream/ORDERS": "create", "Consumer/ORDERS/NEW": "create"}
    assert [str(c.key) for c in plan.drift] == ["Stream/ORDERS", "Consumer/ORDERS/NEW"]
    assert apply_on(clean_server, docs).ok
    assert not plan_on(clean_server, docs).has_changes


def test_changed_by_hand_is_drift_and_corrected(clean_server: ServerProcess) -> None:
    docs = resources(ORDERS_DOCS)
    apply_on(clean_server, docs)
    config = raw(clean_server, "STREAM.INFO.ORDERS")["config"]
    raw(clean_server, "STREAM.UPDATE.ORDERS", config | {"max_msgs": 10})
    plan = plan_on(clean_server, docs)
    stream = next(c for c in plan.changes if c.key.kind == "Stream")
    assert [(f.path, f.before, f.after) for f in stream.fields] == [("max_msgs", 10, -1)]
    assert apply_on(clean_server, docs).ok
    assert raw(clean_server, "STREAM.INFO.ORDERS")["config"]["max_msgs"] == -1


def test_prevent_delete_and_prevent_update(clean_server: ServerProcess) -> None:
    guarded = ORDERS_DOCS.replace("maxAge: 1y", "maxAge: 1y, preventDelete: true")
    apply_on(clean_server, resources(guarded))
    # The guard is kept on the server, so a prune without the document still honours it.
    plan = plan_on(clean_server, [], prune=True)
    stream = next(c for c in plan.changes if c.key.kind == "Stream")
    assert stream.action is Action.DELETE
    assert stream.skipped.startswith("preventDelete")
    report = apply_on(clean_server, [], prune=True)
    assert report.ok
    assert "ORDERS" in raw(clean_server, "STREAM.NAMES", {})["streams"]
    # A replace would delete it: refused even when replaces are allowed.
    memory = guarded.replace("preventDelete: true", "preventDelete: true, storage: memory")
    plan = plan_on(clean_server, resources(memory), allow_replace=True)
    assert "preventDelete" in next(c for c in plan.changes if c.key.kind == "Stream").refused
    # The prune took the consumer (its stream stayed); put it back.
    assert apply_on(clean_server, resources(guarded)).ok
    # preventUpdate: the change shows, apply leaves the server alone.
    frozen = guarded.replace("maxAge: 1y", "maxAge: 2y, preventUpdate: true")
    plan = plan_on(clean_server, resources(frozen))
    stream = next(c for c in plan.changes if c.key.kind == "Stream")
    assert stream.action is Action.UPDATE and stream.skipped
    assert stream.drift and not plan.has_changes
    report = apply_on(clean_server, resources(frozen))
    assert report.ok and Status.SKIPPED in [r.status for r in report.results]
    assert raw(clean_server, "STREAM.INFO.ORDERS")["config"]["max_age"] == 365 * 24 * 3600 * 10**9


BUCKETS = """
apiVersion: headwater.io/v1
kind: KeyValue
metadata: {name: config}
spec: {bucket: config, history: 5, ttl: 1h, maxValueSize: 1KiB}
---
apiVersion: headwater.io/v1
kind: ObjectStore
metadata: {name: files}
spec: {maxBytes: 10MiB, description: blobs}
"""


def test_buckets_plan_apply_and_client_use(clean_server: ServerProcess) -> None:
    docs = resources(BUCKETS)
    assert actions(plan_on(clean_server, docs)) == {
        "KeyValue/config": "create",
        "ObjectStore/files": "create",
    }
    assert apply_on(clean_server, docs).ok
    assert not plan_on(clean_server, docs).has_changes

    async def use(nc: Client) -> tuple[bytes, int]:
        js = nc.jetstream()
        kv = await js.key_value("config")
        await kv.put("a", b"1")
        entry = await kv.get("a")
        status = await kv.status()
        return entry.value or b"", status.history

    assert run_on(clean_server, use) == (b"1", 5)
    changed = resources(BUCKETS.replace("history: 5", "history: 10"))
    plan = plan_on(clean_server, changed)
    kv = next(c for c in plan.changes if c.key.kind == "KeyValue")
    assert [(f.path, f.before, f.after) for f in kv.fields] == [("history", 5, 10)]
    assert apply_on(clean_server, changed).ok
    assert not plan_on(clean_server, changed).has_changes


def test_bucket_made_by_a_client_plans_clean(clean_server: ServerProcess) -> None:
    async def create(nc: Client) -> None:
        await nc.jetstream().create_key_value(bucket="made", history=3)

    run_on(clean_server, create)
    docs = resources(
        "apiVersion: headwater.io/v1\nkind: KeyValue\nmetadata: {name: made}\nspec: {history: 3}"
    )
    plan = plan_on(clean_server, docs)
    (change,) = plan.changes
    # Only the ownership marker differs: nobody managed the bucket, apply takes it over.
    assert [f.path for f in change.fields] == [f"metadata.{MANAGED_BY_KEY}"]
    # nats-py turned allow_msg_ttl on, which no update may switch off: the update keeps it.
    report = apply_on(clean_server, docs)
    assert report.ok, [r.message for r in report.results]
    assert raw(clean_server, "STREAM.INFO.KV_made")["config"]["allow_msg_ttl"] is True
    assert not plan_on(clean_server, docs).has_changes


def test_export_round_trips(clean_server: ServerProcess, tmp_path: Path) -> None:
    apply_on(clean_server, resources(ORDERS_DOCS + "---" + BUCKETS))
    documents = run_on(clean_server, export_documents)
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in documents)
    assert kinds == [
        ("Consumer", "orders-new"),
        ("KeyValue", "config"),
        ("ObjectStore", "files"),
        ("Stream", "orders"),
    ]
    stream = next(d for d in documents if d["kind"] == "Stream")
    assert stream["spec"] == {"name": "ORDERS", "subjects": ["ORDERS.*"], "max_age": "1y"}
    consumer = next(d for d in documents if d["kind"] == "Consumer")
    assert consumer["spec"] == {
        "stream_name": "ORDERS",
        "durable_name": "NEW",
        "max_deliver": 20,
        "filter_subject": "ORDERS.received",
    }
    path = tmp_path / "export.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    assert not plan_on(clean_server, load_documents([path])).has_changes


def test_templates(clean_server: ServerProcess) -> None:
    docs = resources(
        "apiVersion: headwater.io/v1\nkind: StreamTemplate\nmetadata: {name: clients}\n"
        "spec: {name: CLIENTS, maxStreams: 1024, config: {subjects: ['CLIENT.*'], maxAge: 1y,"
        " maxMsgSize: 2048}}\n"
    )
    plan = plan_on(clean_server, docs)
    (change,) = plan.changes
    if clean_server.kind == "nats":
        # nats-server 2.14+ has no templates: refused up front, nothing sent.
        assert change.refused.startswith("this server has no stream templates")
        return
    assert change.action is Action.CREATE and not change.refused
    assert apply_on(clean_server, docs).ok
    assert not plan_on(clean_server, docs).has_changes
    changed = resources(
        "apiVersion: headwater.io/v1\nkind: StreamTemplate\nmetadata: {name: clients}\n"
        "spec: {name: CLIENTS, maxStreams: 10, config: {subjects: ['CLIENT.*'], maxAge: 1y,"
        " maxMsgSize: 2048}}\n"
    )

    async def publish(nc: Client) -> None:
        await nc.request("CLIENT.acme", b"hello", timeout=5)

    run_on(clean_server, publish)
    # The template's streams are its own, not resources: the plan stays empty.
    assert not plan_on(clean_server, docs, prune=True).has_changes
    plan = plan_on(clean_server, changed)
    assert actions(plan) == {"StreamTemplate/CLIENTS": "replace", "Stream/CLIENT_acme": "delete"}
    change = next(c for c in plan.changes if c.key.kind == "StreamTemplate")
    assert change.refused
    assert [(f.path, f.before, f.after) for f in change.fields] == [("max_streams", 1024, 10)]
    assert next(c for c in plan.changes if c.key.kind == "Stream").implicit
    assert apply_on(clean_server, changed, allow_replace=True).ok
    assert not plan_on(clean_server, changed).has_changes
    assert raw(clean_server, "STREAM.NAMES", {})["streams"] in (None, [])
    run_on(clean_server, publish)
    plan = plan_on(clean_server, [], prune=True)
    assert actions(plan) == {"StreamTemplate/CLIENTS": "delete", "Stream/CLIENT_acme": "delete"}
    assert apply_on(clean_server, [], prune=True).ok
    assert raw(clean_server, "STREAM.NAMES", {})["streams"] in (None, [])


def test_live_configs_plan_offline(clean_server: ServerProcess) -> None:
    """make_plan needs only the live state, so other ways in can plan from a snapshot."""
    apply_on(clean_server, resources(ORDERS_DOCS))
    live = run_on(clean_server, read_live)
    assert not make_plan(resources(ORDERS_DOCS), live, owner="cli").has_changes


def test_pause_until_is_applied_through_the_pause_api(clean_server: ServerProcess) -> None:
    apply_on(clean_server, resources(ORDERS_DOCS))
    paused = ORDERS_DOCS.replace(
        "maxDeliver: 20", "maxDeliver: 20, pauseUntil: 2099-01-01T00:00:00Z"
    )
    plan = plan_on(clean_server, resources(paused))
    consumer = next(c for c in plan.changes if c.key.kind == "Consumer")
    assert consumer.action is Action.UPDATE
    assert [(f.path, f.before, f.after) for f in consumer.fields] == [
        ("pause_until", None, "2099-01-01T00:00:00Z")
    ]
    assert apply_on(clean_server, resources(paused)).ok
    info = raw(clean_server, "CONSUMER.INFO.ORDERS.NEW")
    assert info["paused"] is True
    assert not plan_on(clean_server, resources(paused)).has_changes
    assert apply_on(clean_server, resources(ORDERS_DOCS)).ok
    assert raw(clean_server, "CONSUMER.INFO.ORDERS.NEW").get("paused", False) is False
    assert not plan_on(clean_server, resources(ORDERS_DOCS)).has_changes


def test_rich_configs_plan_clean_after_apply(clean_server: ServerProcess) -> None:
    """Most fields of every kind (tests/control/data/rich.yaml): no false diffs from defaults
    the server fills or values it normalizes, on either server."""
    docs = load_documents([Path(__file__).parent / "data" / "rich.yaml"])
    report = apply_on(clean_server, docs)
    assert report.ok, [r.to_dict() for r in report.results if r.status is Status.FAILED]
    assert [r.status for r in report.results] == [Status.APPLIED] * len(docs)
    plan = plan_on(clean_server, docs)
    assert [(str(c.key), c.fields) for c in plan.changes if c.action is not Action.NOOP] == []


def test_rich_export_plans_clean(clean_server: ServerProcess, tmp_path: Path) -> None:
    """Exported documents describe the live state exactly: planning them finds nothing."""
    assert apply_on(clean_server, load_documents([Path(__file__).parent / "data" / "rich.yaml"])).ok
    path = tmp_path / "export.yaml"
    path.write_text(yaml.safe_dump_all(run_on(clean_server, export_documents)))
    plan = plan_on(clean_server, load_documents([path]), prune=True)
    assert [(str(c.key), c.fields) for c in plan.changes if c.action is not Action.NOOP] == []


PRIORITY_DOCS = """
apiVersion: headwater.io/v1
kind: Stream
metadata: {name: prio}
spec: {name: PRIO, subjects: ["prio.>"]}
---
apiVersion: headwater.io/v1
kind: Consumer
metadata: {name: prio-c}
spec:
  streamName: PRIO
  durableName: P
  priorityPolicy: overflow
  priorityGroups: [g1]
"""


def test_priority_groups_plan_clean_or_are_refused(clean_server: ServerProcess) -> None:
    """nats-server runs priority groups, so they plan clean after an apply; Headwater does not
    run them yet and refuses them (10052) instead of storing a setting it would ignore."""
    report = apply_on(clean_server, resources(PRIORITY_DOCS))
    if clean_server.kind == "nats":
        assert report.ok
        assert not plan_on(clean_server, resources(PRIORITY_DOCS)).has_changes
        return
    failed = [r for r in report.results if r.status is Status.FAILED]
    assert [str(r.change.key) for r in failed] == ["Consumer/PRIO/P"]
    assert "priority groups are not supported" in failed[0].message


def test_prune_leaves_what_other_owners_manage(clean_server: ServerProcess) -> None:
    """Terraform, the operator and every repository wrote one marker, so a CLI prune deleted
    their streams. Now each writes its own name, and a prune deletes only its own."""
    assert apply_on(clean_server, resources(ORDERS_DOCS), owner="terraform:prod").ok
    assert apply_on(clean_server, resources(BUCKETS), owner="github:acme/infra").ok
    plan = plan_on(clean_server, [], prune=True)
    assert actions(plan) == {}
    assert apply_on(clean_server, [], prune=True).ok
    info = raw(clean_server, "STREAM.INFO.ORDERS")
    assert info["config"]["metadata"][MANAGED_BY_KEY] == "terraform:prod"
    # Their own prune is theirs to run.
    plan = plan_on(clean_server, [], prune=True, owner="github:acme/infra")
    assert set(actions(plan).values()) == {"delete"} and "Stream/ORDERS" not in actions(plan)


def test_apply_refuses_what_another_owner_manages_until_adopted(
    clean_server: ServerProcess,
) -> None:
    assert apply_on(clean_server, resources(ORDERS_DOCS), owner="terraform:prod").ok
    changed = resources(ORDERS_DOCS.replace("maxAge: 1y", "maxAge: 30d"))
    plan = plan_on(clean_server, changed)
    assert [str(c.key) for c in plan.refusals] == ["Stream/ORDERS", "Consumer/ORDERS/NEW"]
    assert all(c.conflict == "terraform:prod" for c in plan.refusals)
    adopted = plan_on(clean_server, changed, adopt=True)
    assert not adopted.refusals
    assert apply_on(clean_server, changed, adopt=True).ok
    info = raw(clean_server, "STREAM.INFO.ORDERS")
    assert info["config"]["metadata"][MANAGED_BY_KEY] == "cli"
    assert info["config"]["max_age"] == 30 * 24 * 3600 * 10**9
    assert not plan_on(clean_server, changed).has_changes
