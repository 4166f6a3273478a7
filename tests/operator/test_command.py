"""``headwater-operator`` as a process: its flags, kopf's flags, a kubeconfig, SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.testing import ServerProcess
from support.fakekube import FakeKubeThread
from tests.operator.conftest import eventually, free_port, http_get, stream_info


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    with ServerProcess("headwater", jetstream=True) as srv:
        yield srv


@pytest.mark.slow
def test_the_command_runs_the_operator(
    fake_kube_thread: FakeKubeThread, server: ServerProcess, tmp_path: Path
) -> None:
    """The whole path from the console script: flags, NATS_URL, kopf's kubeconfig login."""
    kube = fake_kube_thread
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    health = free_port()
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "NATS_URL": server.url,
        "HEADWATER_SYNC_INTERVAL": "1",
    }
    log = (tmp_path / "operator.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "headwater_operator",
            "--standalone",
            "--namespace",
            "default",
            "--liveness",
            f"http://127.0.0.1:{health}/healthz",
            "--cache-dir",
            str(tmp_path / "c"),
            "--cluster-id",
            "test-cluster",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        kube.api.create(
            {
                "apiVersion": "headwater.io/v1",
                "kind": "Stream",
                "metadata": {"name": "cmd", "namespace": "default"},
                "spec": {"name": "CMD"},
            }
        )
        eventually(lambda: stream_info(server, "CMD") is not None, timeout=20)
        assert http_get(f"http://127.0.0.1:{health}/healthz")
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=20)
        log.close()
    output = (tmp_path / "operator.log").read_text()
    assert code == 0, output
    assert "Handler 'create' succeeded" in output
    metadata = (stream_info(server, "CMD") or {})["config"]["metadata"]
    assert metadata["headwater.io/managed-by"] == "kubernetes:test-cluster/default/stream/cmd"
