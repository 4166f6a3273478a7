"""The issue's done-when scenario through the actions, against headwater-server and
nats-server: the ORDERS YAML -> plan shows exactly the changes -> apply makes them -> plan
shows none -> a stream deleted by hand shows as drift (and apply heals it)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nats
from gh_actions.locations import EXAMPLES, RunAction

from headwater.testing import ServerProcess

ORDERS_KEYS = {
    ("Stream", "ORDERS"),
    ("Consumer", "NEW"),
    ("Consumer", "DISPATCH"),
    ("Consumer", "MONITOR"),
}


def changes_of(run_json: str) -> dict[tuple[str, str], dict[str, object]]:
    plan = json.loads(run_json)
    return {(c["kind"], c["name"]): c for c in plan["changes"] if c["action"] != "noop"}


async def live_stream(url: str, name: str) -> tuple[dict[str, object], list[str]]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        info = await js.stream_info(name)
        consumers = sorted(c.name for c in await js.consumers_info(name))
        return info.config.as_dict(), consumers
    finally:
        await nc.close()


async def delete_by_hand(url: str, name: str) -> None:
    nc = await nats.connect(url)
    try:
        assert await nc.jetstream().delete_stream(name)
    finally:
        await nc.close()


async def test_orders_plan_apply_plan_drift(
    js_any: ServerProcess, act: RunAction, workspace: Path
) -> None:
    shutil.copytree(EXAMPLES / "orders", workspace / "jetstream")
    conn = {"server": js_any.url, "files": "jetstream"}

    first = act("plan", **conn)
    assert first.ok, first.log
    assert first.outputs["changes"] == "true"
    assert first.outputs["exit-code"] == "2"
    planned = changes_of(first.outputs["json"])
    assert set(planned) == ORDERS_KEYS
    assert {c["action"] for c in planned.values()} == {"create"}
    markdown = first.outputs["markdown"]
    assert markdown.startswith("<!-- headwater-plan -->\n## Headwater plan")
    for name in ("ORDERS", "NEW", "DISPATCH", "MONITOR"):
        assert name in markdown
    assert "## Headwater plan" in first.summary

    applied = act("apply", **conn)
    assert applied.ok, applied.log
    assert applied.outputs["changed"] == "true"
    report = json.loads(applied.outputs["json"])["apply"]
    assert report["summary"]["applied"] == 4 and report["ok"]
    assert "## Headwater apply" in applied.summary
    config, consumers = await live_stream(js_any.url, "ORDERS")
    assert config["subjects"] == ["ORDERS.*"]
    assert config["max_age"] == 365 * 24 * 3600 * 10**9
    assert consumers == ["DISPATCH", "MONITOR", "NEW"]

    second = act("plan", **conn)
    assert second.ok, second.log
    assert second.outputs["changes"] == "false"
    assert second.outputs["exit-code"] == "0"
    assert changes_of(second.outputs["json"]) == {}
    assert "No changes" in second.outputs["markdown"]

    again = act("apply", **conn)
    assert again.ok, again.log
    assert again.outputs["changed"] == "false"

    await delete_by_hand(js_any.url, "ORDERS")
    drift = act("plan", **conn)
    assert drift.ok, drift.log
    assert drift.outputs["changes"] == "true"
    drifted = changes_of(drift.outputs["json"])
    assert set(drifted) == ORDERS_KEYS
    assert all(c["action"] == "create" for c in drifted.values())

    healed = act("apply", **conn)
    assert healed.ok, healed.log
    assert act("plan", **conn).outputs["changes"] == "false"


async def test_field_change_plans_as_update_with_before_and_after(
    headwater_js: ServerProcess, act: RunAction, workspace: Path
) -> None:
    shutil.copytree(EXAMPLES / "orders", workspace / "jetstream")
    conn = {"server": headwater_js.url, "files": "jetstream"}
    assert act("apply", **conn).ok

    stream_doc = workspace / "jetstream" / "orders-stream.yaml"
    stream_doc.write_text(stream_doc.read_text().replace("maxAge: 1y", "maxAge: 90d"))
    plan = act("plan", **conn)
    assert plan.outputs["changes"] == "true", plan.log
    changes = changes_of(plan.outputs["json"])
    assert set(changes) == {("Stream", "ORDERS")}
    update = changes["Stream", "ORDERS"]
    assert update["action"] == "update"
    assert [f["field"] for f in update["fields"]] == ["max_age"]  # type: ignore[union-attr]
    assert "max_age" in plan.outputs["markdown"]

    assert act("apply", **conn).outputs["changed"] == "true"
    config, _ = await live_stream(headwater_js.url, "ORDERS")
    assert config["max_age"] == 90 * 24 * 3600 * 10**9
    assert act("plan", **conn).outputs["changes"] == "false"
