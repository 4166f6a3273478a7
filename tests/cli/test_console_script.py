"""End to end through the installed ``headwater`` console script, and the terminal prompts."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from headwater.cli import output, prompts
from headwater.cli.app import app
from headwater.testing import ServerProcess


def headwater(*args: str, server: ServerProcess) -> subprocess.CompletedProcess[str]:
    script = shutil.which("headwater")
    command = [script] if script else [sys.executable, "-m", "headwater.cli"]
    return subprocess.run(
        [*command, "-s", server.url, *args], capture_output=True, text=True, timeout=60
    )


def test_console_script_round_trip(js_server: ServerProcess):
    created = headwater("stream", "add", "E2E", "--subjects", "e2e.*", "--json", server=js_server)
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["config"]["subjects"] == ["e2e.*"]
    published = headwater("pub", "e2e.one", "payload", "-J", "--json", server=js_server)
    assert json.loads(published.stdout) == {"stream": "E2E", "seq": 1}
    stored = headwater("--json", "stream", "get", "E2E", "1", server=js_server)
    assert json.loads(stored.stdout)["subject"] == "e2e.one"


def test_console_script_errors_exit_1_without_traceback(js_server: ServerProcess):
    missing = headwater("stream", "info", "MISSING", server=js_server)
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        "Error: stream MISSING: stream not found (code 404, err_code 10059)"
    )
    bad_flag = headwater("stream", "add", "X", "--storage", "tape", server=js_server)
    assert bad_flag.returncode == 1
    assert "Traceback" not in bad_flag.stderr and "tape" in bad_flag.stderr


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend a person is at the keyboard; CliRunner feeds the answers."""
    monkeypatch.setattr(prompts, "stdin_is_tty", lambda: True)


def test_prompts_for_missing_values_on_a_terminal(js_server: ServerProcess, terminal: None):
    runner = CliRunner()
    result = runner.invoke(
        app, ["-s", js_server.url, "stream", "add", "--json"], input="PROMPTED\nprompted.*\n"
    )
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout[result.stdout.index("{") :])
    assert info["config"]["name"] == "PROMPTED"
    assert info["config"]["subjects"] == ["prompted.*"]

    result = runner.invoke(
        app, ["-s", js_server.url, "consumer", "add", "PROMPTED", "--json"], input="ASKED\n"
    )
    assert result.exit_code == 0, result.output
    assert '"durable_name": "ASKED"' in result.stdout

    declined = runner.invoke(app, ["-s", js_server.url, "stream", "rm", "PROMPTED"], input="n\n")
    assert declined.exit_code == 1 and "cancelled" in declined.stderr
    confirmed = runner.invoke(app, ["-s", js_server.url, "stream", "rm", "PROMPTED"], input="y\n")
    assert confirmed.exit_code == 0, confirmed.output


def test_long_work_shows_progress_on_a_terminal(
    js_server: ServerProcess, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(output, "stderr_is_tty", lambda: True)
    runner = CliRunner()
    base = ["-s", js_server.url]
    assert runner.invoke(app, [*base, "kv", "add", "PROG", "--history", "5"]).exit_code == 0
    for value in ("a", "b", "c"):
        assert runner.invoke(app, [*base, "kv", "put", "PROG", "k", value]).exit_code == 0
    history = runner.invoke(app, [*base, "kv", "history", "PROG", "k"])
    assert history.exit_code == 0, history.output
    assert "Reading history of k" in history.stderr
    assert all(value in history.stdout for value in ("a", "b", "c"))
    purge = runner.invoke(app, [*base, "stream", "purge", "KV_PROG", "--force"])
    assert purge.exit_code == 0, purge.output
    assert "Purging KV_PROG" in purge.stderr
    runner.invoke(app, [*base, "stream", "add", "PSRC", "--subjects", "psrc"])
    runner.invoke(app, [*base, "pub", "psrc", "x", "--count", "5"])
    copied = runner.invoke(app, [*base, "stream", "cp", "PSRC", "PCOPY", "--data"])
    assert copied.exit_code == 0, copied.output
    assert "Copying into PCOPY" in copied.stderr


def test_version_needs_no_server() -> None:
    from headwater import __version__

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"headwater {__version__}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plan", "-f", "nowhere", "--bogus"], "Error: No such option: --bogus"),
        (["stream", "ls", "--timeout", "soon"], "Error: "),
    ],
    ids=["unknown-option", "bad-value"],
)
def test_usage_errors_are_one_error_line_and_exit_1(args: list[str], message: str) -> None:
    script = shutil.which("headwater")
    command = [script] if script else [sys.executable, "-m", "headwater.cli"]
    done = subprocess.run([*command, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(message), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr  # no box, no usage block: one line
