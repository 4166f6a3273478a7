"""Run one job of a workflow file locally, with the composite-action runner.

``run:`` steps run as GitHub runs them (bash -e by default). ``uses:`` steps that name a
local action (``resolve`` maps the reference to its directory) run through
:class:`~support.actions_runner.CompositeRunner`, their ``with:`` evaluated. Other
``uses:`` steps (actions/checkout, actions/github-script, ...) are not run: their ``if``,
``with`` and ``env`` are evaluated and kept on the result, so a test can check what they
would have received. $RUNNER_TEMP is shared by the whole job, as on a runner.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from support.actions_expressions import condition, interpolate
from support.actions_runner import (
    ActionRun,
    CompositeRunner,
    StepResult,
    StepScope,
    record,
    run_script_step,
    runner_env,
)


@dataclass
class ExternalStep:
    """A ``uses:`` step of another repository: not run, its evaluated inputs kept."""

    uses: str
    with_: dict[str, str]
    env: dict[str, str]


@dataclass
class JobRun:
    steps: list[StepResult]
    actions: dict[str, ActionRun] = field(default_factory=dict)
    """Local action runs by step id."""
    external: dict[str, ExternalStep] = field(default_factory=dict)
    """Steps not run (other repositories' actions) by step id, when they were reached."""
    summary: str = ""

    @property
    def ok(self) -> bool:
        return all(step.conclusion != "failure" for step in self.steps)

    def step(self, step_id: str) -> StepResult:
        return next(step for step in self.steps if step.id == step_id)

    @property
    def log(self) -> str:
        parts = []
        for step in self.steps:
            parts += [f"--- {step.name} ({step.outcome})", step.stdout, step.stderr]
        for action in self.actions.values():
            parts.append(action.log)
        return "\n".join(parts)


def load_workflow(path: Path) -> dict[str, Any]:
    workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
    # YAML 1.1 reads the key `on` as the boolean True.
    if True in workflow:
        workflow["on"] = workflow.pop(True)
    return workflow


def run_job(
    workflow_path: Path,
    job_id: str,
    *,
    workspace: Path,
    resolve: Callable[[str], Path | None],
    context: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    action_inputs: dict[str, str] | None = None,
) -> JobRun:
    """Run ``jobs.<job_id>``. ``context`` adds contexts (``secrets``, ``vars``, ``github``);
    ``action_inputs`` are given to every local action that declares them (e.g. install)."""
    job = load_workflow(workflow_path)["jobs"][job_id]
    with tempfile.TemporaryDirectory(prefix="runner-temp-") as temp_name:
        temp = Path(temp_name)
        job_env = runner_env(workspace, temp, env)
        ctx: dict[str, Any] = {
            "github": {"workspace": str(workspace), "token": ""},
            "runner": {"temp": str(temp), "os": "Linux"},
            "secrets": {},
            "vars": {},
            "steps": {},
        }
        for name, value in (context or {}).items():
            ctx[name] = ctx.get(name, {}) | value if isinstance(value, dict) else value
        ctx["env"] = job_env
        for key, value in (job.get("env") or {}).items():
            job_env[key] = interpolate(str(value), ctx)
        scope = StepScope(ctx, job_env, workspace, temp)
        run = JobRun(steps=[])
        for index, step in enumerate(job["steps"]):
            step_id = str(step.get("id") or f"__step{index}")
            name = str(step.get("name") or step.get("uses") or step_id)
            if not condition(step.get("if"), ctx, scope.status):
                result = StepResult(step_id, name, "skipped", "skipped")
            elif "run" in step:
                result = run_script_step(step, step_id, name, scope, default_shell="bash")
            else:
                result = _uses_step(step, step_id, name, scope, resolve, action_inputs, run)
            record(scope, result)
            run.steps.append(result)
            run.summary += result.summary
        return run


def _uses_step(
    step: dict[str, Any],
    step_id: str,
    name: str,
    scope: StepScope,
    resolve: Callable[[str], Path | None],
    action_inputs: dict[str, str] | None,
    run: JobRun,
) -> StepResult:
    given = {k: interpolate(str(v), scope.context) for k, v in (step.get("with") or {}).items()}
    step_env = {k: interpolate(str(v), scope.context) for k, v in (step.get("env") or {}).items()}
    action_dir = resolve(str(step["uses"]))
    if action_dir is None:
        run.external[step_id] = ExternalStep(str(step["uses"]), given, step_env)
        return StepResult(step_id, name, "success", "success")
    runner = CompositeRunner(action_dir, scope.workspace, scope.env | step_env)
    declared = runner.metadata.get("inputs") or {}
    given |= {k: v for k, v in (action_inputs or {}).items() if k in declared}
    action_run = runner.run(given, timeout=scope.timeout, temp=scope.temp)
    run.actions[step_id] = action_run
    outcome = "success" if action_run.ok else "failure"
    return StepResult(
        step_id,
        name,
        outcome,
        outcome,
        outputs=action_run.outputs,
        summary=action_run.summary,
        stdout="\n".join(s.stdout for s in action_run.steps),
        stderr="\n".join(s.stderr for s in action_run.steps),
    )
