"""Every place that states our version or API level says what ``versioning`` says.

INFO (``version``, ``proto``), ``/varz``, ``$JS.API.INFO`` (``api.level``), stream and
consumer metadata (``_nats.ver``, ``_nats.level``, ``_nats.req.level``) and the docs are read
from a running server and from the files, and compared with the constants.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path

import nats

from headwater.server.jetstream.versioning import (
    ADVERTISED_SERVER_VERSION,
    JS_API_LEVEL,
    PROTOCOL_VERSION,
)
from headwater.testing import ServerProcess

ROOT = Path(__file__).resolve().parents[3]


async def _read_info(port: int) -> dict[str, object]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        line = await asyncio.wait_for(reader.readline(), 5)
    finally:
        writer.close()
    assert line.startswith(b"INFO ")
    info: dict[str, object] = json.loads(line[5:])
    return info


async def test_every_reported_version_is_the_constant() -> None:
    srv = ServerProcess("headwater", args=["-m", "-1"], jetstream=True)
    srv.start()
    try:
        info = await _read_info(srv.port)
        assert info["version"] == ADVERTISED_SERVER_VERSION
        assert info["proto"] == PROTOCOL_VERSION
        varz_url = f"http://127.0.0.1:{srv.http_port}/varz"
        varz = await asyncio.to_thread(
            lambda: json.load(urllib.request.urlopen(varz_url, timeout=5))
        )
        assert varz["version"] == ADVERTISED_SERVER_VERSION
        assert varz["proto"] == PROTOCOL_VERSION
        nc = await nats.connect(srv.url, allow_reconnect=False)
        try:
            assert nc.connected_server_version.major == int(ADVERTISED_SERVER_VERSION[0])

            async def api(subject: str, body: dict[str, object] | None = None) -> dict:
                raw = json.dumps(body).encode() if body is not None else b""
                msg = await nc.request(f"$JS.API.{subject}", raw, timeout=5)
                reply: dict = json.loads(msg.data)
                assert "error" not in reply, reply
                return reply

            account = await api("INFO")
            assert account["api"]["level"] == JS_API_LEVEL
            stream = await api("STREAM.CREATE.V", {"name": "V", "subjects": ["v"]})
            meta = stream["config"]["metadata"]
            consumer = await api(
                "CONSUMER.CREATE.V.C",
                {"stream_name": "V", "config": {"durable_name": "C", "ack_policy": "explicit"}},
            )
            for metadata in (meta, consumer["config"]["metadata"]):
                assert metadata["_nats.ver"] == ADVERTISED_SERVER_VERSION
                assert metadata["_nats.level"] == str(JS_API_LEVEL)
                assert int(metadata["_nats.req.level"]) <= JS_API_LEVEL
        finally:
            await nc.close()
        assert f"API Level:       {JS_API_LEVEL}" in srv.log()
    finally:
        srv.cleanup()


def test_docs_state_the_constants() -> None:
    # Line breaks in the Markdown do not matter.
    differences = " ".join((ROOT / "docs" / "DIFFERENCES.md").read_text().split())
    assert f'`version: "{ADVERTISED_SERVER_VERSION}"`' in differences
    assert f"`api.level` {JS_API_LEVEL}" in differences
    assert f"`_nats.ver` `{ADVERTISED_SERVER_VERSION}`" in differences
    assert f"`_nats.level` {JS_API_LEVEL}" in differences
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"nats-server {ADVERTISED_SERVER_VERSION}" in readme
    assert f"API level {JS_API_LEVEL}" in readme
