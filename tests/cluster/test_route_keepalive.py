"""Route keepalive: a peer that completes the handshake and then answers no PING is dropped.

``cluster { ping_interval, ping_max }`` govern routes as the top-level options govern clients:
a PING every interval, and one more than ``ping_max`` unanswered ones ends the route with
``-ERR 'Stale Connection'``. The peer here is a bare socket that answers the dialling
server's CONNECT/INFO with an INFO of its own and then stays silent; both servers dial it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.testing import ServerProcess, free_ports

pytestmark = pytest.mark.timeout(30)

KINDS = ["headwater", pytest.param("nats", marks=pytest.mark.differential)]


@pytest.fixture
def started() -> Iterator[list[ServerProcess]]:
    servers: list[ServerProcess] = []
    yield servers
    for srv in servers:
        srv.cleanup()


class SilentPeer:
    """Answers each route's CONNECT with an INFO, then stays silent; records the lines of the
    first route that is not dedicated to one account."""

    def __init__(self) -> None:
        self.lines: asyncio.Queue[str | None] = asyncio.Queue()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._accepted = False

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        info = {
            "server_id": "NSILENTPEER",
            "server_name": "silent",
            "cluster": "ka",
            "host": "127.0.0.1",
            "port": self.port,
            "headers": True,
        }
        watched = False
        try:
            for _ in range(5000):  # bounded: interest (RS+), PINGs, the -ERR
                line = await reader.readline()
                if not line:
                    break
                text = line.decode().rstrip("\r\n")
                if text.startswith("CONNECT"):
                    writer.write(f"INFO {json.dumps(info)}\r\n".encode())
                    await writer.drain()
                elif text.startswith("INFO") and not self._accepted:
                    # The dialler's INFO follows its CONNECT. nats-server also dials a route
                    # dedicated to its system account (its INFO names it), which it gives up
                    # when our INFO names none; its pooled route is the one to watch.
                    watched = "route_account" not in json.loads(text.split(" ", 1)[1])
                    self._accepted = watched
                if watched:
                    await self.lines.put(text)
        finally:
            if watched:
                await self.lines.put(None)  # the dialler closed the route
            writer.close()


def _conf(path: Path, port: int, peer: int) -> Path:
    path.write_text(
        f"""
        listen: 127.0.0.1:-1
        server_name: dialler
        cluster {{
          name: ka
          listen: 127.0.0.1:{port}
          routes: [nats://127.0.0.1:{peer}]
          ping_interval: "200ms"
          ping_max: 2
        }}
        """
    )
    return path


@pytest.mark.parametrize("kind", KINDS)
async def test_a_route_that_answers_no_ping_is_stale(
    kind: str, started: list[ServerProcess], tmp_path: Path
) -> None:
    peer = SilentPeer()
    await peer.start()
    try:
        (port,) = free_ports(1)
        srv = ServerProcess(kind, ["-c", str(_conf(tmp_path / "d.conf", port, peer.port))])
        started.append(srv)
        srv.start()
        lines: list[str] = []
        began = time.monotonic()
        for _ in range(5000):  # bounded: interest (RS+), PINGs, the -ERR, the end
            line = await asyncio.wait_for(peer.lines.get(), timeout=10)
            if line is None:
                break
            lines.append(line)
        elapsed = time.monotonic() - began
        after_handshake = [line for line in lines if line.split(" ", 1)[0] in ("PING", "-ERR")]
        # ping_max (2) PINGs go unanswered; at the third tick the route is stale.
        assert after_handshake[-3:] == ["PING", "PING", "-ERR 'Stale Connection'"], lines
        assert elapsed < 8, elapsed
        assert srv.running, srv.log()
        if kind == "headwater":
            assert "is stale" in srv.log()
    finally:
        peer.close()
