"""The seeds' ORDERS example kept in git (examples/orders/), through the ``headwater`` CLI,
against both servers: plan shows exactly the changes, apply makes them, a second plan shows
none, and a stream deleted by hand shows as drift."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from nats.aio.client import Client

from headwater.cli import exitcodes
from headwater.control import api
from headwater.testing import ServerProcess
from tests.control.conftest import invoke, run_on

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "orders")


def test_example_validates_offline() -> None:
    result = invoke(None, "validate", "-f", EXAMPLE)
    assert result.exit_code == exitcodes.OK, result.output
    assert "4 resource(s) valid" in result.output
    expected = {
        "valid": True,
        "resources": [
            "Consumer/ORDERS/DISPATCH",
            "Consumer/ORDERS/MONITOR",
            "Consumer/ORDERS/NEW",
            "Stream/ORDERS",
        ],
    }
    # JSON before the command, or after it as --json or -j, as every command takes it.
    for args in (["--json", "validate", "-f", EXAMPLE], ["validate", "-f", EXAMPLE, "-j"]):
        result = invoke(None, *args)
        assert result.exit_code == exitcodes.OK, result.output
        assert json.loads(result.stdout) == expected


def test_orders_plan_apply_plan(clean_server: ServerProcess, tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    result = invoke(clean_server, "--json", "plan", "-f", EXAMPLE, "--markdown", str(summary))
    assert result.exit_code == exitcodes.CHANGES, result.output
    plan = json.loads(result.stdout)
    assert [(c["action"], c["kind"], c["name"]) for c in plan["changes"]] == [
        ("create", "Stream", "ORDERS"),
        ("create", "Consumer", "DISPATCH"),
        ("create", "Consumer", "MONITOR"),
        ("create", "Consumer", "NEW"),
    ]
    markdown = summary.read_text()
    assert "Plan: 4 to create, 0 to update, 0 to replace, 0 to delete, 0 unchanged." in markdown
    assert "| `+` | **create** | `Stream/ORDERS` |" in markdown

    result = invoke(clean_server, "apply", "-f", EXAMPLE, "--yes")
    assert result.exit_code == exitcodes.OK, result.output
    assert "4 applied" in result.output

    result = invoke(clean_server, "plan", "-f", EXAMPLE)
    assert result.exit_code == exitcodes.OK, result.output
    assert "No changes" in result.output
    result = invoke(clean_server, "diff", "-f", EXAMPLE)
    assert result.exit_code == exitcodes.OK, result.output

    async def check(nc: Client) -> None:
        stream = await api.request(nc, "STREAM.INFO.ORDERS")
        assert stream["config"]["subjects"] == ["ORDERS.*"]
        assert stream["config"]["max_age"] == 365 * 24 * 3600 * 10**9
        new = await api.request(nc, "CONSUMER.INFO.ORDERS.NEW")
        assert new["config"]["filter_subject"] == "ORDERS.received"
        assert new["config"]["sample_freq"] == "100%"
        monitor = await api.request(nc, "CONSUMER.INFO.ORDERS.MONITOR")
        assert monitor["config"]["deliver_subject"] == "monitor.ORDERS"
        assert monitor["config"]["deliver_policy"] == "last"
        await api.request(nc, "STREAM.DELETE.ORDERS")

    run_on(clean_server, check)
    # Deleted by hand: drift, and the plan creates it (and its consumers) again.
    result = invoke(clean_server, "diff", "-f", EXAMPLE)
    assert result.exit_code == exitcodes.CHANGES
    assert "+ Stream/ORDERS (create)" in result.output
    result = invoke(clean_server, "apply", "-f", EXAMPLE, "--yes")
    assert result.exit_code == exitcodes.OK, result.output
    assert invoke(clean_server, "plan", "-f", EXAMPLE).exit_code == exitcodes.OK


def test_cli_update_replace_and_prune(clean_server: ServerProcess, tmp_path: Path) -> None:
    assert invoke(clean_server, "apply", "-f", EXAMPLE, "--yes").exit_code == exitcodes.OK
    docs = tmp_path / "docs"
    docs.mkdir()
    for path in Path(EXAMPLE).glob("*.yaml"):
        (docs / path.name).write_text(path.read_text())
    stream_file = docs / "orders-stream.yaml"
    stream_file.write_text(stream_file.read_text().replace("maxAge: 1y", "maxAge: 90d"))
    result = invoke(clean_server, "plan", "-f", str(docs))
    assert result.exit_code == exitcodes.CHANGES
    assert "max_age: 1y -> 90d" in result.output

    stream_file.write_text(stream_file.read_text().replace("storage: file", "storage: memory"))
    result = invoke(clean_server, "plan", "-f", str(docs))
    assert result.exit_code == exitcodes.ERROR
    assert "REFUSED" in result.output
    # diff agrees with plan on a refused change: exit 1, and the same JSON shape.
    result = invoke(clean_server, "diff", "-f", str(docs), "-j")
    assert result.exit_code == exitcodes.ERROR
    diffed = json.loads(result.stdout)
    planned = json.loads(invoke(clean_server, "plan", "-f", str(docs), "-j").stdout)
    assert diffed["refused"] == planned["refused"] == ["Stream/ORDERS"]
    assert diffed["changes"] == [c for c in planned["changes"] if c["action"] != "noop"]
    result = invoke(clean_server, "apply", "-f", str(docs), "--yes", "-j")
    assert result.exit_code == exitcodes.ERROR
    assert "nothing was changed" in result.stderr
    refused = json.loads(result.stdout)
    assert refused["apply"] is None and refused["plan"]["refused"] == ["Stream/ORDERS"]
    result = invoke(clean_server, "apply", "-f", str(docs), "--yes", "--allow-replace")
    assert result.exit_code == exitcodes.OK, result.output
    assert invoke(clean_server, "plan", "-f", str(docs)).exit_code == exitcodes.OK

    (docs / "orders-monitor.yaml").unlink()
    assert invoke(clean_server, "plan", "-f", str(docs)).exit_code == exitcodes.OK
    result = invoke(clean_server, "plan", "-f", str(docs), "--prune", "--json")
    assert result.exit_code == exitcodes.CHANGES
    deletes = [c["name"] for c in json.loads(result.stdout)["changes"] if c["action"] == "delete"]
    assert deletes == ["MONITOR"]
    assert invoke(clean_server, "apply", "-f", str(docs), "--prune", "-y").exit_code == 0
    assert invoke(clean_server, "plan", "-f", str(docs), "--prune").exit_code == exitcodes.OK


def test_cli_export(clean_server: ServerProcess, tmp_path: Path) -> None:
    assert invoke(clean_server, "apply", "-f", EXAMPLE, "--yes").exit_code == exitcodes.OK
    out = tmp_path / "live.yaml"
    result = invoke(clean_server, "export", "-o", str(out))
    assert result.exit_code == exitcodes.OK, result.output
    documents = list(yaml.safe_load_all(out.read_text()))
    assert {d["metadata"]["name"] for d in documents} == {
        "orders",
        "orders-new",
        "orders-dispatch",
        "orders-monitor",
    }
    assert invoke(clean_server, "plan", "-f", str(out)).exit_code == exitcodes.OK
    result = invoke(clean_server, "--json", "export")
    assert len(json.loads(result.stdout)) == 4


def test_cli_errors(clean_server: ServerProcess, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: headwater.io/v1\nkind: Stream\nmetadata: {name: x}\n"
        "spec: {name: X, maxAge: soon}\n"
    )
    result = invoke(None, "validate", "-f", str(bad))
    assert result.exit_code == exitcodes.ERROR
    assert f"{bad}: Stream/X: spec.maxAge: invalid duration 'soon'" in " ".join(
        result.output.split()
    )
    # Invalid documents: plan and apply stop before talking to the server.
    assert invoke(clean_server, "plan", "-f", str(bad)).exit_code == exitcodes.ERROR
    assert invoke(clean_server, "apply", "-f", str(bad), "-y").exit_code == exitcodes.ERROR
    orphan = tmp_path / "orphan.yaml"
    orphan.write_text(
        "apiVersion: headwater.io/v1\nkind: Consumer\nmetadata: {name: c}\n"
        "spec: {streamName: NOPE, durableName: C}\n"
    )
    result = invoke(clean_server, "plan", "-f", str(orphan))
    assert result.exit_code == exitcodes.ERROR
    assert "stream 'NOPE' is neither in the documents nor on the server" in result.output
    # No server listening: an error, not a traceback.
    result = invoke(None, "-s", "nats://127.0.0.1:1", "--timeout", "0.5", "plan", "-f", EXAMPLE)
    assert result.exit_code == exitcodes.ERROR
    assert result.output.startswith("Error: cannot connect: no server reachable"), result.output


def test_apply_without_yes_needs_a_terminal(clean_server: ServerProcess) -> None:
    result = invoke(clean_server, "apply", "-f", EXAMPLE)
    assert result.exit_code == exitcodes.ERROR
    assert "apply needs --yes" in result.output
    assert "nothing was changed" in result.output

    async def names(nc: Client) -> list[str]:
        return (await api.request(nc, "STREAM.NAMES", {})).get("streams") or []

    assert run_on(clean_server, names) == []
