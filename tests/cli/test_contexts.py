"""Saved contexts as natscli keeps them: ``--context NAME`` (and ``$NATS_CONTEXT``), the
selected one from ``context.txt``, and ``headwater context ls|show|add|select|rm`` reading and
writing ``$XDG_CONFIG_HOME/nats/context/NAME.json``. Explicit flags and ``$NATS_URL`` override
the context, as in natscli. Each test has its own XDG_CONFIG_HOME and HOME."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from headwater.cli.app import app
from headwater.testing import ServerProcess
from tests.cli.conftest import describe

DEAD = "nats://127.0.0.1:1"  # nothing listens on port 1


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    config = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("NATS_URL", "NATS_CONTEXT", "NATS_CREDS", "NATS_USER", "NATS_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    return config / "nats"


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, list(args), env=env)


def ok(*args: str, env: dict[str, str] | None = None) -> Result:
    result = run(*args, env=env)
    assert result.exit_code == 0, describe(result)
    return result


def fails(*args: str) -> Result:
    result = run(*args)
    assert result.exit_code == 1, describe(result)
    assert "Traceback" not in result.output
    return result


def natscli_file(folder: Path, name: str, **fields: object) -> Path:
    """A context as ``nats context add`` writes it: every field present, most empty."""
    record = {
        "description": "", "url": "", "socks_proxy": "", "token": "", "user": "",
        "password": "", "creds": "", "nkey": "", "cert": "", "key": "", "ca": "", "nsc": "",
        "jetstream_domain": "", "jetstream_api_prefix": "", "jetstream_event_prefix": "",
        "inbox_prefix": "", "user_jwt": "", "color_scheme": "", "tls_first": False,
    }  # fmt: skip
    record.update(fields)
    path = folder / "context" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent="  "))
    return path


def test_add_writes_natscli_format_and_select_writes_context_txt(home: Path) -> None:
    ok("context", "add", "dev", "--server", "nats://127.0.0.1:4333", "--user", "u",
       "--password", "pw", "--description", "Development", "--select")  # fmt: skip
    path = home / "context" / "dev.json"
    data = json.loads(path.read_text())
    assert (data["url"], data["user"], data["password"]) == ("nats://127.0.0.1:4333", "u", "pw")
    assert data["description"] == "Development" and data["tls_first"] is False
    assert "jetstream_domain" in data and "name" not in data
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert (home / "context.txt").read_text() == "dev"


def test_ls_show_select_and_rm(home: Path) -> None:
    natscli_file(home, "alpha", url="nats://a:4222", description="A", password="secret")
    natscli_file(home, "beta", url="nats://b:4222")
    listed = json.loads(ok("context", "ls", "--json").stdout)
    assert [(c["name"], c["selected"]) for c in listed] == [("alpha", False), ("beta", False)]
    ok("context", "select", "beta")
    assert (home / "context.txt").read_text() == "beta"
    table = ok("context", "ls").stdout
    assert "alpha" in table and "beta*" in table
    shown = ok("context", "show", "alpha").stdout
    assert "nats://a:4222" in shown and "secret" not in shown  # secrets are masked
    assert json.loads(ok("context", "show", "--json").stdout)["url"] == "nats://b:4222"
    assert (
        "cannot remove the current active context"
        in fails("context", "rm", "beta", "--force").stderr
    )
    ok("context", "rm", "alpha", "--force")
    ok("context", "rm", "beta", "--force")  # the last one goes, and the selection with it
    assert not (home / "context.txt").exists()
    assert json.loads(ok("context", "ls", "--json").stdout) == []


def test_unknown_and_invalid_names(home: Path) -> None:
    assert 'Error: unknown context "nope"' in fails("--context", "nope", "stream", "ls").stderr
    assert 'Error: unknown context "nope"' in fails("context", "select", "nope").stderr
    assert 'invalid context name "../x"' in fails("context", "add", "../x").stderr


@pytest.mark.differential
def test_context_url_is_used_and_flags_override_it(home: Path, js_server: ServerProcess) -> None:
    natscli_file(home, "live", url=js_server.url)
    natscli_file(home, "dead", url=DEAD)
    assert isinstance(json.loads(ok("--context", "live", "stream", "ls", "--json").stdout), list)
    # $NATS_CONTEXT names it too
    ok("stream", "ls", "--json", env={"NATS_CONTEXT": "live"})
    # explicit -s and $NATS_URL win over the context's url
    ok("-s", js_server.url, "--context", "dead", "stream", "ls")
    ok("--context", "dead", "stream", "ls", env={"NATS_URL": js_server.url})
    assert "cannot connect" in fails("--context", "dead", "stream", "ls").stderr


@pytest.mark.differential
def test_selected_context_applies_without_flags(home: Path, js_server: ServerProcess) -> None:
    natscli_file(home, "live", url=js_server.url)
    (home / "context.txt").write_text("live\n")
    ok("stream", "ls", "--json")
    ok("account", "info")


def test_fields_headwater_cannot_honour_are_refused(home: Path) -> None:
    natscli_file(home, "proxy", url=DEAD, socks_proxy="socks5://127.0.0.1:1080")
    result = fails("--context", "proxy", "stream", "ls")
    assert 'context "proxy" sets socks_proxy, which headwater does not support' in result.stderr


def test_root_context_flag_is_refused_on_context_commands(home: Path) -> None:
    natscli_file(home, "alpha", url=DEAD)
    result = fails("--context", "alpha", "context", "show")
    assert "the context commands take the context's name as an argument" in result.stderr
    # $NATS_CONTEXT is the default, not a request: the context commands still work
    ok("context", "ls", env={"NATS_CONTEXT": "alpha"})
