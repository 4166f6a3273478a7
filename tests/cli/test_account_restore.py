"""``headwater account restore DIR`` (natscli's ``nats account restore``) on both servers:
every stream an ``account backup`` wrote comes back, or nothing does when a name is in use."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import nats
import pytest

from headwater.testing import ServerProcess
from tests.cli.conftest import Cli

pytestmark = pytest.mark.differential

#: Stream name -> number of messages; RSTB gets a durable consumer with some acked.
STREAMS = {"RSTA": 4, "RSTB": 7, "RSTC": 2}


def _run(url: str, work: Any) -> Any:
    async def body() -> Any:
        nc = await nats.connect(url, allow_reconnect=False)
        try:
            return await work(nc.jetstream())
        finally:
            await nc.close()

    return asyncio.run(body())


def create_streams(url: str) -> None:
    async def work(js: Any) -> None:
        for name, count in STREAMS.items():
            await js.add_stream(name=name, subjects=[f"{name.lower()}.>"])
            for i in range(count):
                await js.publish(f"{name.lower()}.{i}", f"{name}-{i}".encode())
        await js.add_consumer("RSTB", durable_name="WORK", ack_policy="explicit")
        sub = await js.pull_subscribe_bind("WORK", "RSTB")
        for msg in await sub.fetch(3, timeout=5):
            await msg.ack_sync()

    _run(url, work)


def snapshot(url: str) -> dict[str, Any]:
    """Per stream: its messages (subject, data) and its consumers' names and ack floors."""

    async def work(js: Any) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for name in STREAMS:
            info = await js.stream_info(name)
            msgs = []
            for seq in range(info.state.first_seq, info.state.last_seq + 1):
                msg = await js.get_msg(name, seq)
                msgs.append((msg.subject, msg.data))
            consumers = {c.name: c.ack_floor.stream_seq for c in await js.consumers_info(name)}
            found[name] = {"messages": msgs, "consumers": consumers}
        return found

    return _run(url, work)  # type: ignore[no-any-return]


def delete_streams(url: str, names: list[str] | None = None) -> None:
    async def work(js: Any) -> None:
        for name in names if names is not None else list(STREAMS):
            try:
                await js.delete_stream(name)
            except nats.js.errors.NotFoundError:
                pass

    _run(url, work)


def stream_names(url: str) -> list[str]:
    async def work(js: Any) -> list[str]:
        return sorted(i.config.name for i in await js.streams_info())

    return _run(url, work)  # type: ignore[no-any-return]


@pytest.fixture
def backed_up(cli: Cli, js_server: ServerProcess, tmp_path: Path) -> Any:
    """Three streams backed up with ``account backup``, then deleted; the directory."""
    create_streams(js_server.url)
    before = snapshot(js_server.url)
    assert before["RSTB"]["consumers"] == {"WORK": 3}
    directory = tmp_path / "account"
    cli.ok("account", "backup", str(directory))
    delete_streams(js_server.url)
    yield directory, before
    delete_streams(js_server.url)


def test_account_restore_brings_back_every_stream(
    cli: Cli, js_server: ServerProcess, backed_up: Any
) -> None:
    directory, before = backed_up
    result = cli.ok("account", "restore", str(directory))
    lines = result.stdout.splitlines()
    for name, count in STREAMS.items():
        assert any(line.startswith(f"Restored stream {name}: {count} messages") for line in lines)
    assert "3 streams restored from" in lines[-1]
    assert snapshot(js_server.url) == before


def test_account_restore_json_and_verify(
    cli: Cli, js_server: ServerProcess, backed_up: Any
) -> None:
    directory, before = backed_up
    report = cli.json("account", "restore", str(directory), "--verify")
    assert [info["config"]["name"] for info in report["streams"]] == sorted(STREAMS)
    assert snapshot(js_server.url) == before


def test_account_restore_refuses_a_name_in_use(
    cli: Cli, js_server: ServerProcess, backed_up: Any
) -> None:
    directory, _ = backed_up

    async def work(js: Any) -> None:
        await js.add_stream(name="RSTB", subjects=["other.>"])

    _run(js_server.url, work)
    result = cli.fails("account", "restore", str(directory))
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1
    assert "RSTB" in result.stderr and "already exists" in result.stderr
    assert [n for n in stream_names(js_server.url) if n.startswith("RST")] == ["RSTB"]


def test_account_restore_refuses_a_damaged_backup_with_verify(
    cli: Cli, js_server: ServerProcess, backed_up: Any
) -> None:
    directory, _ = backed_up
    meta_path = directory / "RSTC" / "backup.json"
    meta = json.loads(meta_path.read_text())
    meta["state"]["messages"] += 1
    meta_path.write_text(json.dumps(meta))
    result = cli.fails("account", "restore", str(directory), "--verify")
    assert "failed verification" in result.stderr
    assert not [n for n in stream_names(js_server.url) if n.startswith("RST")]


def test_account_restore_reports_a_failure_midway(
    cli: Cli, js_server: ServerProcess, backed_up: Any
) -> None:
    """A backup the server refuses (its archive cut short) after others were restored: the
    error names what was restored and what was not, and the exit code is 1."""
    directory, _ = backed_up
    archive = next(p for p in (directory / "RSTB").iterdir() if p.name != "backup.json")
    archive.write_bytes(archive.read_bytes()[:-9])
    result = cli.fails("account", "restore", str(directory))
    assert "RSTB" in result.stderr
    assert "restored: RSTA" in result.stderr and "not restored: RSTB, RSTC" in result.stderr
    assert [n for n in stream_names(js_server.url) if n.startswith("RST")] == ["RSTA"]


def test_account_restore_refuses_an_empty_directory(cli: Cli, tmp_path: Path) -> None:
    result = cli.fails("account", "restore", str(tmp_path))
    assert result.stderr.startswith("Error: ") and "no stream backups" in result.stderr
    missing = cli.fails("account", "restore", str(tmp_path / "nowhere"))
    assert missing.stderr.startswith("Error: ")
