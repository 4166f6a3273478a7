"""Verifying nats-server 2.15 backups (``NATSARC1`` in S2, ``stream.tar.s2``): real backups
from a real nats-server, clean and then with one fault at a time, through the per-backup
checks and through the Spark job on local[2]."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner
from verify import nats_faults as nf
from verify.backup_faults import Backups
from verify.nats_faults import NAMES, copy_backup

from headwater.archive import ArchivedConsumer, ArchivedMessage, NatsArchiveReader
from headwater.cli.app import app
from headwater.testing import ServerProcess
from headwater.verify import Kind, find_backups, verify_backup
from headwater.verify.backupdir import (
    ARCHIVE_FILE,
    BACKUP_FILE,
    NATS_ARCHIVE_FILE,
    archive_path,
    is_backup_dir,
)
from headwater.verify.findings import BackupReport
from headwater.verify.job import main as job_main
from headwater.verify.job import run_verification


@pytest.fixture(scope="module")
def nats_backups(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backups]:
    srv = ServerProcess("nats", jetstream=True)
    srv.start()
    try:
        yield nf.make_nats_backups(srv, tmp_path_factory.mktemp("nats-backups"))
    finally:
        srv.cleanup()


def meta(backup: Path) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((backup / BACKUP_FILE).read_text())
    return value


def contents(backup: Path) -> tuple[list[ArchivedConsumer], list[ArchivedMessage]]:
    config = meta(backup)["config"]
    with open(backup / NATS_ARCHIVE_FILE, "rb") as fh:
        records = list(NatsArchiveReader(fh, config["name"], config))
    return (
        [r for r in records if isinstance(r, ArchivedConsumer)],
        [r for r in records if isinstance(r, ArchivedMessage)],
    )


def faulty(nats_backups: Backups, tmp_path: Path, name: str = "ORDERS") -> Path:
    return copy_backup(nats_backups[name], tmp_path / f"{name.lower()}-copy")


def kinds(report: BackupReport) -> list[str]:
    return [f.kind for f in report.findings]


# --------------------------------------------------------------------------- clean backups


@pytest.mark.parametrize("name", NAMES)
def test_clean_nats_backup_has_no_findings(nats_backups: Backups, name: str) -> None:
    """File and memory streams, gaps, an empty and a purged stream, consumers, payloads of
    900 KiB spanning S2 blocks: every check runs and none fires."""
    backup = nats_backups[name]
    assert archive_path(backup) == backup / NATS_ARCHIVE_FILE
    report = verify_backup(str(backup))
    assert report.findings == []
    assert report.complete
    assert report.format == "nats"
    state = meta(backup)["state"]
    consumers, messages = contents(backup)
    assert report.messages == len(messages) == state["messages"]
    assert report.consumers == len(consumers) == state.get("consumer_count", 0)
    assert report.stream == name
    assert report.archive_bytes == (backup / NATS_ARCHIVE_FILE).stat().st_size
    assert report.to_dict()["format"] == "nats"


def test_clean_counts_match_the_headwater_server_backup(
    nats_backups: Backups, backups: Backups
) -> None:
    """The same publishes and deletes on both servers: the same report (headwater's last
    message 38 of a state whose last_seq is 40, two consumers, 34 messages)."""
    ours = verify_backup(str(backups["ORDERS"]))
    theirs = verify_backup(str(nats_backups["ORDERS"]))
    assert (ours.format, theirs.format) == ("headwater", "nats")
    fields = ("messages", "consumers", "first_seq", "last_seq", "complete", "findings")
    assert [getattr(theirs, f) for f in fields] == [34, 2, 2, 38, True, []]
    assert [getattr(ours, f) for f in fields] == [getattr(theirs, f) for f in fields]


def test_large_payloads_span_s2_blocks(nats_backups: Backups) -> None:
    """The BIG archive really exercises the decoder: several data chunks, both types."""
    chunks = nf.data_chunks(nats_backups["BIG"])
    assert len(chunks) >= 3
    assert {c.kind for c in chunks} == {0x00, 0x01}
    _consumers, messages = contents(nats_backups["BIG"])
    assert [m.seq for m in messages] == [1, 3, 4, 5, 6, 8, 9, 10, 11]
    assert all(len(m.data) >= nf.BIG_PAYLOAD - 6 for m in messages)


def test_reencoded_archive_is_clean(nats_backups: Backups, tmp_path: Path) -> None:
    """The test-only encoder writes a valid S2 stream: the same entries, re-encoded in
    uncompressed chunks, verify clean (so the faults below are the only faults)."""
    copy = faulty(nats_backups, tmp_path, "BIG")
    before = (copy / NATS_ARCHIVE_FILE).read_bytes()
    nf.rewrite(copy, lambda entries: entries)
    assert (copy / NATS_ARCHIVE_FILE).read_bytes() != before
    assert {c.kind for c in nf.data_chunks(copy)} == {0x01}
    report = verify_backup(str(copy))
    assert (report.findings, report.complete, report.messages) == ([], True, 9)


# --------------------------------------------------------------------------- byte-level faults


def test_flipped_crc(nats_backups: Backups, tmp_path: Path) -> None:
    copy = faulty(nats_backups, tmp_path)
    nf.flip_crc(copy)
    report = verify_backup(str(copy))
    assert kinds(report) == [Kind.ARCHIVE_CHECKSUM]
    assert "S2 chunk 1: CRC-32C mismatch" in report.findings[0].detail
    assert not report.complete
    assert report.stream == "ORDERS"  # from backup.json: nothing of the archive was read


def test_flipped_payload_byte(nats_backups: Backups, tmp_path: Path) -> None:
    """A byte inside a large message's payload: only the chunk's CRC-32C can notice."""
    copy = faulty(nats_backups, tmp_path, "BIG")
    nf.flip_data(copy)
    report = verify_backup(str(copy))
    assert kinds(report) == [Kind.ARCHIVE_CHECKSUM]
    assert "CRC-32C mismatch" in report.findings[0].detail
    assert not report.complete
    # The consumer and the messages before the damaged chunk were read and checked.
    assert report.consumers == 1
    assert 0 < report.messages < 9


@pytest.mark.parametrize(
    "truncate", [nf.truncate_at_chunk, nf.truncate_inside_chunk, nf.drop_sentinel]
)
def test_truncated_before_the_sentinel(
    nats_backups: Backups, tmp_path: Path, truncate: Any
) -> None:
    copy = faulty(nats_backups, tmp_path, "BIG")
    truncate(copy)
    report = verify_backup(str(copy))
    assert kinds(report) == [Kind.ARCHIVE_TRUNCATED]
    assert not report.complete


def test_truncated_small_archive(nats_backups: Backups, tmp_path: Path) -> None:
    """ORDERS is one data chunk: cutting it leaves the S2 identifier only, or a partial one."""
    copy = faulty(nats_backups, tmp_path)
    nf.truncate_at_chunk(copy)
    report = verify_backup(str(copy))
    assert kinds(report) == [Kind.ARCHIVE_TRUNCATED]
    (copy / NATS_ARCHIVE_FILE).write_bytes(nf.S2_MAGIC[:6])
    assert kinds(verify_backup(str(copy))) == [Kind.ARCHIVE_TRUNCATED]


# --------------------------------------------------------------------------- semantic faults


def test_messages_out_of_order(nats_backups: Backups, tmp_path: Path) -> None:
    copy = faulty(nats_backups, tmp_path)
    seq, after = nf.swap_messages(copy)
    report = verify_backup(str(copy))
    assert kinds(report) == [Kind.ARCHIVE_MALFORMED]
    assert f"message {seq} after {after}" in report.findings[0].detail
    assert "ascend" in report.findings[0].detail


def test_ack_floor_beyond_last_sequence(nats_backups: Backups, tmp_path: Path) -> None:
    copy = faulty(nats_backups, tmp_path)
    floor = nf.ack_floor_beyond_last(copy)
    found = verify_backup(str(copy)).findings
    assert {f.kind for f in found} == {Kind.CONSUMER_STATE}
    details = " | ".join(f.detail for f in found)
    assert f"consumer WORK: ack floor {floor} is beyond the stream's last sequence 40" in details
    assert "pending sequence" in details  # WORK's pending messages now lie below the floor
    assert floor in {f.seq for f in found}


def test_dropped_message_rewritten_consistently(nats_backups: Backups, tmp_path: Path) -> None:
    """A well-formed archive missing message 11: the counts against the state find it."""
    copy = faulty(nats_backups, tmp_path)
    nf.drop_message(copy, 11)
    found = verify_backup(str(copy)).findings
    assert {f.kind for f in found} == {Kind.MESSAGE_COUNT, Kind.DELETED_COUNT, Kind.BYTE_COUNT}


def test_memory_stream_byte_accounting(nats_backups: Backups, tmp_path: Path) -> None:
    """CACHE is a memory stream (16 bytes a message): read as a file stream it would not add
    up, so the storage type really comes from backup.json's config."""
    copy = faulty(nats_backups, tmp_path, "CACHE")
    data = meta(copy)
    data["config"]["storage"] = "file"
    (copy / BACKUP_FILE).write_text(json.dumps(data))
    assert kinds(verify_backup(str(copy))) == [Kind.BYTE_COUNT]


def test_state_differs_from_backup_json(nats_backups: Backups, tmp_path: Path) -> None:
    copy = faulty(nats_backups, tmp_path, "CACHE")

    def edit(state: dict[str, Any]) -> None:
        state["bytes"] += 1

    nf.edit_json(copy, "state.json", edit)
    found = verify_backup(str(copy)).findings
    assert {f.kind for f in found} == {Kind.METADATA_MISMATCH, Kind.BYTE_COUNT}
    mismatch = next(f for f in found if f.kind == Kind.METADATA_MISMATCH)
    assert "state bytes" in mismatch.detail


def test_invalid_consumer_config(nats_backups: Backups, tmp_path: Path) -> None:
    copy = faulty(nats_backups, tmp_path)

    def edit(value: dict[str, Any]) -> None:
        value["config"]["ack_policy"] = "sometimes"

    nf.edit_json(copy, "consumers/IDLE", edit)
    found = verify_backup(str(copy)).findings
    assert [f.kind for f in found] == [Kind.CONSUMER_CONFIG]
    assert "consumer IDLE" in found[0].detail


def test_invalid_stream_config_in_backup_json(nats_backups: Backups, tmp_path: Path) -> None:
    """A nats-server archive's config is backup.json's: that is what is validated."""
    copy = faulty(nats_backups, tmp_path)
    data = meta(copy)
    data["config"]["discard_new_per_subject"] = True  # needs discard: new
    (copy / BACKUP_FILE).write_text(json.dumps(data))
    found = verify_backup(str(copy)).findings
    assert [f.kind for f in found] == [Kind.STREAM_CONFIG]


def test_nats_214_tar_backup_is_unsupported(nats_backups: Backups, tmp_path: Path) -> None:
    copy = faulty(nats_backups, tmp_path)
    nf.tar_backup(copy)
    report = verify_backup(str(copy))
    assert kinds(report) == [Kind.ARCHIVE_VERSION]
    assert "2.14" in report.findings[0].detail
    assert report.format == "nats"


# --------------------------------------------------------------------------- the directory


def test_both_archives_is_a_finding(
    nats_backups: Backups, backups: Backups, tmp_path: Path
) -> None:
    copy = faulty(nats_backups, tmp_path)
    (copy / ARCHIVE_FILE).write_bytes((backups["ORDERS"] / ARCHIVE_FILE).read_bytes())
    assert find_backups([tmp_path]) == [str(copy)]
    report = verify_backup(str(copy))
    assert kinds(report) == [Kind.BACKUP_UNREADABLE]
    assert "stream.hwarc and stream.tar.s2" in report.findings[0].detail
    assert report.archive_bytes == sum(
        (copy / n).stat().st_size for n in (ARCHIVE_FILE, NATS_ARCHIVE_FILE)
    )


def test_archive_alone_is_a_backup_directory(nats_backups: Backups, tmp_path: Path) -> None:
    """Without backup.json: that is the one finding; no config checks run on the missing
    config (and no byte accounting, which needs its storage type), the rest do."""
    copy = faulty(nats_backups, tmp_path, "CACHE")
    (copy / BACKUP_FILE).unlink()
    assert is_backup_dir(copy)
    assert find_backups([tmp_path]) == [str(copy)]
    report = verify_backup(str(copy))
    assert kinds(report) == [Kind.BACKUP_UNREADABLE]
    assert (report.complete, report.messages, report.consumers) == (True, 24, 1)
    nf.drop_message(copy, 3)  # the state checks still run without backup.json
    assert set(kinds(verify_backup(str(copy)))) == {
        Kind.BACKUP_UNREADABLE,
        Kind.MESSAGE_COUNT,
        Kind.DELETED_COUNT,
    }


def test_missing_archive(nats_backups: Backups, tmp_path: Path) -> None:
    copy = faulty(nats_backups, tmp_path)
    (copy / NATS_ARCHIVE_FILE).unlink()
    report = verify_backup(str(copy))
    assert kinds(report) == [Kind.BACKUP_UNREADABLE]
    assert "neither stream.hwarc nor stream.tar.s2" in report.findings[0].detail
    assert report.format == ""


def test_name_does_not_decide_the_format(nats_backups: Backups, tmp_path: Path) -> None:
    """Until every writer names them stream.tar.s2, a nats-server archive may be called
    stream.hwarc: it is read by its content."""
    copy = faulty(nats_backups, tmp_path)
    (copy / NATS_ARCHIVE_FILE).rename(copy / ARCHIVE_FILE)
    report = verify_backup(str(copy))
    assert (report.findings, report.format, report.messages) == ([], "nats", 34)


# --------------------------------------------------------------------------- the Spark job


FAULTS = {
    "crc": (nf.flip_crc, Kind.ARCHIVE_CHECKSUM),
    "truncated": (nf.truncate_at_chunk, Kind.ARCHIVE_TRUNCATED),
    "reordered": (nf.swap_messages, Kind.ARCHIVE_MALFORMED),
    "ackfloor": (nf.ack_floor_beyond_last, Kind.CONSUMER_STATE),
    "tar": (nf.tar_backup, Kind.ARCHIVE_VERSION),
}


def test_spark_job_finds_the_faults(
    spark: SparkSession, nats_backups: Backups, backups: Backups, tmp_path: Path
) -> None:
    """One job over clean nats-server backups of every stream, a headwater-server one and
    each fault: each backup gets exactly its finding."""
    root = tmp_path / "mixed"
    for name in NAMES:
        copy_backup(nats_backups[name], root / "clean" / name.lower())
    copy_backup(backups["ORDERS"], root / "headwater")
    for name, (inject, _kind) in FAULTS.items():
        inject(copy_backup(nats_backups["ORDERS"], root / name))
    spark.sparkContext.setJobGroup("nats-faults", "nats-faults")
    result = run_verification(spark, [root])
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup("nats-faults")) == 1
    by_dir = {Path(r.backup).relative_to(root).as_posix(): r for r in result.reports}
    assert sorted(by_dir) == sorted([*FAULTS, "headwater", *(f"clean/{n.lower()}" for n in NAMES)])
    for name in NAMES:
        report = by_dir[f"clean/{name.lower()}"]
        assert (report.findings, report.format, report.complete) == ([], "nats", True), name
    assert (by_dir["headwater"].findings, by_dir["headwater"].format) == ([], "headwater")
    for name, (_inject, kind) in FAULTS.items():
        found = by_dir[name].findings
        assert found and {f.kind for f in found} == {kind}, (name, found)
        assert all(f.backup == str(root / name) and f.stream == "ORDERS" for f in found)
    assert "CRC-32C" in by_dir["crc"].findings[0].detail
    assert "ascend" in by_dir["reordered"].findings[0].detail
    assert not result.ok


def test_spark_compare_across_formats(
    spark: SparkSession, nats_backups: Backups, backups: Backups, tmp_path: Path
) -> None:
    """The same ORDERS on headwater-server and on nats-server hold the same messages; a
    changed payload in the nats-server archive is found by the comparison."""
    result = run_verification(spark, [], (backups["ORDERS"], nats_backups["ORDERS"]))
    assert result.ok, result.findings
    assert result.comparison is not None and result.comparison.identical
    changed = faulty(nats_backups, tmp_path)

    def edit(entries: list[nf.Entry]) -> list[nf.Entry]:
        return [nf.Entry(e.name, e.ts, e.seq, e.hdr, b"x") if e.seq == 5 else e for e in entries]

    nf.rewrite(changed, edit)
    result = run_verification(spark, [], (backups["ORDERS"], changed))
    cmp = result.comparison
    assert cmp is not None
    assert cmp.differences == {Kind.COMPARE_PAYLOAD: 1}
    assert [(f.kind, f.seq) for f in cmp.findings] == [(Kind.COMPARE_PAYLOAD, 5)]


def test_cli_and_job_entry_point(
    spark: SparkSession,
    nats_backups: Backups,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert job_main([str(nats_backups.root), "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert (body["ok"], body["backups"], body["findings"]) == (True, len(NAMES), 0)
    assert {r["format"] for r in body["reports"]} == {"nats"}
    bad = faulty(nats_backups, tmp_path, "BIG")
    nf.flip_data(bad)
    out = CliRunner().invoke(app, ["verify", str(bad), str(nats_backups["CACHE"])])
    assert out.exit_code == 1
    assert "(nats-server archive)" in out.output
    assert "archive_checksum: S2 chunk" in out.output
    assert "2 backups verified, 1 with findings" in out.output
