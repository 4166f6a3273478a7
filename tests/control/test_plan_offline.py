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

OWNER = "cli"


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


def live_with(*specs: Stream | Consumer, owner: str | None = OWNER) -> LiveState:
    """A live state holding ``specs`` as ``owner`` created them (None: by hand, no marker)."""
    state = LiveState()
    for spec in specs:
        config = spec.owned_by(owner).to_server_config(control=owner is not None)
        if isinstance(spec, Consumer):
            state.consumers[(spec.stream_name, spec.server_name)] = config
        else:
            state.streams[spec.name] = config
    return state


def test_order_streams_before_consumers_deletes_first() -> None:
    live = live_with(
        Stream(name="OLD"), Consumer(stream_name="OLD", durable_name="GONE"), Stream(name="KEEP")
    )
    live.consumers[("KEEP", "X")] = (
        Consumer(stream_name="KEEP", durable_name="X").owned_by(OWNER).to_server_config()
    )
    plan = make_plan(
        docs(stream_doc("KEEP") + consumer_doc("NEW", "C") + stream_doc("NEW")),
        live,
        prune=True,
        owner=OWNER,
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
    live = live_with(Stream(name="MANUAL"), owner=None)
    plan = make_plan([], live, prune=True, owner=OWNER)
    assert plan.changes == [] and not plan.has_changes


def test_stream_needed_by_a_desired_consumer_is_not_pruned() -> None:
    live = live_with(Stream(name="S"), Consumer(stream_name="S", durable_name="C"))
    plan = make_plan(docs(consumer_doc("S", "C")), live, prune=True, owner=OWNER)
    assert [(c.action.value, str(c.key)) for c in plan.changes] == [("noop", "Consumer/S/C")]


def test_missing_stream_is_a_plan_error() -> None:
    with pytest.raises(PlanError, match="stream 'NOPE' is neither in the documents"):
        make_plan(docs(consumer_doc("NOPE", "C")), LiveState(), owner=OWNER)


def test_consumer_on_a_desired_bucket() -> None:
    text = (
        "apiVersion: headwater.io/v1\nkind: KeyValue\nmetadata: {name: cfg}\nspec: {}\n---\n"
        + consumer_doc("KV_cfg", "W")
    )
    plan = make_plan(docs(text), LiveState(), owner=OWNER)
    assert sorted(c.action.value for c in plan.changes) == ["create", "create"]


def test_drift_policy_report_skips_but_shows() -> None:
    live = live_with(Stream(name="S", max_msgs=5))
    plan = make_plan(docs(stream_doc("S", ", driftPolicy: report")), live, owner=OWNER)
    (change,) = plan.changes
    assert change.action is Action.UPDATE and change.drift
    assert change.skipped.startswith("driftPolicy report")
    assert not plan.has_changes


def test_allow_replace_for_the_run() -> None:
    live = live_with(Stream(name="S"))
    refused = make_plan(docs(stream_doc("S", ", storage: memory")), live, owner=OWNER)
    assert refused.refusals
    allowed = make_plan(
        docs(stream_doc("S", ", storage: memory")), live, allow_replace=True, owner=OWNER
    )
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
    plan = make_plan(docs(stream_doc("S", ", maxAge: 90d, storage: memory")), live, owner=OWNER)
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
    empty = make_plan(docs(stream_doc("S", ", maxAge: 1y")), live, owner=OWNER)
    assert "No changes" in render.plan_markdown(empty)


# --- owners (issue 16 items 1 and 2) ----------------------------------------------------------

OTHERS = ("terraform", "kubernetes:prod/stream/orders", "github:acme/infra", "headwater")


def _live_by_owner() -> LiveState:
    live = live_with(Stream(name="MINE"), Consumer(stream_name="MINE", durable_name="C"))
    for index, owner in enumerate(OTHERS):
        other = live_with(
            Stream(name=f"S{index}"),
            Consumer(stream_name=f"S{index}", durable_name=f"C{index}"),
            owner=owner,
        )
        live.streams.update(other.streams)
        live.consumers.update(other.consumers)
    hand = live_with(Stream(name="HAND"), owner=None)
    live.streams.update(hand.streams)
    return live


def test_prune_deletes_only_what_its_own_owner_manages() -> None:
    """Everyone used to write managed-by: headwater, so a CLI prune deleted what Terraform,
    the operator or another repository managed on the same server."""
    live = _live_by_owner()
    plan = make_plan([], live, prune=True, owner=OWNER)
    assert sorted(str(c.key) for c in plan.changes) == ["Consumer/MINE/C", "Stream/MINE"]
    for index, owner in enumerate(OTHERS[:3]):
        theirs = make_plan([], live, prune=True, owner=owner)
        assert sorted(str(c.key) for c in theirs.changes) == [
            f"Consumer/S{index}/C{index}",
            f"Stream/S{index}",
        ]


def test_prune_keeps_a_stream_other_owners_read_from() -> None:
    """Deleting a stream deletes every consumer on it: a prune never takes another owner's
    consumers with it."""
    live = live_with(Stream(name="MINE"))
    live.consumers.update(
        live_with(Consumer(stream_name="MINE", durable_name="TF"), owner="terraform").consumers
    )
    (change,) = make_plan([], live, prune=True, owner=OWNER).changes
    assert change.action is Action.DELETE and not change.actionable
    assert change.skipped == "kept: other owners manage consumers on it (TF by 'terraform')"


@pytest.mark.parametrize("other", OTHERS)
def test_a_resource_another_owner_manages_is_refused_naming_it(other: str) -> None:
    live = live_with(Stream(name="S", max_age="1d"), owner=other)
    plan = make_plan(docs(stream_doc("S", ", maxAge: 2d")), live, owner=OWNER)
    (change,) = plan.changes
    assert change.conflict == other and plan.refusals == [change]
    assert f"managed by owner {other!r}" in change.refused and "not by 'cli'" in change.refused
    assert json.loads(render.plan_json(plan))["changes"][0]["owner"] == other
    if other == "headwater":
        assert "before owners had names" in change.refused
    # Even with nothing else to change, the marker differs: never a silent no-op.
    same = make_plan(docs(stream_doc("S", ", maxAge: 1d")), live, owner=OWNER)
    assert same.changes[0].conflict == other


def test_adoption_is_explicit_and_shown() -> None:
    live = live_with(Stream(name="S"), owner="terraform")
    for plan in (
        make_plan(docs(stream_doc("S")), live, owner=OWNER, adopt=True),
        make_plan(
            docs(
                stream_doc("S").replace(
                    "{name: s}", '{name: s, annotations: {headwater.io/adopt: "true"}}'
                )
            ),
            live,
            owner=OWNER,
        ),
    ):
        (change,) = plan.changes
        assert not change.refused and change.action is Action.UPDATE
        assert change.reasons == ["adopted from owner 'terraform'"]
        assert [(f.path, f.before, f.after) for f in change.fields] == [
            (f"metadata.{MANAGED_BY_KEY}", "terraform", OWNER)
        ]
        assert change.spec is not None
        assert change.spec.request_config()["metadata"][MANAGED_BY_KEY] == OWNER


def test_an_unmanaged_resource_is_taken_over_and_the_plan_says_so() -> None:
    live = live_with(Stream(name="S"), owner=None)
    (change,) = make_plan(docs(stream_doc("S")), live, owner=OWNER).changes
    assert not change.refused and change.action is Action.UPDATE
    assert "nobody manages" in change.reasons[0]


@pytest.mark.parametrize("owner", ["", "headwater"])
def test_a_plan_needs_a_real_owner(owner: str) -> None:
    with pytest.raises(ValueError, match="needs an owner"):
        make_plan([], LiveState(), owner=owner)


def test_every_written_config_carries_the_owner() -> None:
    (change,) = make_plan(docs(stream_doc("S")), LiveState(), owner="github:acme/infra").changes
    assert change.spec is not None
    assert change.spec.request_config()["metadata"] == {MANAGED_BY_KEY: "github:acme/infra"}
    assert "Owner: github:acme/infra" in render.plan_markdown(
        make_plan(docs(stream_doc("S")), LiveState(), owner="github:acme/infra")
    )
