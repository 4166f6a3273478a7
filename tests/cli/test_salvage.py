"""``headwater stream restore DIR --salvage`` against a real headwater-server.

A stream large enough for several 1 MiB archive frames (random, incompressible payloads) is
backed up with ``headwater stream backup``; one byte is flipped in a copy. A plain restore must
fail naming the damaged frame and suggesting ``--salvage``; with ``--salvage`` every message of
the other frames comes back byte for byte, the lost sequences stay absent, the stream carries
the ``headwater.io/salvaged`` metadata mark and the consumers whose record survived.

Only Headwater's archive format can be salvaged (a nats-server ``stream.tar.s2`` cannot be
resumed past a bad S2 chunk), and nats-server does not read Headwater's format, so these tests
run against headwater-server alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest

from headwater.control.backup import NATS_ARCHIVE_FILE
from headwater.testing import ServerProcess
from support.archiveframes import FRAME_HEADER, Frame, flip, frames
from tests.cli.conftest import run_cli

MESSAGES = 3000
PAYLOAD = 1024
SALVAGED_KEY = "headwater.io/salvaged"


@dataclass
class Backup:
    directory: Path
    messages: dict[int, tuple[str, bytes]]
    """seq -> (subject, payload), as published."""


async def _fill(url: str) -> dict[int, tuple[str, bytes]]:
    nc = await nats.connect(url, allow_reconnect=False)
    sent: dict[int, tuple[str, bytes]] = {}
    try:
        js = nc.jetstream()
        await js.add_stream(name="BIG", subjects=["big.>"], metadata={"owner": "tests"})
        await js.add_consumer("BIG", durable_name="READER")
        for start in range(0, MESSAGES, 250):  # bounded batches, each awaited
            batch = [
                (f"big.{i % 7}", os.urandom(PAYLOAD))
                for i in range(start, min(start + 250, MESSAGES))
            ]
            acks = await asyncio.gather(*(js.publish(s, p) for s, p in batch))
            for ack, item in zip(acks, batch, strict=True):
                sent[ack.seq] = item
    finally:
        await nc.close()
    return sent


@pytest.fixture(scope="module")
def big(srv: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Backup:
    sent = asyncio.run(_fill(srv.url))
    target = tmp_path_factory.mktemp("salvage") / "big"
    result = run_cli(srv, "stream", "backup", "BIG", str(target))
    assert result.exit_code == 0, result.output
    asyncio.run(_stream(srv, "delete"))
    return Backup(target, sent)


async def _stream(srv: ServerProcess, action: str) -> Any:
    nc = await nats.connect(srv.url, allow_reconnect=False)
    try:
        js = nc.jetstream()
        if action == "delete":
            await js.delete_stream("BIG")
            return None
        if action == "names":
            return await js.streams_info()
        return await js.stream_info("BIG")
    finally:
        await nc.close()


async def _read_all(srv: ServerProcess) -> dict[int, tuple[str, bytes]]:
    """Every message of BIG by sequence, through an ephemeral pull consumer (bounded loop)."""
    nc = await nats.connect(srv.url, allow_reconnect=False)
    got: dict[int, tuple[str, bytes]] = {}
    try:
        js = nc.jetstream()
        sub = await js.pull_subscribe("big.>", stream="BIG")
        for _ in range(MESSAGES // 500 + 5):
            try:
                batch = await sub.fetch(500, timeout=2)
            except nats.errors.TimeoutError:
                break
            for msg in batch:
                got[msg.metadata.sequence.stream] = (msg.subject, msg.data)
                await msg.ack()
        await sub.unsubscribe()
    finally:
        await nc.close()
    return got


def damaged_copy(big: Backup, tmp_path: Path, where: str) -> tuple[Path, list[Frame], int]:
    """A copy of the backup with one byte flipped in frame ``where`` (first, middle); the
    frames and the damaged frame's index."""
    copy = tmp_path / "damaged"
    shutil.copytree(big.directory, copy)
    layout = frames(copy)
    assert len(layout) >= 3
    hit = 0 if where == "first" else len(layout) // 2
    at = (layout[hit].start + FRAME_HEADER.size + layout[hit].end) // 2
    flip(copy, at)
    return copy, layout, hit


def test_restore_of_a_damaged_archive_names_the_frame_and_suggests_salvage(
    srv: ServerProcess, big: Backup, tmp_path: Path
) -> None:
    copy, layout, hit = damaged_copy(big, tmp_path, "middle")
    bad = layout[hit]
    result = run_cli(srv, "stream", "restore", str(copy))
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())  # rich may wrap the error line
    assert "10062" in text, text
    assert f"frame {hit} (bytes {bad.start}-{bad.end})" in text, text
    assert f"sequences {layout[hit - 1].last_seq + 1}-{layout[hit + 1].first_seq - 1}" in text
    assert "--salvage" in text, text
    assert asyncio.run(_stream(srv, "names")) == []


def test_salvage_restores_every_readable_message_and_marks_the_stream(
    srv: ServerProcess, big: Backup, tmp_path: Path
) -> None:
    copy, layout, hit = damaged_copy(big, tmp_path, "middle")
    bad = layout[hit]
    lost = (layout[hit - 1].last_seq + 1, layout[hit + 1].first_seq - 1)
    assert lost == (bad.first_seq, bad.last_seq)
    result = run_cli(srv, "stream", "restore", str(copy), "--salvage", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    salvage = report["salvage"]
    assert salvage["damaged"] == [
        {
            "frame": hit,
            "first_byte": bad.start,
            "last_byte": bad.end,
            "reason": "checksum mismatch",
            "after_seq": layout[hit - 1].last_seq,
            "next_seq": layout[hit + 1].first_seq,
        }
    ]
    assert salvage["lost_sequences"] == [list(lost)]
    assert salvage["lost_messages"] == bad.messages
    assert salvage["restored_messages"] == MESSAGES - bad.messages
    assert salvage["stream_record_lost"] is False
    # The warning goes to stderr even with --json, so nobody mistakes it for a full restore.
    warning = " ".join(result.stderr.split())
    assert "Warning: stream BIG was salvaged" in warning, warning
    assert f"frame {hit} (bytes {bad.start}-{bad.end})" in warning, warning
    assert f"sequences {lost[0]}-{lost[1]}, {bad.messages} messages lost" in warning, warning

    info = asyncio.run(_stream(srv, "info"))
    assert info.config.metadata[SALVAGED_KEY] == f"{lost[0]}-{lost[1]}"
    assert info.config.metadata["owner"] == "tests"  # the backed-up metadata is kept
    assert info.state.messages == MESSAGES - bad.messages
    assert info.state.last_seq == MESSAGES
    assert info.state.consumer_count == 1
    got = asyncio.run(_read_all(srv))
    expected = {s: m for s, m in big.messages.items() if not lost[0] <= s <= lost[1]}
    assert got == expected  # byte for byte, the lost sequences absent
    asyncio.run(_stream(srv, "delete"))


def test_salvage_without_the_stream_record_takes_backup_json(
    srv: ServerProcess, big: Backup, tmp_path: Path
) -> None:
    copy, layout, hit = damaged_copy(big, tmp_path, "first")
    assert hit == 0
    result = run_cli(srv, "stream", "restore", str(copy), "--salvage")
    assert result.exit_code == 0, result.output
    lost = f"1-{layout[1].first_seq - 1}"
    warning = " ".join(result.stderr.split())
    assert "Warning" in warning and f"sequences {lost}," in warning, warning
    assert "the stream record was lost" in warning, warning
    assert f"Restored stream BIG: {MESSAGES - layout[0].messages:,}" in result.stdout
    info = asyncio.run(_stream(srv, "info"))
    assert info.config.metadata[SALVAGED_KEY] == lost
    assert info.config.subjects == ["big.>"]
    assert info.state.consumer_count == 0  # the consumer record was in frame 0
    got = asyncio.run(_read_all(srv))
    assert got == {s: m for s, m in big.messages.items() if s >= layout[1].first_seq}
    asyncio.run(_stream(srv, "delete"))


def test_salvage_of_an_intact_archive_is_a_plain_restore(srv: ServerProcess, big: Backup) -> None:
    result = run_cli(srv, "stream", "restore", str(big.directory), "--salvage", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["salvage"]["damaged"] == [] and report["salvage"]["lost_messages"] == 0
    assert "Warning" not in result.stderr
    info = asyncio.run(_stream(srv, "info"))
    assert SALVAGED_KEY not in (info.config.metadata or {})
    assert info.state.messages == MESSAGES and info.state.consumer_count == 1
    asyncio.run(_stream(srv, "delete"))


def test_salvage_refuses_a_nats_archive(srv: ServerProcess, tmp_path: Path) -> None:
    (tmp_path / NATS_ARCHIVE_FILE).write_bytes(b"")
    (tmp_path / "backup.json").write_text(json.dumps({"config": {"name": "X"}, "state": {}}))
    result = run_cli(srv, "stream", "restore", str(tmp_path), "--salvage")
    assert result.exit_code == 1
    assert "only Headwater archives" in " ".join(result.output.split())
