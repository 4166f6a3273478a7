"""The per-backup checks (what each Spark task runs), without Spark: real backups from a
real headwater-server, then one fault at a time."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from verify.backup_faults import (
    Backups,
    Contents,
    ack_floor_beyond_last,
    copy_backup,
    drop_message,
    drop_message_record,
    flip_byte,
    read_contents,
    rewrite,
    swap_message_records,
    truncate,
    with_state,
)

from headwater.archive import ArchivedConsumer, ArchivedStream
from headwater.verify import Kind, VerifyError, find_backups, verify_backup
from headwater.verify.backupdir import ARCHIVE_FILE, BACKUP_FILE, NATS_ARCHIVE_FILE
from headwater.verify.findings import MAX_FINDINGS_PER_KIND, FindingLog


def kinds(directory: Path) -> set[str]:
    return {f.kind for f in verify_backup(str(directory)).findings}


def faulty(backups: Backups, tmp_path: Path, name: str = "ORDERS") -> Path:
    return copy_backup(backups[name], tmp_path / f"{name.lower()}-copy")


@pytest.mark.parametrize("name", ["ORDERS", "CACHE", "EMPTY", "ORIGIN", "MIRROR", "ORDERS-AFTER"])
def test_clean_backup_has_no_findings(backups: Backups, name: str) -> None:
    """File and memory streams (their byte accounting differs), an empty stream, a mirror."""
    report = verify_backup(str(backups[name]))
    assert report.findings == []
    assert report.complete
    contents = read_contents(backups[name])
    assert report.messages == len(contents.messages)
    assert report.consumers == len(contents.consumers)
    assert report.stream == contents.stream.name


def test_clean_report_counts(backups: Backups) -> None:
    report = verify_backup(str(backups["ORDERS"]))
    assert (report.messages, report.consumers) == (34, 2)
    assert (report.first_seq, report.last_seq) == (2, 38)
    assert report.archive_bytes == (backups["ORDERS"] / ARCHIVE_FILE).stat().st_size


def test_flipped_byte(backups: Backups, tmp_path: Path) -> None:
    copy = faulty(backups, tmp_path)
    flip_byte(copy)
    report = verify_backup(str(copy))
    assert [f.kind for f in report.findings] == [Kind.ARCHIVE_CHECKSUM]
    assert "frame 0" in report.findings[0].detail
    assert not report.complete


def test_flipped_byte_in_the_file_header(backups: Backups, tmp_path: Path) -> None:
    copy = faulty(backups, tmp_path)
    flip_byte(copy, 9)
    assert kinds(copy) == {Kind.ARCHIVE_CHECKSUM}


def test_truncated_archive(backups: Backups, tmp_path: Path) -> None:
    copy = faulty(backups, tmp_path)
    truncate(copy)
    assert kinds(copy) == {Kind.ARCHIVE_TRUNCATED}


def test_dropped_record_inside_a_frame(backups: Backups, tmp_path: Path) -> None:
    copy = faulty(backups, tmp_path)
    drop_message_record(copy)
    report = verify_backup(str(copy))
    assert [f.kind for f in report.findings] == [Kind.ARCHIVE_MALFORMED]
    assert "END record" in report.findings[0].detail


def test_reordered_records(backups: Backups, tmp_path: Path) -> None:
    copy = faulty(backups, tmp_path)
    swap_message_records(copy)
    report = verify_backup(str(copy))
    assert [f.kind for f in report.findings] == [Kind.ARCHIVE_MALFORMED]
    assert "ascend" in report.findings[0].detail


def test_dropped_message_rewritten_consistently(backups: Backups, tmp_path: Path) -> None:
    """The archive is well formed (its END agrees), but it no longer matches its state."""
    copy = faulty(backups, tmp_path)
    drop_message(copy, 11)
    found = verify_backup(str(copy)).findings
    assert {f.kind for f in found} == {
        Kind.MESSAGE_COUNT,
        Kind.DELETED_COUNT,
        Kind.BYTE_COUNT,
        Kind.SUBJECT_COUNT,
    }
    subject = next(f for f in found if f.kind == Kind.SUBJECT_COUNT)
    assert "orders.3" in subject.detail  # message 11 was published on orders.3


def test_ack_floor_beyond_last_sequence(backups: Backups, tmp_path: Path) -> None:
    copy = faulty(backups, tmp_path)
    floor = ack_floor_beyond_last(copy)
    found = verify_backup(str(copy)).findings
    assert {f.kind for f in found} == {Kind.CONSUMER_STATE}
    details = " | ".join(f.detail for f in found)
    assert f"ack floor {floor} is beyond the stream's last sequence 40" in details
    assert "consumer WORK" in details
    assert "pending sequence" in details  # WORK's pending messages now lie below the floor


def test_pending_outside_the_acked_range(backups: Backups, tmp_path: Path) -> None:
    copy = faulty(backups, tmp_path)

    def edit(c: Contents) -> Contents:
        c.consumers = [
            with_state(x, pending=[*x.state["pending"], [39, 9, 0]]) if x.name == "WORK" else x
            for x in c.consumers
        ]
        return c

    rewrite(copy, edit)
    found = verify_backup(str(copy)).findings
    assert [(f.kind, f.seq) for f in found] == [(Kind.CONSUMER_STATE, 39)]


def test_delivered_beyond_last_sequence(backups: Backups, tmp_path: Path) -> None:
    copy = faulty(backups, tmp_path, "CACHE")

    def edit(c: Contents) -> Contents:
        c.consumers = [
            with_state(x, delivered={"consumer_seq": 99, "stream_seq": 99}) for x in c.consumers
        ]
        return c

    rewrite(copy, edit)
    found = verify_backup(str(copy)).findings
    assert [f.kind for f in found] == [Kind.CONSUMER_STATE]
    assert "delivered sequence 99 is beyond the stream's last sequence 25" in found[0].detail


def test_state_counts_differ(backups: Backups, tmp_path: Path) -> None:
    """A stream record whose state disagrees with its messages (and with backup.json)."""
    copy = faulty(backups, tmp_path, "CACHE")

    def edit(c: Contents) -> Contents:
        state = c.stream.state
        c.stream = with_state(c.stream, bytes=state["bytes"] + 1, first_seq=5)
        return c

    rewrite(copy, edit)
    found = verify_backup(str(copy)).findings
    assert {f.kind for f in found} == {
        Kind.BYTE_COUNT,
        Kind.SEQUENCE_RANGE,
        Kind.METADATA_MISMATCH,
    }
    assert sorted(f.seq for f in found if f.kind == Kind.SEQUENCE_RANGE) == [1, 2, 3, 4]


def test_invalid_stream_config(backups: Backups, tmp_path: Path) -> None:
    copy = faulty(backups, tmp_path)

    def edit(c: Contents) -> Contents:
        config = c.stream.config | {"discard_new_per_subject": True}  # needs discard: new
        c.stream = ArchivedStream(c.stream.name, c.stream.created_ns, config, c.stream.state)
        return c

    rewrite(copy, edit)
    found = verify_backup(str(copy)).findings
    assert [f.kind for f in found] == [Kind.STREAM_CONFIG]
    assert "discard_new_per_subject" in found[0].detail


def test_invalid_consumer_config(backups: Backups, tmp_path: Path) -> None:
    copy = faulty(backups, tmp_path)

    def edit(c: Contents) -> Contents:
        c.consumers = [
            ArchivedConsumer(x.name, x.created_ns, x.config | {"ack_policy": "sometimes"}, x.state)
            for x in c.consumers
        ]
        return c

    rewrite(copy, edit)
    assert kinds(copy) == {Kind.CONSUMER_CONFIG}


def test_missing_files(backups: Backups, tmp_path: Path) -> None:
    no_json = faulty(backups, tmp_path)
    (no_json / BACKUP_FILE).unlink()
    assert kinds(no_json) == {Kind.BACKUP_UNREADABLE}
    no_archive = copy_backup(backups["CACHE"], tmp_path / "no-archive")
    (no_archive / ARCHIVE_FILE).unlink()
    report = verify_backup(str(no_archive))
    assert [f.detail for f in report.findings] == [
        f"the archive is missing (neither {ARCHIVE_FILE} nor {NATS_ARCHIVE_FILE})"
    ]


def test_not_an_archive(tmp_path: Path) -> None:
    (tmp_path / ARCHIVE_FILE).write_bytes(b"PK\x03\x04 not ours")
    (tmp_path / BACKUP_FILE).write_text('{"config": {"name": "X"}, "state": {}}')
    report = verify_backup(str(tmp_path))
    assert [f.kind for f in report.findings] == [Kind.ARCHIVE_MALFORMED]
    assert report.stream == "X"  # from backup.json: the archive has no stream record


def test_find_backups(backups: Backups, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The parent of all the backups: each once, sorted, none twice when also named.
    found = find_backups([backups.root, backups["CACHE"]])
    assert found == sorted(str(p) for p in backups.dirs.values())
    # Relative paths come back absolute (executors elsewhere have another cwd).
    monkeypatch.chdir(backups.root)
    assert find_backups(["cache", "./cache/"]) == [str(backups["CACHE"])]
    with pytest.raises(VerifyError, match="does not exist"):
        find_backups([tmp_path / "nope"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(VerifyError, match="holds no backup"):
        find_backups([tmp_path / "empty"])


def test_findings_are_capped_per_kind() -> None:
    log = FindingLog("b")
    for seq in range(MAX_FINDINGS_PER_KIND + 5):
        log.add(Kind.SEQUENCE_RANGE, f"bad {seq}", seq)
    log.add(Kind.MESSAGE_COUNT, "count")
    found = log.close()
    assert len(found) == MAX_FINDINGS_PER_KIND + 2
    assert found[-1].detail == f"5 more {Kind.SEQUENCE_RANGE} findings not listed"


def test_verify_package_imports_only_the_archive_and_the_models() -> None:
    """Executors import headwater.verify: never the engine, the CLI or the NATS client."""
    package = Path(verify_backup.__code__.co_filename).parent
    allowed = ("headwater.archive", "headwater.control.models", "headwater.verify")
    offenders = []
    modules = sorted(package.glob("*.py"))
    assert {"checks.py", "job.py", "compare.py"} <= {p.name for p in modules}
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [
                f"{path.name}: {name}"
                for name in names
                if name.startswith("headwater") and not name.startswith(allowed)
            ]
    assert offenders == []


def test_no_java_is_one_error_line(backups: Backups, tmp_path: Path) -> None:
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-java")}
    done = subprocess.run(
        [sys.executable, "-m", "headwater.verify.job", str(backups["CACHE"])],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "Error: Spark did not start (Spark needs Java 17 or later)" in done.stderr
    assert "Traceback" not in done.stderr


def test_state_of_the_wrong_type_is_a_finding(backups: Backups, tmp_path: Path) -> None:
    """One backup with a nonsensical state must not fail a job over thousands."""
    copy = faulty(backups, tmp_path, "CACHE")

    def edit(c: Contents) -> Contents:
        c.stream = with_state(c.stream, last_seq="lots")
        return c

    rewrite(copy, edit)
    found = verify_backup(str(copy)).findings
    assert [f.kind for f in found] == [Kind.ARCHIVE_MALFORMED]
    assert "lots" in found[0].detail
