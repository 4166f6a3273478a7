"""``headwater stream backup|restore`` and ``headwater account backup`` against a real server,
through typer's CliRunner."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import nats

from headwater.archive import scan_archive
from headwater.control.backup import ARCHIVE_FILE, BACKUP_FILE, NATS_ARCHIVE_FILE
from headwater.testing import ServerProcess
from tests.cli.conftest import run_cli


def js(srv: ServerProcess, action: str, stream: str, count: int = 0) -> Any:
    """Create (with ``count`` messages and a durable), inspect or delete a stream."""

    async def body() -> Any:
        nc = await nats.connect(srv.url, allow_reconnect=False)
        try:
            ctx = nc.jetstream()
            if action == "create":
                await ctx.add_stream(name=stream, subjects=[f"{stream.lower()}.>"])
                for i in range(count):
                    await ctx.publish(f"{stream.lower()}.{i % 3}", f"m{i}".encode())
                await ctx.add_consumer(stream, durable_name="C")
                return None
            if action == "delete":
                await ctx.delete_stream(stream)
                return None
            return await ctx.stream_info(stream)
        finally:
            await nc.close()

    return asyncio.run(body())


def test_stream_backup_and_restore(srv: ServerProcess, tmp_path: Path) -> None:
    js(srv, "create", "CLIA", 25)
    target = tmp_path / "new" / "dir"
    result = run_cli(srv, "stream", "backup", "CLIA", str(target))
    assert result.exit_code == 0, result.output
    assert "Backed up stream CLIA: 25 messages" in result.output
    backup = json.loads((target / BACKUP_FILE).read_text())
    assert backup["config"]["name"] == "CLIA"
    assert backup["state"]["messages"] == 25
    assert scan_archive(target / ARCHIVE_FILE).summary.messages == 25  # type: ignore[union-attr]

    js(srv, "delete", "CLIA")
    result = run_cli(srv, "stream", "restore", str(target), "--verify")
    assert result.exit_code == 0, result.output
    assert "Restored stream CLIA: 25 messages" in result.output
    assert "1 consumers" in result.output
    info = js(srv, "info", "CLIA")
    assert info.state.messages == 25 and info.state.consumer_count == 1

    # Restoring onto the existing stream fails with the server's 10130.
    result = run_cli(srv, "stream", "restore", str(target))
    assert result.exit_code == 1
    assert "10130" in result.output
    js(srv, "delete", "CLIA")


def test_non_empty_directory_needs_force(srv: ServerProcess, tmp_path: Path) -> None:
    js(srv, "create", "CLIB", 3)
    (tmp_path / "other.txt").write_text("keep me")
    result = run_cli(srv, "stream", "backup", "CLIB", str(tmp_path))
    assert result.exit_code == 1
    assert "not empty" in result.output
    assert not (tmp_path / BACKUP_FILE).exists()
    result = run_cli(srv, "stream", "backup", "CLIB", str(tmp_path), "--force", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["stream"] == "CLIB" and report["messages"] == 3
    assert (tmp_path / "other.txt").read_text() == "keep me"
    assert (tmp_path / ARCHIVE_FILE).is_file()
    js(srv, "delete", "CLIB")


def test_backup_of_a_missing_stream_fails(srv: ServerProcess, tmp_path: Path) -> None:
    result = run_cli(srv, "stream", "backup", "NOSUCH", str(tmp_path / "x"))
    assert result.exit_code == 1
    # The server's own codes, both of them (the HTTP-like one was once shown as 0).
    assert "stream not found (code 404, err_code 10059)" in result.output
    assert not (tmp_path / "x" / ARCHIVE_FILE).exists()


def test_restore_of_a_damaged_backup_is_refused(srv: ServerProcess, tmp_path: Path) -> None:
    js(srv, "create", "CLIC", 50)
    assert run_cli(srv, "stream", "backup", "CLIC", str(tmp_path)).exit_code == 0
    js(srv, "delete", "CLIC")
    archive = tmp_path / ARCHIVE_FILE
    archive.write_bytes(archive.read_bytes()[:-9])
    for flags in ((), ("--verify",)):
        result = run_cli(srv, "stream", "restore", str(tmp_path), *flags)
        assert result.exit_code == 1
        assert ("failed verification" if flags else "10062") in result.output
    result = run_cli(srv, "stream", "restore", str(tmp_path / "nothing-here"))
    assert result.exit_code == 1
    assert "not a backup directory" in result.output


def test_account_backup(srv: ServerProcess, tmp_path: Path) -> None:
    js(srv, "create", "ACCA", 4)
    js(srv, "create", "ACCB", 6)
    result = run_cli(srv, "account", "backup", str(tmp_path / "all"), "--no-consumers")
    assert result.exit_code == 0, result.output
    assert "2 streams backed up" in result.output
    for name, count in (("ACCA", 4), ("ACCB", 6)):
        scan = scan_archive(tmp_path / "all" / name / ARCHIVE_FILE)
        assert scan.summary is not None and scan.summary.messages == count
        assert scan.consumers == []
    # The account backup refuses a non-empty directory too.
    result = run_cli(srv, "account", "backup", str(tmp_path / "all"))
    assert result.exit_code == 1
    js(srv, "delete", "ACCA")
    result = run_cli(srv, "stream", "restore", str(tmp_path / "all" / "ACCA"))
    assert result.exit_code == 0, result.output
    assert js(srv, "info", "ACCA").state.messages == 4
    js(srv, "delete", "ACCA")
    js(srv, "delete", "ACCB")


def test_restore_verify_runs_the_verifier_checks(srv: ServerProcess, tmp_path: Path) -> None:
    """A well-formed archive whose backup.json disagrees with it passes a checksum scan, but
    not the verifier's consistency checks: --verify refuses it before contacting the server."""
    js(srv, "create", "CLIV", 5)
    assert run_cli(srv, "stream", "backup", "CLIV", str(tmp_path)).exit_code == 0
    js(srv, "delete", "CLIV")
    meta_path = tmp_path / "backup.json"
    meta = json.loads(meta_path.read_text())
    meta["state"]["messages"] += 1
    meta_path.write_text(json.dumps(meta))
    scan_archive(tmp_path / ARCHIVE_FILE)  # the archive itself is intact
    result = run_cli(srv, "stream", "restore", str(tmp_path), "--verify")
    assert result.exit_code == 1
    assert "failed verification" in result.output
    assert "CLIV" not in run_cli(srv, "stream", "ls").output


def test_backup_format_and_convert(srv: ServerProcess, tmp_path: Path) -> None:
    """``--format nats`` writes the stream.tar.s2 nats-server restores; ``stream convert``
    turns a backup directory into either format in place, and the result still restores."""
    js(srv, "create", "CLIF", 30)
    target = tmp_path / "b"
    result = run_cli(srv, "stream", "backup", "CLIF", str(target), "--format", "nats", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["archive"] == NATS_ARCHIVE_FILE
    assert sorted(p.name for p in target.iterdir()) == [BACKUP_FILE, NATS_ARCHIVE_FILE]

    result = run_cli(srv, "stream", "convert", str(target), "--format", "headwater")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in target.iterdir()) == [BACKUP_FILE, ARCHIVE_FILE]
    assert scan_archive(target / ARCHIVE_FILE).summary.messages == 30  # type: ignore[union-attr]
    assert run_cli(srv, "stream", "convert", str(target), "--format", "headwater").exit_code == 0

    assert run_cli(srv, "stream", "convert", str(target), "--format", "nats").exit_code == 0
    js(srv, "delete", "CLIF")
    result = run_cli(srv, "stream", "restore", str(target), "--verify")
    assert result.exit_code == 0, result.output
    assert js(srv, "info", "CLIF").state.messages == 30
    js(srv, "delete", "CLIF")


def test_convert_of_a_damaged_backup_changes_nothing(srv: ServerProcess, tmp_path: Path) -> None:
    js(srv, "create", "CLIG", 20)
    assert run_cli(srv, "stream", "backup", "CLIG", str(tmp_path)).exit_code == 0
    js(srv, "delete", "CLIG")
    archive = tmp_path / ARCHIVE_FILE
    damaged = archive.read_bytes()[:-9]
    archive.write_bytes(damaged)
    result = run_cli(srv, "stream", "convert", str(tmp_path), "--format", "nats")
    assert result.exit_code == 1
    assert "cannot be converted" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == [BACKUP_FILE, ARCHIVE_FILE]
    assert archive.read_bytes() == damaged
