"""In-process servers with monitoring on ephemeral ports, and a raw HTTP client.

The server runs on the test's own event loop, so a test can look at ``Server`` state and the
documents built from it directly, and talk to it over real sockets at the same time.
Helpers are handed out as fixtures (``start``, ``http``) because test modules here cannot
import from this conftest by name.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from headwater.server.config.settings import Settings
from headwater.server.node import Server
from headwater.server.services import attach_services

StartServer = Callable[..., Awaitable[Server]]


def make_settings(**overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": -1,
        "http_host": "127.0.0.1",
        "http_port": -1,
    }
    base.update(overrides)
    return Settings(**base)


@pytest.fixture
async def start() -> AsyncIterator[StartServer]:
    """``await start(**settings)``: a started server, shut down after the test."""
    servers: list[Server] = []

    async def _start(**overrides: Any) -> Server:
        srv = Server(make_settings(**overrides))
        attach_services(srv)
        # Registered before start: a start that fails half-way still gets shut down.
        servers.append(srv)
        await srv.start()
        return srv

    yield _start
    for srv in servers:
        await srv.shutdown()


@pytest.fixture
async def node(start: StartServer) -> Server:
    """A default server (monitoring on, no auth, no TLS, no JetStream)."""
    return await start()


@dataclass
class HttpResponse:
    status: int
    headers: dict[str, str]
    body: bytes = field(repr=False)

    def json(self) -> Any:
        return json.loads(self.body)


class Http:
    """A minimal HTTP/1.1 client speaking over raw streams, so tests control every byte."""

    @staticmethod
    async def read_response(reader: asyncio.StreamReader, head_only: bool = False) -> HttpResponse:
        raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        length = 0 if head_only else int(headers.get("content-length", "0"))
        body = await asyncio.wait_for(reader.readexactly(length), 5)
        return HttpResponse(status, headers, body)

    async def get(self, port: int, target: str, method: str = "GET") -> HttpResponse:
        """One request on a fresh connection, closed afterwards."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            request = f"{method} {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            writer.write(request.encode())
            await writer.drain()
            return await self.read_response(reader, head_only=method == "HEAD")
        finally:
            writer.close()

    async def json(self, server: Server, target: str) -> Any:
        response = await self.get(server.http_port, target)
        assert response.status == 200, (response.status, response.body)
        assert response.headers["content-type"] == "application/json"
        return response.json()


@pytest.fixture
def http() -> Http:
    return Http()
