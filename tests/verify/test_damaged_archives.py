"""A damaged archive is reported by what was read and what was lost, not as an empty stream.

The backup is made by ``headwater stream backup`` from a real headwater-server, of a stream
large enough for several 1 MiB frames (random, incompressible payloads). One byte is flipped
in a copy; the verifier must name the frame, its byte range and the sequences read on either
side of it, keep reading the frames after it, and fail. The command-line tests also check what
``headwater verify`` prints on stderr: its progress, and Spark's start-up lines only with -v.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nats
import pytest
from verify.backup_faults import copy_backup

from headwater.testing import ServerProcess
from headwater.verify import Kind, verify_backup
from headwater.verify.backupdir import ARCHIVE_FILE
from support.archiveframes import FRAME_HEADER, Frame, flip, frames

MESSAGES = 3500
PAYLOAD = 1024


def headwater(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    script = shutil.which("headwater")
    command = [script] if script else [sys.executable, "-m", "headwater.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=timeout)


async def _fill(url: str) -> None:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        js = nc.jetstream()
        await js.add_stream(name="BIG", subjects=["big.>"])
        await js.add_consumer("BIG", durable_name="READER")
        # Publish in bounded batches, awaiting each batch's acks.
        for start in range(0, MESSAGES, 250):
            acks = [
                js.publish(f"big.{i % 7}", os.urandom(PAYLOAD))
                for i in range(start, min(start + 250, MESSAGES))
            ]
            await asyncio.gather(*acks)
    finally:
        await nc.close()


@pytest.fixture(scope="module")
def big_backup(backup_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Path:
    asyncio.run(_fill(backup_server.url))
    target = tmp_path_factory.mktemp("big") / "big"
    done = headwater("-s", backup_server.url, "stream", "backup", "BIG", str(target))
    assert done.returncode == 0, done.stderr
    return target


def damaged_in_the_middle(big_backup: Path, tmp_path: Path) -> tuple[Path, list[Frame], int]:
    """A copy with one byte flipped in the middle of the archive; the frames and the index of
    the frame holding that byte."""
    copy = copy_backup(big_backup, tmp_path / "damaged")
    layout = frames(copy)
    middle = (copy / ARCHIVE_FILE).stat().st_size // 2
    flip(copy, middle)
    hit = next(i for i, f in enumerate(layout) if f.start <= middle <= f.end)
    assert 0 < hit < len(layout) - 1, "the flipped byte must be in an inner frame"
    return copy, layout, hit


def test_the_backup_spans_several_frames(big_backup: Path) -> None:
    layout = frames(big_backup)
    assert len(layout) >= 3
    assert sum(f.messages for f in layout) == MESSAGES
    assert verify_backup(str(big_backup)).findings == []


def test_flipped_byte_names_the_frame_range_and_the_sequences_around_it(
    big_backup: Path, tmp_path: Path
) -> None:
    copy, layout, hit = damaged_in_the_middle(big_backup, tmp_path)
    bad, before, after = layout[hit], layout[hit - 1], layout[hit + 1]
    report = verify_backup(str(copy))
    assert not report.ok and not report.complete
    checksum = [f for f in report.findings if f.kind == Kind.ARCHIVE_CHECKSUM]
    assert len(checksum) == 1, report.findings
    detail = checksum[0].detail
    assert f"frame {hit} (bytes {bad.start}-{bad.end})" in detail, detail
    assert f"after seq {before.last_seq}" in detail, detail
    assert f"seq {after.first_seq}" in detail, detail
    assert checksum[0].seq == before.last_seq + 1
    # Every other frame was read: the messages before and after the damaged one count.
    assert report.messages == MESSAGES - bad.messages
    assert (report.first_seq, report.last_seq) == (1, MESSAGES)
    assert report.consumers == 1
    assert report.damaged == [
        {
            "frame": hit,
            "first_byte": bad.start,
            "last_byte": bad.end,
            "reason": "checksum mismatch",
            "after_seq": before.last_seq,
            "next_seq": after.first_seq,
        }
    ]
    # The END record was read: it says how many messages the damage cost.
    assert f"{bad.messages} of {MESSAGES} messages" in detail or any(
        f"{bad.messages} of {MESSAGES} messages" in f.detail for f in report.findings
    ), report.findings
    # No count check can pass on a partly read archive: they are not run.
    assert {f.kind for f in report.findings} == {Kind.ARCHIVE_CHECKSUM}


def test_flipped_byte_in_the_first_frame_loses_the_stream_record(
    big_backup: Path, tmp_path: Path
) -> None:
    copy = copy_backup(big_backup, tmp_path / "first")
    layout = frames(copy)
    flip(copy, layout[0].start + FRAME_HEADER.size + 100)
    report = verify_backup(str(copy))
    assert report.stream == "BIG"  # named from backup.json
    detail = next(f.detail for f in report.findings if f.kind == Kind.ARCHIVE_CHECKSUM)
    assert f"frame 0 (bytes {layout[0].start}-{layout[0].end})" in detail, detail
    assert "stream record" in detail, detail
    assert f"seq {layout[1].first_seq}" in detail, detail
    assert report.messages == MESSAGES - layout[0].messages
    assert report.first_seq == layout[1].first_seq


def test_flipped_byte_in_the_last_frame_loses_the_end(big_backup: Path, tmp_path: Path) -> None:
    copy = copy_backup(big_backup, tmp_path / "last")
    layout = frames(copy)
    flip(copy, layout[-1].end - 3)
    report = verify_backup(str(copy))
    assert [f.kind for f in report.findings] == [Kind.ARCHIVE_CHECKSUM], report.findings
    detail = report.findings[0].detail
    assert f"after seq {layout[-2].last_seq}" in detail, detail
    assert "to the end" in detail, detail
    assert report.messages == MESSAGES - layout[-1].messages


def test_cli_reports_the_damage_and_fails(big_backup: Path, tmp_path: Path) -> None:
    copy, layout, hit = damaged_in_the_middle(big_backup, tmp_path)
    done = headwater("verify", "--master", "local[2]", str(copy))
    assert done.returncode == 1, done.stderr
    bad = layout[hit]
    assert f"frame {hit} (bytes {bad.start}-{bad.end})" in done.stdout, done.stdout
    assert re.search(r"\b0 messages", done.stdout) is None, done.stdout
    assert f"read {MESSAGES - bad.messages} of {MESSAGES} messages" in done.stdout, done.stdout


def spark_lines(stderr: str) -> list[str]:
    markers = (" WARN ", "log4j", "NativeCodeLoader", "setLogLevel", "incubator modules")
    return [line for line in stderr.splitlines() if any(m in line for m in markers)]


def test_clean_verify_keeps_spark_quiet_and_shows_progress(big_backup: Path) -> None:
    done = headwater("verify", "--json", "--master", "local[2]", str(big_backup))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["ok"] is True  # stdout is the JSON alone
    assert spark_lines(done.stderr) == [], done.stderr
    # Progress: what is read, per backup and stream, on stderr.
    assert str(big_backup) in done.stderr and "BIG" in done.stderr, done.stderr


def test_verbose_verify_shows_spark_lines(big_backup: Path) -> None:
    done = headwater("verify", "-v", "--master", "local[2]", str(big_backup))
    assert done.returncode == 0, done.stderr
    assert spark_lines(done.stderr), done.stderr
