"""Smoke test of the cluster benchmarks (issue 17): ``bench/run.py --quick --only cluster``.

Runs once and checks that each row printed a figure for both servers and their ratio: pub/sub
across a route (gobench and nats-py), the formation time of a 3-server cluster, and JetStream
publish into an R1 stream of a 3-server cluster through the server holding it, through another
one, and the second over the first for each kind. It never judges speed; the formation target
(10 s) is only the bound the run waits for a mesh.
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

CLUSTER_IDS = {
    "cluster_pubsub.gobench",
    "cluster_pubsub.natspy",
    "cluster.formation",
    "cluster_js.host",
    "cluster_js.other",
    "cluster_js.other_vs_host",
}


@pytest.mark.timeout(150)
def test_quick_cluster_run_prints_both_figures(tmp_path: Path) -> None:
    out = tmp_path / "cluster.json"
    done = subprocess.run(
        [sys.executable, "bench/run.py", "--quick", "--only", "cluster", "--json", str(out)],
        cwd=REPO,
        env={**os.environ, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=140,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(out.read_text())
    measures = {m["id"]: m for m in data["measures"]}
    assert set(measures) == CLUSTER_IDS
    lines = done.stdout.splitlines()
    for ident, m in measures.items():
        for server in ("headwater", "nats"):
            assert m[server] is not None and m[server] > 0, (ident, server, m)
        ratio = m["ratio"]
        assert ratio is not None and math.isfinite(ratio) and ratio > 0, (ident, m)
        printed = f"{ratio:.3f}x"
        assert any(
            m["scenario"] in line and m["metric"] in line and m["load"] in line and printed in line
            for line in lines
        ), f"no printed row for {ident} with ratio {printed}:\n{done.stdout}"
    # Every message crossed the route in every run (a lost one is named in the note).
    for ident in ("cluster_pubsub.gobench", "cluster_pubsub.natspy"):
        assert "lost msgs" not in measures[ident]["note"], measures[ident]
        assert "server CPU (sending/receiving)" in measures[ident]["note"]
    # Every publish was stored, through either server; the stream's server is named.
    for ident in ("cluster_js.host", "cluster_js.other"):
        assert "lost msgs" not in measures[ident]["note"], measures[ident]
    assert "held by hw s" in measures["cluster_js.host"]["note"]
    assert "(client's/stream's)" in measures["cluster_js.other"]["note"]
    # (b) / (a) is each kind's own ratio of the two rows above it, judged against 0.5 for hw.
    share = measures["cluster_js.other_vs_host"]
    for server in ("headwater", "nats"):
        expected = measures["cluster_js.other"][server] / measures["cluster_js.host"][server]
        assert share[server] == pytest.approx(expected), (server, share)
    assert share["target"] == "hw >= 0.50" and share["target_met"] is not None
    assert data["machine"]["nats_go"].startswith("nats.go")
