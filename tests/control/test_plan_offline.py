"""Plan rules on a live state built by hand (no server): order, cascades, prune, rendering."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from headwater.control import render
from headwater.control.documents import Resource, parse_documents
from headwater.control.live import LiveState
from headwater.control.models import MANAGED_BY_KEY, Consumer, Stream
from headwater.control.plan import Action, PlanError, diff, make_plan

OWNED = {MANAGED_BY_KEY: "headwater"}


def docs(text: str) -> list[Resource]:
    loaded, errors = parse_documents(text, "docs.yaml")
    assert errors == []
    return loaded


def stream_doc(name: str, extra: str = "") -> str:
    return (
        f"apiVersion: headwater.io/v1\nkind: Stream\nmetadata: {{name: {name.lower()}}}\n"
        f"spec: {{name: {name}{extra}}}\n---\n"
    )


def consumer_doc(stream: str, name: str, extra: str = "") -> str:
    return (
        f"apiVersion: headwater.io/v1\nkind: Consumer\nmetadata: {{name: {name.lower()}}}\n"
        f"spec: {{streamName: {stream}, durableName: {name}{extra}}}\n---\n"
    )


def live_with(*specs: Stream | Consumer, owned: bool = True) -> LiveState:
    state = LiveState()
    for spec in specs:
        config = spec.to_server_config(control=owned)
        if isinstance(spec, Consumer):
            state.consumers[(spec.stream_name, spec.server_name)] = config
        else:
            state.streams[spec.name] = config
    return state


def test_order_streams_before_consumers_deletes_first() -> None:
    live = live_with(
        Stream(name="OLD"), Consumer(stream_name="OLD", durable_name="GONE"), Stream(name="KEEP")
    )
    live.consumers[("KEEP", "X")] = Consumer(
        stream_name="KEEP", durable_name="X"
    ).to_server_config()
    plan = make_plan(
        docs(stream_doc("KEEP") + consumer_doc("NEW", "C") + stream_doc("NEW")), live, prune=True
    )
    assert [(c.action.value, str(c.key)) for c in plan.ordered()] == [
        ("delete", "Consumer/KEEP/X"),
        ("delete", "Consumer/OLD/GONE"),
        ("delete", "Stream/OLD"),
        ("noop", "Stream/KEEP"),
        ("create", "Stream/NEW"),
        ("create", "Consumer/NEW/C"),
    ]
    gone = next(c for c in plan.changes if c.key.name == "GONE")
    assert gone.implicit and not gone.actionable


def test_unowned_resources_are_never_pruned() -> None:
    live = live_with(Stream(name="MANUAL"), owned=False)
    plan = make_plan([], live, prune=True)
    assert plan.changes == [] and not plan.has_changes


def test_stream_needed_by_a_desired_consumer_is_not_pruned() -> None:
    live = live_with(Stream(name="S"), Consumer(stream_name="S", durable_name="C"))
    plan = make_plan(docs(consumer_doc("S", "C")), live, prune=True)
    assert [(c.action.value, str(c.key)) for c in plan.changes] == [("noop", "Consumer/S/C")]


def test_missing_stream_is_a_plan_error() -> None:
    with pytest.raises(PlanError, match="stream 'NOPE' is neither in the documents"):
        make_plan(docs(consumer_doc("NOPE", "C")), LiveState())


def test_consumer_on_a_desired_bucket() -> None:
    text = (
        "apiVersion: headwater.io/v1\nkind: KeyValue\nmetadata: {name: cfg}\nspec: {}\n---\n"
        + consumer_doc("KV_cfg", "W")
    )
    plan = make_plan(docs(text), LiveState())
    assert sorted(c.action.value for c in plan.changes) == ["create", "create"]


def test_drift_policy_report_skips_but_shows() -> None:
    live = live_with(Stream(name="S", max_msgs=5))
    plan = make_plan(docs(stream_doc("S", ", driftPolicy: report")), live)
    (change,) = plan.changes
    assert change.action is Action.UPDATE and change.drift
    assert change.skipped.startswith("driftPolicy report")
    assert not plan.has_changes


def test_allow_replace_for_the_run() -> None:
    live = live_with(Stream(name="S"))
    refused = make_plan(docs(stream_doc("S", ", storage: memory")), live)
    assert refused.refusals
    allowed = make_plan(docs(stream_doc("S", ", storage: memory")), live, allow_replace=True)
    assert not allowed.refusals and allowed.has_changes


def test_diff_recurses_into_mappings() -> None:
    changes = diff(
        {"a": 1, "metadata": {"x": "1", "y": "2"}, "gone": True},
        {"a": 2, "metadata": {"x": "1", "z": "3"}},
    )
    assert [(c.path, c.before, c.after) for c in changes] == [
        ("a", 1, 2),
        ("metadata.z", None, "3"),
        ("metadata.y", "2", None),
        ("gone", True, None),
    ]


def test_renderings() -> None:
    live = live_with(Stream(name="S", max_age="1y"))
    plan = make_plan(docs(stream_doc("S", ", maxAge: 90d, storage: memory")), live)
    markdown = render.plan_markdown(plan)
    assert "| `-/+` | **replace** | `Stream/S` |" in markdown
    assert "max_age: 1y -> 90d" in markdown and "REFUSED" in markdown
    data = json.loads(render.plan_json(plan))
    (change,) = data["changes"]
    assert change["action"] == "replace" and change["destructive"]
    assert {"field": "storage", "before": "file", "after": "memory"} in change["fields"]
    assert data["refused"] == ["Stream/S"]
    console = Console(record=True, width=200)
    render.print_plan(plan, console)
    text = console.export_text()
    assert "storage: file -> memory" in text and "Plan: 0 to create" in text
    empty = make_plan(docs(stream_doc("S", ", maxAge: 1y")), live)
    assert "No changes" in render.plan_markdown(empty)
