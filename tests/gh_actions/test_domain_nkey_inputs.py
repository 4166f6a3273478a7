"""The js-domain and nkey inputs every server action shares: apply, plan, publish, eval and
backup against a server in JetStream domain ``hub``, and an nkey user (both kinds)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from gh_actions.locations import EXAMPLES, RunAction

from conftest import BOTH
from support.connectopts import DOMAIN, domain_server, nkey_server


@pytest.mark.parametrize("kind", BOTH)
def test_js_domain_input_reaches_every_server_action(
    kind: str, act: RunAction, workspace: Path, tmp_path: Path
) -> None:
    shutil.copytree(EXAMPLES / "orders", workspace / "jetstream")
    with domain_server(kind, tmp_path) as server:
        conn = {"server": server.url, "js_domain": DOMAIN}
        applied = act("apply", files="jetstream", **conn)
        assert applied.ok and applied.outputs["changed"] == "true", applied.log
        planned = act("plan", files="jetstream", **conn)
        assert planned.ok and planned.outputs["changes"] == "false", planned.log

        published = act("publish", subject="ORDERS.received", payload="1", jetstream="true", **conn)
        assert published.ok, published.log
        assert json.loads(published.outputs["response"])["stream"] == "ORDERS"
        evaluated = act("eval", stream="ORDERS", expression="state.messages == 1", **conn)
        assert evaluated.ok, evaluated.log
        backup = act("backup", stream="ORDERS", directory="backups/orders", **conn)
        assert backup.ok, backup.log
        assert json.loads(backup.outputs["json"])["messages"] == 1

        # Nothing answers $JS.other.API on this server: the input is what the CLI uses.
        elsewhere = {"server": server.url, "js_domain": "other", "timeout": "2s"}
        refused = act("plan", files="jetstream", **elsewhere)
        assert not refused.ok
        assert "$JS.other.API" in refused.log
        missing = act("eval", stream="ORDERS", expression="state.messages == 1", **elsewhere)
        assert not missing.ok
        assert "$JS.other.API" in missing.log


@pytest.mark.parametrize("kind", BOTH)
def test_nkey_input_authenticates(act: RunAction, tmp_path: Path, kind: str) -> None:
    with nkey_server(tmp_path, kind) as (server, seed):
        message = {"server": server.url, "subject": "ci.ping", "payload": "x", "timeout": "2s"}
        signed = act("publish", nkey=str(seed), **message)
        assert signed.ok, signed.log
        unsigned = act("publish", **message)
        assert not unsigned.ok
        assert "Authorization Violation" in unsigned.log
