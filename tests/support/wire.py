"""A raw-socket NATS peer for wire tests: send bytes, expect lines (nats-server's test/ style)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any


class WireClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.info: dict[str, Any] = {}

    @classmethod
    async def connect(
        cls, port: int, connect: dict[str, Any] | None = None, read_info: bool = True
    ) -> WireClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = cls(reader, writer)
        if read_info:
            line = await client.line()
            assert line.startswith("INFO "), line
            client.info = json.loads(line[5:])
        if connect is not None:
            opts = {"verbose": False, "pedantic": False, "headers": True, **connect}
            await client.send(f"CONNECT {json.dumps(opts)}\r\n")
        return client

    async def send(self, data: str | bytes) -> None:
        self.writer.write(data.encode() if isinstance(data, str) else data)
        await self.writer.drain()

    async def line(self, timeout: float = 5.0) -> str:
        raw = await asyncio.wait_for(self.reader.readline(), timeout)
        if not raw:
            raise ConnectionError("connection closed")
        return raw.decode().rstrip("\r\n")

    async def expect(self, prefix: str, timeout: float = 5.0) -> str:
        """Read lines, skipping PINGs (answered), until one starts with ``prefix``."""
        while True:
            line = await self.line(timeout)
            if line == "PING" and prefix != "PING":
                await self.send("PONG\r\n")
                continue
            assert line.startswith(prefix), f"expected {prefix!r}, got {line!r}"
            return line

    async def read_exactly(self, n: int, timeout: float = 5.0) -> bytes:
        return await asyncio.wait_for(self.reader.readexactly(n), timeout)

    async def msg(self, timeout: float = 5.0) -> tuple[str, bytes]:
        """Read one MSG/HMSG; returns (control line, payload incl. headers)."""
        line = await self.expect("", timeout)
        while line in ("PING", "PONG", "+OK"):
            line = await self.expect("", timeout)
        parts = line.split()
        assert parts[0] in ("MSG", "HMSG"), line
        size = int(parts[-1])
        data = await self.read_exactly(size + 2, timeout)
        return line, data[:-2]

    async def closed(self, timeout: float = 5.0) -> bool:
        """True once the server has closed the connection (EOF or reset); closes our side."""
        try:
            while True:
                data = await asyncio.wait_for(self.reader.read(65536), timeout)
                if not data:
                    return True
        except (ConnectionError, OSError):
            return True
        except TimeoutError:
            return False
        finally:
            await self.close()

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()
