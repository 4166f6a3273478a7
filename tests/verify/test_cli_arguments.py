"""``headwater verify`` checks its arguments before it starts Spark.

A Spark session takes seconds to start and prints its own start-up warnings; a mistyped path
must be reported at once, in one line, with nothing from Spark around it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def verify(*args: str) -> subprocess.CompletedProcess[str]:
    script = shutil.which("headwater")
    command = [script] if script else [sys.executable, "-m", "headwater.cli"]
    return subprocess.run([*command, "verify", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda tmp: [str(tmp / "missing")], "does not exist"),
        (lambda tmp: [str(tmp)], "no backup"),
        (lambda tmp: ["--compare", str(tmp), str(tmp)], "--compare needs two backup directories"),
    ],
    ids=["missing", "empty-directory", "compare-not-backups"],
)
def test_wrong_paths_fail_before_spark_starts(tmp_path: Path, make: object, expected: str) -> None:
    done = verify(*make(tmp_path))  # type: ignore[operator]
    assert done.returncode == 1
    assert done.stderr.startswith("Error: ") and expected in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr  # one line: no Spark start-up warnings
