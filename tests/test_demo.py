"""The README's first command: the demo must run to the end on a fresh checkout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_demo_runs_end_to_end() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "reply: REQUEST/REPLY WORKS" in out
    assert "no responders" in out
    assert "stored order 4 at sequence 5" in out
    assert "ORDERS holds 5 messages" in out
    assert "Plan: 4 to create, 0 to update, 0 to replace, 0 to delete, 0 unchanged." in out
    assert "Apply: 4 applied, 0 unchanged, 0 skipped, 0 failed." in out
    assert "plan after apply: Plan: 0 to create, 0 to update, 0 to replace" in out
    assert "NEW processed: order 0, order 1, order 2" in out
    assert "NEW ack floor 3, 2 still pending" in out
    assert "backup: 5 messages" in out
    assert "plan shows drift: Plan: 4 to create" in out
    assert "restored: 5 messages; NEW ack floor 3, 2 still pending" in out
    assert "demo finished" in out
