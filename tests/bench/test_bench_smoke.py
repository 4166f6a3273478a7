"""Smoke test of the benchmark scripts: ``bench/run.py --quick`` end to end, both servers.

It checks that every scenario printed a figure for both servers and their ratio, so the
scripts cannot silently rot; it never judges speed (figures on a shared machine are noise).
Building gobench on a machine that lacks it (Go from Debian packages) adds a one-off minute.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Every row the scenarios must produce, whatever the mode.
SCENARIO_IDS = {
    "core_pub.gobench",
    "core_pub.natspy",
    "core_pubsub.gobench",
    "core_pubsub.natspy",
    "reqrep.p50",
    "reqrep.p90",
    "reqrep.p99",
    "conns.rss",
    "conns.per_conn",
    "conns.open_rate",
    # JetStream (issue 3)
    "js_pub.file_durable",
    "js_pub.file_interval",
    "js_pub.memory",
    "js_fetch.file",
    "js_store.rss",
    "js_store.per_msg",
    "js_store.restart",
    "store.rss_per_msg",
    "store.restart",
    # Consumers (issue 4)
    "consumers.ordered_replay",
    "consumers.pub_idle0",
    "consumers.pub_idleN",
    "consumers.pub_kept",
    # Clusters (issue 17)
    "cluster_pubsub.gobench",
    "cluster_pubsub.natspy",
    "cluster.formation",
    "cluster_js.host",
    "cluster_js.other",
    "cluster_js.other_vs_host",
}

# Rows quoted from bench/store_bench.py, which measures headwater's file store alone: there is
# no nats-server figure, so no ratio, and the table prints "n/a" in those two columns.
HEADWATER_ONLY = {"store.rss_per_msg", "store.restart"}


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_quick_run_prints_a_ratio_for_every_scenario(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    env = {**os.environ, "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "bench/run.py", "--quick", "--json", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=380,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(out.read_text())
    measures = {m["id"]: m for m in data["measures"]}
    assert set(measures) == SCENARIO_IDS

    lines = done.stdout.splitlines()
    for ident in HEADWATER_ONLY:
        m = measures[ident]
        assert m["headwater"] is not None and m["headwater"] > 0, (ident, m)
        assert m["nats"] is None and m["ratio"] is None, (ident, m)
        assert any(m["scenario"] in line and m["metric"] in line for line in lines), ident
    for ident, m in measures.items():
        if ident in HEADWATER_ONLY:
            continue
        for server in ("headwater", "nats"):
            assert m[server] is not None and m[server] > 0, (ident, server, m)
        ratio = m["ratio"]
        assert ratio is not None and math.isfinite(ratio) and ratio > 0, (ident, m)
        assert math.isclose(ratio, m["headwater"] / m["nats"])
        # The printed table has the row: its scenario, load, metric and the ratio on one line.
        printed = f"{ratio:.3f}x"
        assert any(
            m["scenario"] in line and m["metric"] in line and m["load"] in line and printed in line
            for line in lines
        ), f"no printed row for {ident} with ratio {printed}:\n{done.stdout}"
    # Both loads really ran: gobench reports its client library, nats-py is installed.
    assert data["machine"]["nats_go"].startswith("nats.go")
    assert data["machine"]["mode"] == "quick"
    # The JetStream rows ran with the durability modes they claim (the note names them).
    assert "hw default, nats sync_interval always" in measures["js_pub.file_durable"]["note"]
    assert "hw sync_interval 2m, nats default" in measures["js_pub.file_interval"]["note"]
    assert "-storage memory" in measures["js_pub.memory"]["note"]
    assert "hw sync_interval 2m, nats default" in measures["consumers.ordered_replay"]["note"]
