"""A server entering lame duck mode leaves the other servers' client INFO (connect_urls).

Raw protocol on purpose: nats-py adds the servers an INFO names but never drops one, so only
the INFO itself shows what the cluster told its clients. nats-server sends the new INFO to
clients that said ``protocol: 1``, and so does Headwater.
"""

from __future__ import annotations

import asyncio
import json
import signal

import pytest
from cluster.helpers import KINDS

from headwater.testing import Cluster

pytestmark = pytest.mark.timeout(40)


async def _next_info(reader: asyncio.StreamReader, timeout: float) -> dict:
    while True:
        line = await asyncio.wait_for(reader.readline(), timeout)
        if line.startswith(b"INFO "):
            return json.loads(line[5:])


@pytest.mark.parametrize("cluster", KINDS, indirect=True)
async def test_lame_duck_server_leaves_connect_urls(cluster: Cluster) -> None:
    leaving = cluster.servers[2]
    leaving_url = f"127.0.0.1:{leaving.port}"
    # A client on the leaving server keeps it in lame duck for its grace period (10 s), so
    # only its lame-duck INFO to the routes, not its exit, can update the others in time.
    held = await asyncio.open_connection("127.0.0.1", leaving.port)
    held[1].write(b'CONNECT {"verbose":false}\r\nPING\r\n')
    reader, writer = await asyncio.open_connection("127.0.0.1", cluster.servers[0].port)
    try:
        first = await _next_info(reader, 5)
        assert leaving_url in first.get("connect_urls", []), first
        writer.write(b'CONNECT {"verbose":false,"protocol":1}\r\nPING\r\n')
        await writer.drain()
        leaving.signal(signal.SIGUSR2)  # lame duck
        async with asyncio.timeout(5):
            while True:
                info = await _next_info(reader, 5)
                if leaving_url not in info.get("connect_urls", []):
                    break
        assert f"127.0.0.1:{cluster.servers[1].port}" in info["connect_urls"], info
        assert leaving.running, "the leaving server is still in its lame-duck grace period"
    finally:
        writer.close()
        held[1].close()
