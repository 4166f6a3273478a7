"""Run a composite GitHub Action's steps locally, the way the GitHub runner does.

What is honoured: input defaults and ``required``; ``${{ }}`` expressions in ``run``, ``env``,
``working-directory`` and ``if`` (``inputs``, ``steps``, ``github``, ``env``, ``runner``);
``shell: bash`` as ``bash --noprofile --norc -eo pipefail FILE`` (GitHub's command for it) and
``shell: sh`` as ``sh -e FILE``; a fresh ``$GITHUB_OUTPUT``, ``$GITHUB_STEP_SUMMARY``,
``$GITHUB_ENV`` and ``$GITHUB_PATH`` file per step, read back after it (``name=value`` and
``name<<DELIMITER`` forms); ``$GITHUB_ACTION_PATH``, ``$GITHUB_WORKSPACE``, ``$RUNNER_TEMP``;
a failed step skipping later steps unless their ``if`` says otherwise; ``continue-on-error``;
the action's ``outputs`` evaluated at the end; ``::error``/``::warning``/``::notice``
workflow commands collected as annotations. ``uses:`` steps inside a composite action are
refused: the headwater actions have none.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from support.actions_expressions import Status, condition, interpolate

SHELLS = {
    "bash": ["bash", "--noprofile", "--norc", "-eo", "pipefail"],
    "sh": ["sh", "-e"],
}

_ANNOTATION = re.compile(r"^::(error|warning|notice)(?: ([^:]*))?::(.*)$")


class ActionError(Exception):
    """The action can not be run as written (bad metadata, missing input, bad output file)."""


@dataclass
class Annotation:
    level: str
    message: str
    properties: dict[str, str]


@dataclass
class StepResult:
    id: str
    name: str
    outcome: str
    """success, failure or skipped (before continue-on-error)."""
    conclusion: str
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    outputs: dict[str, str] = field(default_factory=dict)
    summary: str = ""
    """What the step appended to $GITHUB_STEP_SUMMARY."""


@dataclass
class ActionRun:
    outputs: dict[str, str]
    summary: str
    steps: list[StepResult]
    annotations: list[Annotation]

    @property
    def ok(self) -> bool:
        return all(step.conclusion != "failure" for step in self.steps)

    @property
    def log(self) -> str:
        """Every step's output, for assertion messages."""
        parts = []
        for step in self.steps:
            parts.append(f"--- {step.name} ({step.outcome}, exit {step.exit_code})")
            parts += [step.stdout, step.stderr]
        return "\n".join(parts)

    def step(self, step_id: str) -> StepResult:
        return next(step for step in self.steps if step.id == step_id)


def parse_command_file(text: str) -> dict[str, str]:
    """``$GITHUB_OUTPUT``/``$GITHUB_ENV`` content: ``name=value`` or ``name<<DELIM`` blocks."""
    values: dict[str, str] = {}
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if not line.strip():
            continue
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            body: list[str] = []
            while index < len(lines) and lines[index] != delimiter:
                body.append(lines[index])
                index += 1
            if index >= len(lines):
                raise ActionError(f"no closing delimiter {delimiter!r} for {name!r}")
            index += 1
            values[name] = "\n".join(body)
        elif "=" in line:
            name, value = line.split("=", 1)
            values[name] = value
        else:
            raise ActionError(f"invalid line in a command file: {line!r}")
    return values


def _annotations(text: str) -> list[Annotation]:
    found = []
    for line in text.splitlines():
        match = _ANNOTATION.match(line)
        if match is None:
            continue
        props: dict[str, str] = {}
        for item in filter(None, (match.group(2) or "").split(",")):
            key, _, value = item.partition("=")
            props[key.strip()] = _unescape(value)
        found.append(Annotation(match.group(1), _unescape(match.group(3)), props))
    return found


def _unescape(text: str) -> str:
    for code, char in (("%0D", "\r"), ("%0A", "\n"), ("%3A", ":"), ("%2C", ","), ("%25", "%")):
        text = text.replace(code, char)
    return text


def load_action(action_dir: Path) -> dict[str, Any]:
    metadata = yaml.safe_load((action_dir / "action.yml").read_text(encoding="utf-8"))
    if metadata.get("runs", {}).get("using") != "composite":
        raise ActionError(f"{action_dir} is not a composite action")
    return metadata


def runner_env(workspace: Path, temp: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without its own GitHub variables, as a runner sets it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_"))}
    env |= {
        "CI": "true",
        "GITHUB_ACTIONS": "true",
        "GITHUB_WORKSPACE": str(workspace),
        "GITHUB_REPOSITORY": "acme/infra",
        "RUNNER_TEMP": str(temp),
        "RUNNER_OS": "Linux",
    }
    return env | dict(extra or {})


@dataclass
class StepScope:
    """What a step runs in: the expression context, the environment, the directories."""

    context: dict[str, Any]
    env: dict[str, str]
    workspace: Path
    temp: Path
    status: Status = field(default_factory=Status)
    timeout: float = 90.0


def run_script_step(
    step: dict[str, Any], step_id: str, name: str, scope: StepScope, default_shell: str | None
) -> StepResult:
    """A ``run:`` step. Composite actions must name a shell; a workflow defaults to bash -e."""
    shell = step.get("shell")
    if shell is None and default_shell is not None:
        command = [default_shell, "-e"]
    elif shell in SHELLS:
        command = list(SHELLS[shell])
    else:
        raise ActionError(f"step {name!r}: shell {shell!r} is not supported (bash, sh)")
    files = {
        key: Path(tempfile.mkstemp(prefix=f"{key.lower()}-", dir=scope.temp)[1])
        for key in ("OUTPUT", "STEP_SUMMARY", "ENV", "PATH")
    }
    script = Path(tempfile.mkstemp(prefix="step-", suffix=".sh", dir=scope.temp)[1])
    script.write_text(interpolate(str(step["run"]), scope.context, scope.status), encoding="utf-8")
    step_env = dict(scope.env)
    for key, value in (step.get("env") or {}).items():
        step_env[key] = interpolate(str(value), scope.context, scope.status)
    step_env |= {f"GITHUB_{key}": str(path) for key, path in files.items()}
    directory = interpolate(str(step.get("working-directory", ".")), scope.context)
    proc = subprocess.run(
        [*command, str(script)],
        cwd=scope.workspace / directory,
        env=step_env,
        capture_output=True,
        text=True,
        timeout=scope.timeout,
        stdin=subprocess.DEVNULL,
    )
    outputs = parse_command_file(files["OUTPUT"].read_text(encoding="utf-8"))
    # GITHUB_ENV and GITHUB_PATH change the environment of the steps after this one.
    scope.env.update(parse_command_file(files["ENV"].read_text(encoding="utf-8")))
    for entry in reversed(files["PATH"].read_text(encoding="utf-8").splitlines()):
        if entry.strip():
            scope.env["PATH"] = f"{entry.strip()}{os.pathsep}{scope.env.get('PATH', '')}"
    outcome = "success" if proc.returncode == 0 else "failure"
    return StepResult(
        step_id,
        name,
        outcome,
        _conclusion(step, outcome, scope),
        proc.returncode,
        proc.stdout,
        proc.stderr,
        outputs,
        files["STEP_SUMMARY"].read_text(encoding="utf-8"),
    )


def _conclusion(step: dict[str, Any], outcome: str, scope: StepScope) -> str:
    value = step.get("continue-on-error", False)
    if isinstance(value, str):
        value = interpolate(value, scope.context, scope.status).lower() == "true"
    return "success" if value and outcome == "failure" else outcome


def record(scope: StepScope, result: StepResult) -> None:
    """Publish a finished step to ``steps.<id>`` and the job status."""
    if result.conclusion == "failure":
        scope.status.failed = True
    scope.context["steps"][result.id] = {
        "outputs": result.outputs,
        "outcome": result.outcome,
        "conclusion": result.conclusion,
    }


class CompositeRunner:
    """Runs one action; ``env`` is the job's environment on top of the runner's."""

    def __init__(
        self, action_dir: Path, workspace: Path, env: dict[str, str] | None = None
    ) -> None:
        self.action_dir = action_dir.resolve()
        self.metadata = load_action(self.action_dir)
        self.workspace = workspace
        self.job_env = dict(env or {})

    def resolve_inputs(self, given: dict[str, str], context: dict[str, Any]) -> dict[str, str]:
        declared: dict[str, dict[str, Any]] = self.metadata.get("inputs") or {}
        unknown = set(given) - set(declared)
        if unknown:
            raise ActionError(f"unexpected input(s) {sorted(unknown)}")
        values = {}
        for name, spec in declared.items():
            if name in given:
                values[name] = str(given[name])
            elif "default" in spec:
                values[name] = interpolate(str(spec["default"]), context)
            elif spec.get("required"):
                raise ActionError(f"input {name!r} is required")
            else:
                values[name] = ""
        return values

    def run(
        self, inputs: dict[str, str] | None = None, timeout: float = 90.0, temp: Path | None = None
    ) -> ActionRun:
        """Run the steps; ``temp`` is $RUNNER_TEMP (a job shares one), else a new directory."""
        if temp is not None:
            return self._run(inputs or {}, temp, timeout)
        with tempfile.TemporaryDirectory(prefix="runner-temp-") as temp_name:
            return self._run(inputs or {}, Path(temp_name), timeout)

    def _run(self, given: dict[str, str], temp: Path, timeout: float) -> ActionRun:
        env = runner_env(self.workspace, temp, self.job_env)
        env["GITHUB_ACTION_PATH"] = str(self.action_dir)
        context: dict[str, Any] = {
            "github": {
                "action_path": str(self.action_dir),
                "workspace": str(self.workspace),
                "token": "",
            },
            "runner": {"temp": str(temp), "os": "Linux"},
            "env": env,
            "steps": {},
        }
        context["inputs"] = self.resolve_inputs(given, context)
        scope = StepScope(context, env, self.workspace, temp, timeout=timeout)
        results: list[StepResult] = []
        for index, step in enumerate(self.metadata["runs"]["steps"]):
            step_id = str(step.get("id") or f"__step{index}")
            name = str(step.get("name") or step_id)
            if "uses" in step:
                raise ActionError(f"step {name!r}: uses steps are not supported by this runner")
            if condition(step.get("if"), context, scope.status):
                result = run_script_step(step, step_id, name, scope, default_shell=None)
            else:
                result = StepResult(step_id, name, "skipped", "skipped")
            record(scope, result)
            results.append(result)
        outputs = {
            name: interpolate(str(spec.get("value", "")), context, scope.status)
            for name, spec in (self.metadata.get("outputs") or {}).items()
        }
        summary = "".join(result.summary for result in results)
        annotations = [a for result in results for a in _annotations(result.stdout)]
        return ActionRun(outputs, summary, results, annotations)


def run_action(
    action_dir: Path,
    inputs: dict[str, str] | None = None,
    *,
    workspace: Path,
    env: dict[str, str] | None = None,
    timeout: float = 90.0,
) -> ActionRun:
    """Run a composite action once; see :class:`CompositeRunner`."""
    return CompositeRunner(action_dir, workspace, env).run(inputs, timeout)


def annotations_of(text: str) -> list[Annotation]:
    """The ``::error``/``::warning``/``::notice`` workflow commands in a step's output."""
    return _annotations(text)
