"""``--owner``/``HEADWATER_OWNER`` and ``--adopt`` on the GitOps commands, against both
servers: each owner prunes only its own, and another owner's resource is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from headwater.cli import exitcodes
from headwater.control import api
from headwater.control.models import MANAGED_BY_KEY
from headwater.testing import ServerProcess
from tests.control.conftest import cli_app, invoke, run_on

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "orders")


def marker(server: ServerProcess, stream: str) -> str | None:
    async def info(nc):  # type: ignore[no-untyped-def]
        return await api.request(nc, f"STREAM.INFO.{stream}", None)

    return (run_on(server, info)["config"].get("metadata") or {}).get(MANAGED_BY_KEY)


def test_default_owner_is_cli_and_env_names_another(clean_server: ServerProcess) -> None:
    assert invoke(clean_server, "apply", "-f", EXAMPLE, "--yes").exit_code == exitcodes.OK
    assert marker(clean_server, "ORDERS") == "cli"
    runner = CliRunner()
    args = ["-s", clean_server.url, "plan", "-f", EXAMPLE, "--json"]
    result = runner.invoke(cli_app(), args, env={"HEADWATER_OWNER": "github:acme/infra"})
    assert result.exit_code == exitcodes.ERROR, result.output
    plan = json.loads(result.stdout)
    assert plan["owner"] == "github:acme/infra"
    assert {c["owner"] for c in plan["changes"]} == {"cli"}
    assert "managed by owner 'cli'" in plan["changes"][0]["refused"]
    assert "--adopt" in plan["changes"][0]["refused"]


def test_prune_spares_other_owners_and_adopt_takes_over(
    clean_server: ServerProcess, tmp_path: Path
) -> None:
    assert (
        invoke(clean_server, "apply", "-f", EXAMPLE, "--yes", "--owner", "terraform:prod").exit_code
        == 0
    )
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    result = invoke(clean_server, "apply", "-f", str(empty), "--prune", "--yes")
    assert result.exit_code == exitcodes.OK, result.output
    assert marker(clean_server, "ORDERS") == "terraform:prod"

    result = invoke(clean_server, "apply", "-f", EXAMPLE, "--yes")
    assert result.exit_code == exitcodes.ERROR
    assert "managed by owner 'terraform:prod', not by 'cli'" in result.output
    result = invoke(clean_server, "plan", "-f", EXAMPLE, "--adopt", "-j")
    assert result.exit_code == exitcodes.CHANGES, result.output
    reasons = {c["name"]: c["reasons"] for c in json.loads(result.stdout)["changes"]}
    assert reasons["ORDERS"] == ["adopted from owner 'terraform:prod'"]
    assert invoke(clean_server, "apply", "-f", EXAMPLE, "--yes", "--adopt").exit_code == 0
    assert marker(clean_server, "ORDERS") == "cli"
    assert invoke(clean_server, "plan", "-f", EXAMPLE).exit_code == exitcodes.OK


def test_the_legacy_shared_name_is_not_an_owner(clean_server: ServerProcess) -> None:
    for owner in ("headwater", " "):
        result = invoke(clean_server, "plan", "-f", EXAMPLE, "--owner", owner)
        assert result.exit_code == exitcodes.ERROR
        assert result.stderr.startswith("Error: --owner"), result.stderr
