"""The validate action: offline, outputs, file annotations and the job summary."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from gh_actions.locations import EXAMPLES, RunAction

BAD_STREAM = """\
apiVersion: headwater.io/v1
kind: Stream
metadata:
  name: orders
spec:
  name: ORDERS
  maxAge: 1q
  colour: blue
"""


def test_valid_documents(act: RunAction, workspace: Path) -> None:
    shutil.copytree(EXAMPLES / "orders", workspace / "jetstream")
    run = act("validate", files="jetstream")
    assert run.ok, run.log
    assert run.outputs["valid"] == "true"
    assert json.loads(run.outputs["resources"]) == [
        "Consumer/ORDERS/DISPATCH",
        "Consumer/ORDERS/MONITOR",
        "Consumer/ORDERS/NEW",
        "Stream/ORDERS",
    ]
    assert "4 resource(s) valid." in run.summary
    assert run.annotations == []


def test_each_error_is_an_annotation_on_its_file(act: RunAction, workspace: Path) -> None:
    (workspace / "jetstream").mkdir()
    (workspace / "jetstream" / "orders.yaml").write_text(BAD_STREAM)
    run = act("validate", files="jetstream")
    assert not run.ok
    assert run.outputs["valid"] == "false"
    assert json.loads(run.outputs["json"])["valid"] is False
    messages = sorted(a.message for a in run.annotations)
    assert messages[0] == "Stream/ORDERS: spec.colour: Extra inputs are not permitted"
    assert messages[1].startswith("Stream/ORDERS: spec.maxAge: invalid duration '1q'")
    assert {a.properties["file"] for a in run.annotations} == {"jetstream/orders.yaml"}
    # Each on its field's line, so the pull request's diff shows it there.
    lines = {a.message.split(":")[1].strip(): a.properties["line"] for a in run.annotations}
    assert lines == {"spec.maxAge": "7", "spec.colour": "8"}
    assert {a.level for a in run.annotations} == {"error"}
    assert "| jetstream/orders.yaml | Stream/ORDERS | spec.maxAge |" in run.summary


def test_an_error_message_with_new_lines_stays_one_annotation(
    act: RunAction, workspace: Path
) -> None:
    (workspace / "broken.yaml").write_text("spec: [\n")
    run = act("validate", files="broken.yaml")
    assert not run.ok
    assert len(run.annotations) == 1
    assert run.annotations[0].message.startswith("invalid YAML at line 2")
    assert "\n" in run.annotations[0].message


def test_a_missing_file_is_invalid(act: RunAction) -> None:
    run = act("validate", files="nowhere.yaml")
    assert not run.ok
    assert run.outputs["valid"] == "false"
    assert run.annotations[0].properties["file"] == "nowhere.yaml"
