"""The Spark job end to end on local[2], one SparkSession for the module: injected faults
found, 100 backups in one job, comparisons, the Parquet/JSON report, the CLI and the
spark-submit entry point."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner
from verify.backup_faults import (
    FLEET_SIZE,
    Backups,
    ack_floor_beyond_last,
    change_payload,
    copy_backup,
    drop_message_record,
    flip_byte,
    swap_message_records,
    truncate,
)

from headwater.cli.app import app
from headwater.verify import BackupReport, Kind, VerifyError
from headwater.verify.compare import compare_backups
from headwater.verify.job import main as job_main
from headwater.verify.job import plan_tasks, run_verification
from headwater.verify.report import report_name


def jobs_run(spark: SparkSession, group: str) -> int:
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


def test_injected_faults_found_in_one_job(
    spark: SparkSession, backups: Backups, tmp_path: Path
) -> None:
    root = tmp_path / "mixed"
    clean = copy_backup(backups["ORDERS"], root / "clean")
    faults = {
        "flipped": (flip_byte, Kind.ARCHIVE_CHECKSUM),
        "truncated": (truncate, Kind.ARCHIVE_TRUNCATED),
        "dropped": (drop_message_record, Kind.ARCHIVE_MALFORMED),
        "reordered": (swap_message_records, Kind.ARCHIVE_MALFORMED),
        "ackfloor": (ack_floor_beyond_last, Kind.CONSUMER_STATE),
    }
    for name, (inject, _kind) in faults.items():
        inject(copy_backup(backups["ORDERS"], root / name))
    spark.sparkContext.setJobGroup("faults", "faults")
    result = run_verification(spark, [root])
    assert jobs_run(spark, "faults") == 1
    by_dir = {Path(r.backup).name: r for r in result.reports}
    assert sorted(by_dir) == sorted([*faults, "clean"])
    assert by_dir["clean"].findings == []
    assert by_dir["clean"].backup == str(clean)
    for name, (_inject, kind) in faults.items():
        found = by_dir[name].findings
        assert found, name
        assert {f.kind for f in found} == {kind}, name
        assert all(f.backup == str(root / name) and f.stream == "ORDERS" for f in found)
    assert "ascend" in by_dir["reordered"].findings[0].detail
    assert "END record" in by_dir["dropped"].findings[0].detail
    assert not result.ok


def test_hundred_backups_in_one_job(spark: SparkSession, fleet: Path) -> None:
    spark.sparkContext.setJobGroup("fleet", "fleet")
    began = time.perf_counter()
    result = run_verification(spark, [fleet])
    elapsed = time.perf_counter() - began
    assert jobs_run(spark, "fleet") == 1
    assert len(result.reports) == FLEET_SIZE
    assert result.ok, result.findings[:3]
    assert {r.stream for r in result.reports} == {f"F{n:03d}" for n in range(FLEET_SIZE)}
    assert all(r.messages == 3 and r.complete for r in result.reports)
    assert elapsed < 30, elapsed


def test_tasks_balance_archive_bytes(tmp_path: Path) -> None:
    sizes = {"a": 900, "b": 500, "c": 400, "d": 100, "e": 100}
    for name, size in sizes.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "stream.hwarc").write_bytes(b"x" * size)
    groups = plan_tasks([str(tmp_path / n) for n in sizes], slots=1)
    assert len(groups) == 4
    loads = sorted(sum(sizes[Path(b).name] for b in g) for g in groups)
    assert loads == [200, 400, 500, 900]  # the two smallest share a task
    assert sorted(b for g in groups for b in g) == sorted(str(tmp_path / n) for n in sizes)


def test_compare_identical_mirror(spark: SparkSession, backups: Backups) -> None:
    result = run_verification(spark, [], (backups["ORIGIN"], backups["MIRROR"]))
    assert result.ok
    assert result.comparison is not None and result.comparison.identical
    assert len(result.reports) == 2


def test_compare_before_and_after(spark: SparkSession, backups: Backups, tmp_path: Path) -> None:
    before, after = backups["ORDERS"], copy_backup(backups["ORDERS-AFTER"], tmp_path / "after")
    change_payload(after, 5, b"tampered")
    result = run_verification(spark, [], (before, after))
    cmp = result.comparison
    assert cmp is not None and not cmp.identical
    assert cmp.differences == {
        Kind.COMPARE_EXTRA: 2,
        Kind.COMPARE_MISSING: 1,
        Kind.COMPARE_PAYLOAD: 1,
    }
    assert sorted((f.kind, f.seq) for f in cmp.findings) == [
        (Kind.COMPARE_EXTRA, 41),
        (Kind.COMPARE_EXTRA, 42),
        (Kind.COMPARE_MISSING, 12),
        (Kind.COMPARE_PAYLOAD, 5),
    ]
    assert all(f.backup == str(after) for f in cmp.findings)
    # The tampered copy is itself consistent (its bytes changed, so its state disagrees).
    after_report = next(r for r in result.reports if r.backup == str(after))
    assert {f.kind for f in after_report.findings} == {Kind.BYTE_COUNT}


def test_compare_needs_backup_directories(spark: SparkSession, backups: Backups) -> None:
    with pytest.raises(VerifyError, match="--compare"):
        run_verification(spark, [], (backups.root, backups["ORDERS"]))


def test_report_directory(spark: SparkSession, backups: Backups, tmp_path: Path) -> None:
    root = tmp_path / "in"
    copy_backup(backups["CACHE"], root / "good")
    bad = copy_backup(backups["ORDERS"], root / "bad")
    floor = ack_floor_beyond_last(bad)
    out = tmp_path / "report"
    code = job_main([str(root), "--report", str(out), "--master", "local[2]"])
    assert code == 1
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["ok"], summary["backups"]) == (False, 2)
    reports = sorted((out / "backups").glob("*.json"))
    assert len(reports) == 2
    per_backup = {r["backup"]: r for r in (json.loads(p.read_text()) for p in reports)}
    assert per_backup[str(root / "good")]["ok"] is True
    assert per_backup[str(bad)]["findings"][0]["kind"] == Kind.CONSUMER_STATE
    table = spark.read.parquet(str(out / "findings.parquet"))
    assert table.columns == ["backup", "stream", "kind", "detail", "seq"]
    rows = table.collect()
    assert {(r.backup, r.stream, r.kind) for r in rows} == {(str(bad), "ORDERS", "consumer_state")}
    assert floor in {r.seq for r in rows}
    # A clean run still writes the table's columns, with no rows.
    clean_out = tmp_path / "clean-report"
    assert job_main([str(root / "good"), "--report", str(clean_out)]) == 0
    empty = spark.read.parquet(str(clean_out / "findings.parquet"))
    assert (empty.columns, empty.count()) == (table.columns, 0)
    assert report_name(BackupReport(backup=str(bad))) in {p.name for p in reports}


def test_cli_verify(spark: SparkSession, backups: Backups, tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["verify", str(backups["CACHE"]), str(backups["EMPTY"])])
    assert ok.exit_code == 0, ok.output
    assert "2 backups verified, 0 with findings" in ok.output
    bad = copy_backup(backups["CACHE"], tmp_path / "bad")
    truncate(bad)
    failed = runner.invoke(app, ["verify", "--json", str(bad), str(backups["CACHE"])])
    assert failed.exit_code == 1
    body = json.loads(failed.stdout)
    assert (body["ok"], body["backups"], body["findings"]) == (False, 2, 1)
    assert body["reports"][0]["findings"][0]["kind"] == Kind.ARCHIVE_TRUNCATED
    compared = runner.invoke(
        app,
        ["--json", "verify", "--compare", str(backups["ORIGIN"]), str(backups["MIRROR"])],
    )
    assert compared.exit_code == 0, compared.output
    assert json.loads(compared.stdout)["comparison"]["identical"] is True
    missing = runner.invoke(app, ["verify", str(tmp_path / "nope")])
    assert missing.exit_code == 1
    assert "does not exist" in missing.output
    nothing = runner.invoke(app, ["verify"])
    assert nothing.exit_code == 1
    assert "no backup to verify" in nothing.output


def test_job_entry_point_json(
    spark: SparkSession, backups: Backups, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m headwater.verify.job`` (the spark-submit application) with --json."""
    assert job_main([str(backups.root), "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert (body["ok"], body["backups"], body["findings"]) == (True, len(backups.dirs), 0)
    assert {r["stream"] for r in body["reports"]} == {
        "ORDERS",
        "CACHE",
        "EMPTY",
        "ORIGIN",
        "MIRROR",
    }


def test_compare_lists_the_lowest_sequences_and_counts_the_rest(
    spark: SparkSession, backups: Backups
) -> None:
    """Two unrelated streams: ORDERS (2..38 less 7, 8, 20) against CACHE (1..25 less 10)."""
    cmp = compare_backups(spark, str(backups["ORDERS"]), str(backups["CACHE"]), limit=3)
    assert cmp.differences == {
        Kind.COMPARE_EXTRA: 4,  # 1, 7, 8, 20
        Kind.COMPARE_MISSING: 14,  # 10, 26..38
        Kind.COMPARE_SUBJECT: 20,  # the rest of 2..25
    }
    listed = [(f.kind, f.seq) for f in cmp.findings if f.seq is not None]
    assert listed == [
        (Kind.COMPARE_EXTRA, 1),
        (Kind.COMPARE_EXTRA, 7),
        (Kind.COMPARE_EXTRA, 8),
        (Kind.COMPARE_MISSING, 10),
        (Kind.COMPARE_MISSING, 26),
        (Kind.COMPARE_MISSING, 27),
        (Kind.COMPARE_SUBJECT, 2),
        (Kind.COMPARE_SUBJECT, 3),
        (Kind.COMPARE_SUBJECT, 4),
    ]
    rest = sorted(f.detail.split(" more")[0] for f in cmp.findings if f.seq is None)
    assert rest == ["1", "11", "17"]


def test_restored_backup_is_clean_and_identical(
    spark: SparkSession, backups: Backups, restored: Path
) -> None:
    """Backup -> restore on another server -> backup again: the second backup verifies clean
    and holds the same sequences, subjects, payloads and headers as the first."""
    result = run_verification(spark, [], (backups["ORDERS"], restored))
    assert result.findings == []
    assert result.comparison is not None and result.comparison.identical
    first, again = result.reports
    assert (again.messages, again.consumers, again.last_seq) == (34, 2, 38)
    assert (first.messages, first.consumers) == (again.messages, again.consumers)
