"""The plan and apply actions' prune and allow-replace inputs, a refused replace, and errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nats
from gh_actions.locations import EXAMPLES, RunAction

from headwater.testing import ServerProcess


def actions_of(plan_json: str) -> dict[str, str]:
    plan = json.loads(plan_json)
    return {f"{c['kind']}/{c['name']}": c["action"] for c in plan["changes"]}


async def consumer_names(url: str) -> list[str]:
    nc = await nats.connect(url)
    try:
        return sorted(c.name for c in await nc.jetstream().consumers_info("ORDERS"))
    finally:
        await nc.close()


async def live_storage(url: str) -> str:
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().stream_info("ORDERS")
        return str(info.config.as_dict()["storage"])
    finally:
        await nc.close()


async def test_prune_deletes_only_with_the_input(
    headwater_js: ServerProcess, act: RunAction, workspace: Path
) -> None:
    shutil.copytree(EXAMPLES / "orders", workspace / "jetstream")
    conn = {"server": headwater_js.url, "files": "jetstream"}
    assert act("apply", **conn).ok
    (workspace / "jetstream" / "orders-monitor.yaml").unlink()

    kept = act("plan", **conn)
    assert kept.outputs["changes"] == "false", kept.log
    pruned = act("plan", prune="true", **conn)
    assert pruned.outputs["changes"] == "true", pruned.log
    assert actions_of(pruned.outputs["json"])["Consumer/MONITOR"] == "delete"

    assert act("apply", **conn).outputs["changed"] == "false"
    assert await consumer_names(headwater_js.url) == ["DISPATCH", "MONITOR", "NEW"]
    applied = act("apply", prune="true", **conn)
    assert applied.ok and applied.outputs["changed"] == "true", applied.log
    assert await consumer_names(headwater_js.url) == ["DISPATCH", "NEW"]


async def test_replace_is_refused_unless_allowed(
    headwater_js: ServerProcess, act: RunAction, workspace: Path
) -> None:
    shutil.copytree(EXAMPLES / "orders", workspace / "jetstream")
    conn = {"server": headwater_js.url, "files": "jetstream"}
    assert act("apply", **conn).ok
    stream_doc = workspace / "jetstream" / "orders-stream.yaml"
    stream_doc.write_text(stream_doc.read_text().replace("storage: file", "storage: memory"))

    refused = act("plan", **conn)
    assert not refused.ok
    assert refused.outputs["exit-code"] == "1"
    assert refused.outputs["changes"] == ""
    # The refused plan is still shown, with its warning, before the step fails.
    assert "Refused changes" in refused.outputs["markdown"]
    assert "Refused changes" in refused.summary
    assert any(a.level == "error" for a in refused.annotations)

    refused_apply = act("apply", **conn)
    assert not refused_apply.ok
    assert await live_storage(headwater_js.url) == "file"
    # A refused apply says why in the job summary and the json output, as the plan does.
    assert "Refused changes" in refused_apply.summary, refused_apply.log
    assert "replace is destructive" in refused_apply.summary
    refused_json = json.loads(refused_apply.outputs["json"])
    assert refused_json["apply"] is None
    assert refused_json["plan"]["refused"] == ["Stream/ORDERS"]
    assert refused_apply.outputs["changed"] == "false"

    allowed = act("plan", allow_replace="true", **conn)
    assert allowed.ok, allowed.log
    assert actions_of(allowed.outputs["json"])["Stream/ORDERS"] == "replace"
    replaced = act("apply", allow_replace="true", **conn)
    assert replaced.ok and replaced.outputs["changed"] == "true", replaced.log
    assert await live_storage(headwater_js.url) == "memory"
    assert act("plan", **conn).outputs["changes"] == "false"


def test_plan_fails_on_an_unreachable_server(act: RunAction, workspace: Path) -> None:
    shutil.copytree(EXAMPLES / "orders", workspace / "jetstream")
    run = act("plan", server="nats://127.0.0.1:1", files="jetstream", timeout="1s")
    assert not run.ok
    assert run.outputs["exit-code"] == "1"
    assert run.outputs["changes"] == "" and run.outputs["markdown"] == ""
    assert "no server reachable at nats://127.0.0.1:1" in run.log


def test_plan_needs_files(act: RunAction, headwater_js: ServerProcess) -> None:
    run = act("plan", server=headwater_js.url, files="  ")
    assert not run.ok
    assert [a.message for a in run.annotations] == ["the files input names no file or directory"]


def test_plan_without_summary_leaves_the_job_summary_alone(
    headwater_js: ServerProcess, act: RunAction, workspace: Path
) -> None:
    shutil.copytree(EXAMPLES / "orders", workspace / "jetstream")
    run = act("plan", server=headwater_js.url, files="jetstream", summary="false")
    assert run.ok and run.outputs["changes"] == "true", run.log
    assert run.summary == ""
    assert "## Headwater plan" in run.outputs["markdown"]


def test_files_may_name_several_paths(
    headwater_js: ServerProcess, act: RunAction, workspace: Path
) -> None:
    shutil.copytree(EXAMPLES / "orders", workspace / "jetstream")
    files = "jetstream/orders-stream.yaml\n  jetstream/orders-new.yaml"
    files += " jetstream/orders-dispatch.yaml\n"
    run = act("plan", server=headwater_js.url, files=files)
    assert run.ok, run.log
    assert set(actions_of(run.outputs["json"])) == {
        "Stream/ORDERS",
        "Consumer/NEW",
        "Consumer/DISPATCH",
    }


AUDIT = """apiVersion: headwater.io/v1
kind: Stream
metadata: {name: audit}
spec: {name: AUDIT, subjects: ["audit.>"]}
"""


async def managed_by(url: str, stream: str) -> str | None:
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().stream_info(stream)
        return (info.config.metadata or {}).get("headwater.io/managed-by")
    finally:
        await nc.close()


async def test_owner_is_the_repository_and_prune_spares_other_owners(
    headwater_js: ServerProcess, act: RunAction, workspace: Path
) -> None:
    """Every way in wrote one marker, so the apply workflow's prune deleted what Terraform,
    the operator or another directory managed. Now the owner defaults to the repository."""
    shutil.copytree(EXAMPLES / "orders", workspace / "jetstream")
    (workspace / "audit").mkdir()
    (workspace / "audit" / "audit.yaml").write_text(AUDIT)
    server = headwater_js.url
    audit = act("apply", server=server, files="audit", owner="github:acme/infra/audit")
    assert audit.ok, audit.log
    assert act("apply", server=server, files="jetstream").ok
    assert await managed_by(server, "ORDERS") == "github:acme/infra"
    assert await managed_by(server, "AUDIT") == "github:acme/infra/audit"

    pruned = act("apply", server=server, files="jetstream", prune="true")
    assert pruned.ok and pruned.outputs["changed"] == "false", pruned.log
    assert await managed_by(server, "AUDIT") == "github:acme/infra/audit"

    # The audit directory naming ORDERS is refused, naming the owner, until it adopts.
    shutil.copy(workspace / "jetstream" / "orders-stream.yaml", workspace / "audit")
    refused = act("plan", server=server, files="audit", owner="github:acme/infra/audit")
    assert not refused.ok and refused.outputs["exit-code"] == "1"
    assert "managed by owner 'github:acme/infra'" in refused.outputs["markdown"]
    adopted = act(
        "apply", server=server, files="audit", owner="github:acme/infra/audit", adopt="yes"
    )
    assert adopted.ok, adopted.log
    assert await managed_by(server, "ORDERS") == "github:acme/infra/audit"
