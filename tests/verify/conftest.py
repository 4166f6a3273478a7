"""Real backups, made once per test session from one headwater-server, for the verification
tests (tests/verify/backup_faults.py makes them and injects the faults)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from verify.backup_faults import Backups, make_backups, make_fleet, restore_and_back_up

from headwater.testing import ServerProcess
from headwater.verify.session import build_session


@pytest.fixture(scope="session")
def backup_server() -> Iterator[ServerProcess]:
    srv = ServerProcess("headwater", jetstream=True)
    srv.start()
    try:
        yield srv
    finally:
        srv.cleanup()


@pytest.fixture(scope="session")
def backups(backup_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Backups:
    return make_backups(backup_server, tmp_path_factory.mktemp("backups"))


@pytest.fixture(scope="session")
def fleet(backup_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A parent directory holding 100 small backups."""
    return make_fleet(backup_server, tmp_path_factory.mktemp("fleet"))


@pytest.fixture(scope="session")
def restored(backups: Backups, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ORDERS backup restored into a second server, then backed up again from there."""
    srv = ServerProcess("headwater", jetstream=True)
    srv.start()
    try:
        target = tmp_path_factory.mktemp("restored") / "orders"
        return restore_and_back_up(srv, backups["ORDERS"], target)
    finally:
        srv.cleanup()


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    """A ``local[2]`` Spark session for one test module."""
    session = build_session("local[2]")
    try:
        yield session
    finally:
        session.stop()
