"""The stream picker (``stream info|rm|purge`` without a name, on a terminal) offers the
streams ``stream ls`` shows: natscli hides the KV, object store and MQTT streams there too."""

from __future__ import annotations

import json

import pytest

from headwater.cli import prompts
from tests.cli.conftest import Cli

pytestmark = pytest.mark.differential


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend a person is at the keyboard; CliRunner feeds the answers."""
    monkeypatch.setattr(prompts, "stdin_is_tty", lambda: True)


def test_picker_hides_system_streams(cli: Cli, terminal: None) -> None:
    cli.ok("stream", "add", "PICKME", "--subjects", "pickme.>")
    cli.ok("kv", "add", "PICKKV")
    cli.ok("obj", "add", "PICKOBJ")
    result = cli.ok("stream", "info", "--json", input="PICKME\n")
    prompt = result.stdout.splitlines()[0]
    assert prompt.startswith("Stream (") and "PICKME" in prompt
    assert "KV_PICKKV" not in prompt and "OBJ_PICKOBJ" not in prompt
    info = json.loads(result.stdout[result.stdout.index("{") :])
    assert info["config"]["name"] == "PICKME"
    # A hidden stream can still be typed in.
    result = cli.ok("stream", "info", "--json", input="KV_PICKKV\n")
    assert '"name": "KV_PICKKV"' in result.stdout
    cli.ok("stream", "rm", "PICKME", "--force")
    cli.ok("kv", "rm", "PICKKV", "--force")
    cli.ok("obj", "rm", "PICKOBJ", "--force")
