"""The seeds' ORDERS setup has one canonical form, ``examples/orders/``, and the docs show it.

Every YAML block in ``docs/*.md`` that defines ORDERS or one of its consumers gives the same
values, spelled the same, as the example files; docs/CLI.md holds the files verbatim; and the
CLI walk-through in docs/CLI.md creates exactly what the files describe, so a ``plan`` of the
files after the walk-through changes nothing (on both servers).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from headwater.testing import ServerProcess
from tests.cli.conftest import Cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "orders"
CLI_DOC = ROOT / "docs" / "CLI.md"
#: Fields that steer the control plane and never reach the server (docs/CONTROL.md).
CONTROL_FIELDS = {"restore", "preventDelete", "preventUpdate", "driftPolicy"}


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def orders_key(doc: Any) -> tuple[str, str] | None:
    """("Stream", "ORDERS") or ("Consumer", durable) for a document about ORDERS, else None."""
    if not isinstance(doc, dict) or not isinstance(doc.get("spec"), dict):
        return None
    spec = doc["spec"]
    if doc.get("kind") == "Stream" and spec.get("name") == "ORDERS":
        return ("Stream", "ORDERS")
    if doc.get("kind") == "Consumer" and spec.get("streamName") == "ORDERS":
        return ("Consumer", str(spec.get("durableName")))
    return None


def examples() -> dict[tuple[str, str], dict[str, Any]]:
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        key = orders_key(doc)
        assert key is not None, path
        found[key] = doc
    return found


def test_examples_hold_the_stream_and_three_consumers() -> None:
    assert set(examples()) == {
        ("Stream", "ORDERS"),
        ("Consumer", "NEW"),
        ("Consumer", "DISPATCH"),
        ("Consumer", "MONITOR"),
    }


def test_docs_yaml_about_orders_agrees_with_the_examples() -> None:
    canonical = examples()
    checked = 0
    for doc_path in sorted((ROOT / "docs").glob("*.md")):
        for block in blocks(doc_path.read_text(), "yaml"):
            for doc in yaml.safe_load_all(block):
                key = orders_key(doc)
                if key is None:
                    continue
                assert key in canonical, f"{doc_path.name}: {key} is not in examples/orders"
                spec = canonical[key]["spec"]
                for field, value in doc["spec"].items():
                    if field in CONTROL_FIELDS:
                        continue
                    where = f"{doc_path.name}: {key[0]} {key[1]} {field}"
                    assert field in spec, f"{where}: not in examples/orders"
                    assert value == spec[field], f"{where}: {value!r} != {spec[field]!r}"
                checked += 1
    assert checked >= 4  # docs/CLI.md shows all four


def test_cli_doc_shows_the_example_files_verbatim() -> None:
    shown = blocks(CLI_DOC.read_text(), "yaml")
    for path in sorted(EXAMPLES.glob("*.yaml")):
        assert path.read_text() in shown, f"docs/CLI.md does not show {path.name} as it is"


def walk_through() -> list[list[str]]:
    """The ``stream add``/``consumer add`` commands of docs/CLI.md's seeds' walk-through."""
    text = CLI_DOC.read_text().split("## The seeds' walk-through", 1)[1]
    lines = blocks(text, "")[0].replace("\\\n", " ").splitlines()
    commands = [shlex.split(line)[1:] for line in lines if line.startswith("headwater ")]
    adds = [c for c in commands if c[:2] in (["stream", "add"], ["consumer", "add"])]
    assert len(adds) == 4
    return adds


@pytest.mark.differential
def test_cli_walk_through_creates_what_the_examples_describe(js_server: ServerProcess) -> None:
    cli = Cli(js_server.url)
    if "ORDERS" in cli.json("stream", "ls", "--names"):  # the module's server is shared
        cli.ok("stream", "rm", "ORDERS", "--force")
    for command in walk_through():
        cli.ok(*command)
    plan = json.loads(cli("plan", "-f", str(EXAMPLES), "--adopt", "--json").stdout)
    # Taking ownership (the metadata marker) is the only change: every configuration field
    # already matches the files.
    changed = {
        (change["kind"], change["name"], field["field"]): (field["before"], field["after"])
        for change in plan["changes"]
        for field in change.get("fields") or []
        if field["field"] != "metadata"
    }
    assert changed == {}
    cli.ok("stream", "rm", "ORDERS", "--force")
