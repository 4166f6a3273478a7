"""Every action.yml and example workflow against schemastore's schemas (as vendored by
check-jsonschema: no network), and the actions' inputs, outputs and environment wired up
consistently."""

from __future__ import annotations

import importlib.resources
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from gh_actions.locations import ACTIONS, EXAMPLES

from support.actions_workflow import load_workflow

ACTION_FILES = sorted(ACTIONS.glob("*/action.yml"))
WORKFLOW_FILES = sorted((EXAMPLES / "gitops" / ".github" / "workflows").glob("*.yml"))
SERVER_ACTIONS = ["plan", "apply", "publish", "eval", "backup"]
CONNECTION_INPUTS = {
    "server": "HW_SERVER",
    "credentials": "HW_CREDENTIALS",
    "user": "HW_USER",
    "password": "HW_PASSWORD",
    "token": "HW_TOKEN",
    "nkey": "HW_NKEY",
    "tls-cert": "HW_TLS_CERT",
    "tls-key": "HW_TLS_KEY",
    "tls-ca": "HW_TLS_CA",
    "tls-first": "HW_TLS_FIRST",
    "js-domain": "HW_JS_DOMAIN",
    "timeout": "HW_TIMEOUT",
}
INPUT_REFERENCE = re.compile(r"\$\{\{\s*inputs\.([\w-]+)\s*\}\}")
STEP_OUTPUT_REFERENCE = re.compile(r"steps\.([\w-]+)\.outputs\.([\w-]+)")


def vendored_schema(name: str) -> dict[str, Any]:
    vendor = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    return json.loads(vendor.joinpath(f"{name}.json").read_text(encoding="utf-8"))


def schema_errors(document: Any, schema_name: str) -> list[str]:
    schema = vendored_schema(schema_name)
    validator = jsonschema.Draft7Validator(schema)
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(document)]


def metadata(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_there_is_an_action_per_command() -> None:
    names = {path.parent.name for path in ACTION_FILES}
    assert names == {"setup", "validate", "plan", "apply", "publish", "eval", "backup", "verify"}


@pytest.mark.parametrize("path", ACTION_FILES, ids=lambda p: p.parent.name)
def test_action_metadata_matches_the_schema(path: Path) -> None:
    assert schema_errors(metadata(path), "github-actions") == []


@pytest.mark.parametrize("path", WORKFLOW_FILES, ids=lambda p: p.name)
def test_workflow_matches_the_schema(path: Path) -> None:
    # The schema is written for the YAML 1.2 reading GitHub uses, where `on` is a string.
    assert schema_errors(load_workflow(path), "github-workflows") == []


def test_the_schema_check_can_fail() -> None:
    broken = metadata(ACTIONS / "plan" / "action.yml")
    broken["runs"]["steps"][1].pop("shell")
    broken["inputs"]["files"]["required"] = "yes"
    errors = schema_errors(broken, "github-actions")
    assert errors
    workflow = load_workflow(WORKFLOW_FILES[0])
    next(iter(workflow["jobs"].values()))["runs-on"] = 5
    assert schema_errors(workflow, "github-workflows")


def test_check_jsonschema_command_accepts_every_file() -> None:
    """The same check as a CI step would run it, with the vendored schemas."""
    for schema, files in (("github-actions", ACTION_FILES), ("github-workflows", WORKFLOW_FILES)):
        proc = subprocess.run(
            [sys.executable, "-m", "check_jsonschema", "--builtin-schema", f"vendor.{schema}"]
            + [str(path) for path in files],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("path", ACTION_FILES, ids=lambda p: p.parent.name)
def test_inputs_are_declared_and_used(path: Path) -> None:
    action = metadata(path)
    declared = set(action.get("inputs") or {})
    text = path.read_text(encoding="utf-8")
    used = set(INPUT_REFERENCE.findall(text)) | set(re.findall(r"inputs\.([\w-]+) ==", text))
    assert used == declared


@pytest.mark.parametrize("path", ACTION_FILES, ids=lambda p: p.parent.name)
def test_outputs_name_step_outputs_the_steps_set(path: Path) -> None:
    action = metadata(path)
    step_ids = {step.get("id") for step in action["runs"]["steps"]}
    scripts = "\n".join(str(step.get("run", "")) for step in action["runs"]["steps"])
    scripts += "".join(
        (ACTIONS / name).read_text(encoding="utf-8")
        for name in ("setup/install.sh", "validate/report.py", "eval/evaluate.py")
    )
    for name, spec in (action.get("outputs") or {}).items():
        step_id, output = STEP_OUTPUT_REFERENCE.search(spec["value"]).groups()  # type: ignore[union-attr]
        assert step_id in step_ids, name
        set_by_shell = re.search(rf"hw_output(_file)? {re.escape(output)} ", scripts)
        set_by_python = f'set_output("{output}"' in scripts or f"{output}=" in scripts
        assert set_by_shell or set_by_python, f"{path.parent.name}: output {output} never set"


@pytest.mark.parametrize("name", SERVER_ACTIONS)
def test_server_actions_share_the_connection_inputs(name: str) -> None:
    action = metadata(ACTIONS / name / "action.yml")
    reference = metadata(ACTIONS / "plan" / "action.yml")["inputs"]
    for key, variable in CONNECTION_INPUTS.items():
        assert action["inputs"][key] == reference[key], (name, key)
        for step in action["runs"]["steps"]:
            if "lib.sh" in str(step.get("run", "")):
                assert step["env"][variable] == f"${{{{ inputs.{key} }}}}", (name, key)


@pytest.mark.parametrize("path", ACTION_FILES, ids=lambda p: p.parent.name)
def test_inputs_reach_scripts_only_through_the_environment(path: Path) -> None:
    """``${{ inputs.x }}`` pasted into a script would let an input inject shell code."""
    for step in metadata(path)["runs"]["steps"]:
        assert "${{" not in str(step.get("run", "")), step.get("name")
        assert step.get("shell") == "bash"


def local_action(uses: str) -> Path | None:
    match = re.match(r"^[\w.-]+/headwater/gh-actions/([\w-]+)@", uses)
    return ACTIONS / match.group(1) if match else None


@pytest.mark.parametrize("path", WORKFLOW_FILES, ids=lambda p: p.name)
def test_workflows_give_the_actions_inputs_they_declare(path: Path) -> None:
    for job in load_workflow(path)["jobs"].values():
        outputs_by_step: dict[str, set[str]] = {}
        for step in job["steps"]:
            text = json.dumps(step)
            for step_id, output in STEP_OUTPUT_REFERENCE.findall(text):
                assert output in outputs_by_step.get(step_id, set()), (path.name, step_id, output)
            action_dir = local_action(str(step.get("uses", "")))
            if action_dir is None:
                continue
            action = metadata(action_dir / "action.yml")
            declared = action.get("inputs") or {}
            given = set(step.get("with") or {})
            assert given <= set(declared), (path.name, given - set(declared))
            required = {k for k, spec in declared.items() if spec.get("required")}
            assert required <= given, (path.name, required - given)
            if "id" in step:
                outputs_by_step[step["id"]] = set(action.get("outputs") or {})


@pytest.mark.parametrize("path", ACTION_FILES, ids=lambda p: p.parent.name)
def test_every_action_installs_through_the_shared_step(path: Path) -> None:
    first = metadata(path)["runs"]["steps"][0]
    assert first["run"].startswith('bash "$GITHUB_ACTION_PATH/')
    assert first["run"].endswith('install.sh"')
    env = {"HW_PYTHON": "${{ inputs.python }}", "HW_VERSION": "${{ inputs.version }}"}
    if path.parent.name == "setup":
        env["HW_EXTRAS"] = "${{ inputs.extras }}"
    elif path.parent.name == "verify":
        env["HW_EXTRAS"] = "cli,verify"  # PySpark only where it runs
    if path.parent.name != "setup":
        # install.sh reads the install input itself, with every boolean spelling (not an
        # ``if: inputs.install == 'true'`` that took 'yes' for false).
        env["HW_INSTALL"] = "${{ inputs.install }}"
        assert "if" not in first
        assert first["run"] == 'bash "$GITHUB_ACTION_PATH/../setup/install.sh"'
    assert first["env"] == env
