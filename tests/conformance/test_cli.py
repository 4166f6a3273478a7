"""The command line: help, version, flag errors, config errors, flag spellings, startup log.

Run the same way against headwater-server and nats-server wherever both behave alike; where
Headwater deliberately differs (exit status of an unknown flag) the test says so.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BOTH
from headwater.testing import ServerProcess, nats_server_binary

NAMES = {"headwater": "headwater-server", "nats": "nats-server"}


def _binary(kind: str) -> list[str]:
    if kind == "nats":
        binary = nats_server_binary()
        assert binary is not None, "nats-server is not installed"
        return [binary]
    return [sys.executable, "-m", "headwater.server.main"]


def _run(kind: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_binary(kind), *args], capture_output=True, text=True, timeout=20, check=False
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- help and version ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", BOTH)
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_lists_the_flags(kind: str, flag: str) -> None:
    result = _run(kind, flag)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert text.lstrip().startswith(f"Usage: {NAMES[kind]} [options]")
    for spelled in (
        "-p, --port <port>",
        "-a, --addr, --net <host>",
        "-c, --config <file>",
        "-P, --pid <file>",
        "-js, --jetstream",
        "-sd, --store_dir <dir>",
        "--user <user>",
        "--auth <token>",
        "--tlscert <file>",
        "--tlsverify",
        "-v, --version",
    ):
        assert spelled in text, spelled


@pytest.mark.parametrize("kind", BOTH)
@pytest.mark.parametrize("flag", ["-v", "--version"])
def test_version(kind: str, flag: str) -> None:
    result = _run(kind, flag)
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(rf"{NAMES[kind]}: v\d+\.\d+\.\d+\S*\n", result.stdout), result.stdout


# --- flag errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", BOTH)
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bogus"], "flag provided but not defined: -bogus"),
        (["-bogus=1"], "flag provided but not defined: -bogus"),
        (["-p=abc"], 'invalid value "abc" for flag -p: parse error'),
        (["--port", "12x"], 'invalid value "12x" for flag -port: parse error'),
        (["-p"], "flag needs an argument: -p"),
    ],
    ids=["unknown", "unknown-with-value", "bad-int", "bad-int-long", "missing-value"],
)
def test_flag_error_messages(kind: str, args: list[str], message: str) -> None:
    """Go's flag package wording, which both print on stderr."""
    result = _run(kind, *args)
    assert message in result.stderr, result.stderr


@pytest.mark.parametrize("args", [["--bogus"], ["-p=abc"], ["-p"]])
def test_flag_errors_exit_1(args: list[str]) -> None:
    # nats-server prints its usage and exits 0 here; Headwater exits 1 so scripts notice.
    result = _run("headwater", *args)
    assert result.returncode == 1
    assert result.stderr.startswith("headwater-server: ")
    assert result.stdout == ""


# --- config file errors --------------------------------------------------------------------


def _error_line(kind: str, stderr: str) -> int:
    """The line number either server names: 'file:LINE:COL: ...' or 'Parse error on line N'."""
    pattern = r"\.conf:(\d+):\d+: " if kind == "headwater" else r"Parse error on line (\d+)"
    match = re.search(pattern, stderr)
    assert match, stderr
    return int(match.group(1))


@pytest.mark.parametrize("kind", BOTH)
@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("port: 4222\nmax_payload = [1, 2\nhost: x\n", 3),
        ("listen: 127.0.0.1:-1\ndebug: true\nfoo bar baz = =\n", 3),
    ],
    ids=["unterminated-array", "junk-after-value"],
)
def test_config_syntax_error(kind: str, text: str, line: int, tmp_path: Path) -> None:
    conf = tmp_path / "broken.conf"
    conf.write_text(text)
    result = _run(kind, "-c", str(conf))
    assert result.returncode == 1, result.stdout + result.stderr
    assert _error_line(kind, result.stderr) == line


@pytest.mark.parametrize("kind", BOTH)
def test_short_lame_duck_duration_is_refused(kind: str, tmp_path: Path) -> None:
    conf = tmp_path / "ldm.conf"
    conf.write_text('listen: 127.0.0.1:-1\nlame_duck_duration: "1s"\n')
    result = _run(kind, "-c", str(conf))
    assert result.returncode == 1
    assert "lame_duck_duration" in result.stderr
    assert "30 seconds" in result.stderr


# --- flag spellings ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", BOTH)
@pytest.mark.parametrize("spelling", ["-p=PORT", "--port=PORT", "--port PORT", "-port PORT"])
def test_port_spellings(kind: str, spelling: str) -> None:
    port = _free_port()
    args = spelling.replace("PORT", str(port)).split()
    with ServerProcess(kind, args=args) as srv:
        assert srv.port == port
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            assert sock.recv(5) == b"INFO "


@pytest.mark.parametrize("kind", BOTH)
@pytest.mark.parametrize("spelling", ["-sd=DIR", "--store_dir DIR", "-sd DIR"])
def test_store_dir_spellings(kind: str, spelling: str, tmp_path: Path) -> None:
    store = tmp_path / "store"
    args = ["-js", *spelling.replace("DIR", str(store)).split()]
    with ServerProcess(kind, args=args) as srv:
        assert (store / "jetstream").is_dir()
        assert f'Store Directory: "{store / "jetstream"}"' in srv.log()


# --- startup log ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", BOTH)
def test_startup_lines(kind: str) -> None:
    """The lines ServerProcess (and operators' scripts) wait for, in this order."""
    with ServerProcess(kind) as srv:
        log = srv.log()
        listening = re.search(
            rf"\[INF\] Listening for client connections on 127\.0\.0\.1:{srv.port}\n", log
        )
        ready = re.search(r"\[INF\] Server is ready\n", log)
        assert listening and ready, log
        assert listening.start() < ready.start()
