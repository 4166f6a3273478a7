"""The example GitOps repository's workflows, run job by job against a real server: plan on a
pull request (with the comment step's input checked), apply on merge to main, the hourly
drift check before and after a stream is deleted by hand."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import nats
import yaml
from gh_actions.locations import ACTIONS, EXAMPLES

from headwater.testing import ServerProcess
from support.actions_workflow import JobRun, run_job

GITOPS = EXAMPLES / "gitops"
WORKFLOWS = GITOPS / ".github" / "workflows"
LOCAL_ACTION = re.compile(r"^[\w.-]+/headwater/gh-actions/([\w-]+)@[\w./-]+$")


def resolve(uses: str) -> Path | None:
    """`ORG/headwater/gh-actions/plan@v1` -> this checkout's gh-actions/plan.

    The setup action is not run: headwater is already installed in the test environment, and
    every other action gets install 'false' (see ``job``)."""
    match = LOCAL_ACTION.match(uses)
    if match is None or match.group(1) == "setup":
        return None
    return ACTIONS / match.group(1)


def job(workflow: str, job_id: str, workspace: Path, server: ServerProcess, event: str) -> JobRun:
    return run_job(
        WORKFLOWS / workflow,
        job_id,
        workspace=workspace,
        resolve=resolve,
        context={
            "vars": {"NATS_URL": server.url},
            "github": {
                "event_name": event,
                "repository": "example/jetstream-config",
                "sha": "0123456789abcdef",
                "run_id": "42",
                "event": {"pull_request": {"number": 7}},
            },
        },
        action_inputs={"install": "false", "python": sys.executable},
    )


def checkout(workspace: Path) -> None:
    """What actions/checkout would leave: the example repository."""
    shutil.copytree(GITOPS, workspace, dirs_exist_ok=True)


async def test_pull_request_apply_and_drift(headwater_js: ServerProcess, workspace: Path) -> None:
    checkout(workspace)

    pr = job("jetstream-plan.yml", "plan", workspace, headwater_js, "pull_request")
    assert pr.ok, pr.log
    assert pr.step("plan").outputs["changes"] == "true"
    assert pr.actions["plan"].outputs["exit-code"] == "2"
    comment = pr.external["comment"]
    assert comment.uses == "actions/github-script@v7"
    assert comment.env["PLAN"] == pr.step("plan").outputs["markdown"]
    assert comment.env["PLAN"].startswith("<!-- headwater-plan -->")
    assert "marker" in comment.with_["script"]
    assert "## Headwater validate" in pr.summary and "## Headwater plan" in pr.summary
    assert {s.uses for s in pr.external.values()} == {
        "actions/checkout@v4",
        "actions/setup-python@v5",
        "actions/cache@v4",
        "YOUR-ORG/headwater/gh-actions/setup@v1",
        "actions/github-script@v7",
    }

    nc = await nats.connect(headwater_js.url)
    try:
        deploys = await nc.subscribe("deploys.jetstream")
        await nc.flush()
        merged = job("jetstream-apply.yml", "apply", workspace, headwater_js, "push")
        assert merged.ok, merged.log
        assert merged.step("apply").outputs["changed"] == "true"
        assert all(merged.actions[s].ok for s in merged.actions)
        assert len(merged.actions) == 4  # apply, two evals, publish
        announcement = await deploys.next_msg(timeout=5)
        assert announcement.data == b"0123456789abcdef"
        assert announcement.headers is not None
        assert announcement.headers["Repository"] == "example/jetstream-config"

        clean = job("jetstream-drift.yml", "drift", workspace, headwater_js, "schedule")
        assert clean.ok, clean.log
        assert clean.steps[-1].outcome == "skipped"

        await nc.jetstream().delete_stream("ORDERS")
        drift = job("jetstream-drift.yml", "drift", workspace, headwater_js, "schedule")
        assert not drift.ok
        assert drift.step("plan").outputs["changes"] == "true"
        assert drift.steps[-1].outcome == "failure"
        assert "Stream/ORDERS" in drift.summary
    finally:
        await nc.close()


def test_the_gitops_documents_are_the_orders_example() -> None:
    ours = sorted(p.name for p in (GITOPS / "jetstream" / "orders").iterdir())
    assert ours == sorted(p.name for p in (EXAMPLES / "orders").iterdir())
    for name in ours:
        gitops_text = (GITOPS / "jetstream" / "orders" / name).read_text()
        assert gitops_text == (EXAMPLES / "orders" / name).read_text(), name


def test_every_job_reading_a_secret_runs_in_an_environment_the_docs_name() -> None:
    """Secrets scoped to an environment reach only jobs that name it: the plan job read
    secrets.NATS_CREDS without one, so on a repository set up as docs/ACTIONS.md says its
    credentials were empty."""
    docs = (ACTIONS.parent / "docs" / "ACTIONS.md").read_text(encoding="utf-8")
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for job_id, body in yaml.safe_load(path.read_text(encoding="utf-8"))["jobs"].items():
            if "secrets." not in yaml.safe_dump(body):
                continue
            environment = body.get("environment")
            assert environment, f"{path.name}: job {job_id} reads secrets outside an environment"
            name = environment if isinstance(environment, str) else environment["name"]
            assert f"`{name}`" in docs, f"{path.name}: environment {name} is not in the docs"


def test_a_job_that_verifies_installs_the_verify_extra() -> None:
    """The actions install headwater[cli]; PySpark comes only with the verify extra, so a job
    whose verify step skips its own install must have set up cli,verify."""
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for job_id, body in yaml.safe_load(path.read_text(encoding="utf-8"))["jobs"].items():
            steps = body.get("steps", [])
            uses = [(str(step.get("uses", "")), step.get("with") or {}) for step in steps]
            verifying = [w for u, w in uses if "/gh-actions/verify@" in u]
            if not verifying or all(str(w.get("install", "true")) != "false" for w in verifying):
                continue
            extras = [str(w.get("extras", "cli")) for u, w in uses if "/gh-actions/setup@" in u]
            assert any("verify" in e.split(",") for e in extras), f"{path.name}: job {job_id}"


def test_every_job_that_installs_headwater_caches_pip() -> None:
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for job_id, body in yaml.safe_load(path.read_text(encoding="utf-8"))["jobs"].items():
            uses = [str(step.get("uses", "")) for step in body.get("steps", [])]
            if not any("/headwater/gh-actions/" in u for u in uses):
                continue
            caches = [
                step["with"]
                for step in body["steps"]
                if str(step.get("uses", "")).startswith("actions/cache@")
            ]
            assert any(c.get("path") == "~/.cache/pip" for c in caches), f"{path.name}: {job_id}"
