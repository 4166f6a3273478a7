"""The monitoring listener: routing, HTTP/1.1 framing, errors, lifecycle, log line."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from typing import Any

import pytest

from headwater.server.monitoring.http import MAX_HEAD
from headwater.server.node import Server

# testing.py must find the port in our log line; this is the pattern it should use.
MONITOR_LINE = re.compile(
    r"monitor(?:ing)?(?: interface)? on (?:https?://)?(?:\[[^\]]*\]|[^\s:/\[\]]+):(\d+)", re.I
)


async def test_bound_port_and_log_line(start: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="headwater.server"):
        srv = await start()
    assert srv.http_port > 0
    lines = [r.getMessage() for r in caplog.records if "monitor" in r.getMessage()]
    assert lines == [f"Starting http monitor on 127.0.0.1:{srv.http_port}"]
    match = MONITOR_LINE.search(lines[0])
    assert match is not None and int(match.group(1)) == srv.http_port


@pytest.mark.parametrize(
    "path", ["/varz", "/connz", "/subsz", "/subscriptionsz", "/jsz", "/healthz"]
)
async def test_json_endpoints(node: Server, http: Any, path: str) -> None:
    response = await http.get(node.http_port, path)
    assert response.status == 200
    assert response.headers["content-type"] == "application/json"
    assert response.headers["access-control-allow-origin"] == "*"
    assert int(response.headers["content-length"]) == len(response.body)
    doc = response.json()
    if path == "/healthz":
        assert doc == {"status": "ok"}
    else:
        assert doc["server_id"] == node.server_id


async def test_index_metrics_and_unknown_paths(node: Server, http: Any) -> None:
    index = await http.get(node.http_port, "/")
    assert index.status == 200 and index.headers["content-type"].startswith("text/html")
    for path in ("varz", "connz", "subsz", "jsz", "healthz", "metrics"):
        assert f'href="./{path}"' in index.body.decode()
    metrics = await http.get(node.http_port, "/metrics")
    assert metrics.status == 200
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert b"gnatsd_varz_in_msgs" in metrics.body
    for path in ("/nope", "/varz/", "/VARZ", "/index.html"):
        missing = await http.get(node.http_port, path)
        assert missing.status == 404, path


async def test_bad_parameters_are_400_with_a_reason(node: Server, http: Any) -> None:
    for target, reason in [
        ("/connz?sort=nope", b"invalid sorting option: nope"),
        ("/connz?limit=x", b"Error decoding int for 'limit'"),
        ("/connz?sort=stop", b"sort by stop only valid on closed connections"),
        ("/subsz?test=a.*", b"invalid test subject"),
        ("/healthz?js-enabled-only=maybe", b"Error decoding boolean"),
    ]:
        response = await http.get(node.http_port, target)
        assert response.status == 400, target
        assert response.body.startswith(reason), response.body


async def test_unhealthy_status_code(node: Server, http: Any) -> None:
    node.lame_duck = True
    response = await http.get(node.http_port, "/healthz")
    assert response.status == 500
    assert response.json()["status"] == "error"
    node.lame_duck = False


async def test_request_counts_reach_varz(node: Server, http: Any) -> None:
    await http.json(node, "/connz")
    await http.json(node, "/subscriptionsz")
    await http.json(node, "/subsz")
    doc = await http.json(node, "/varz")
    assert doc["http_req_stats"] == {"/connz": 1, "/subsz": 2, "/varz": 1}


async def test_keep_alive_and_pipelining(node: Server, http: Any) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", node.http_port)
    # Three pipelined requests, the second with a body to skip, split at an odd place.
    data = (
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        b"POST /varz?x=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
        b"\r\nHEAD /connz HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    writer.write(data[:20])
    await writer.drain()
    await asyncio.sleep(0.01)
    writer.write(data[20:])
    first = await http.read_response(reader)
    second = await http.read_response(reader)
    third = await http.read_response(reader, head_only=True)
    assert first.json() == {"status": "ok"}
    assert second.json()["server_id"] == node.server_id
    assert third.status == 200 and int(third.headers["content-length"]) > 0
    # The connection is still open for more.
    writer.write(b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")
    last = await http.read_response(reader)
    assert last.headers["connection"] == "close"
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()


async def test_http_1_0_closes_after_the_answer(node: Server, http: Any) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", node.http_port)
    writer.write(b"GET /healthz HTTP/1.0\n\n")  # bare LF line ends are accepted
    response = await http.read_response(reader)
    assert response.json() == {"status": "ok"}
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET /varz SPDY/3\r\n\r\n", 400),
        (b"GET /varz HTTP/1.1\r\nno colon here\r\n\r\n", 400),
        (b"GET /varz HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        (b"POST /varz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
        (b"GET /varz HTTP/1.1\r\nX: " + b"a" * (MAX_HEAD + 10), 431),
    ],
)
async def test_malformed_requests(
    node: Server, http: Any, request_bytes: bytes, status: int
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", node.http_port)
    writer.write(request_bytes)
    response = await http.read_response(reader)
    assert response.status == status
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()


async def test_a_failing_document_is_a_500_not_a_crash(node: Server, http: Any) -> None:
    node.clients[12345] = object()  # type: ignore[assignment]
    broken = await http.get(node.http_port, "/connz")
    assert broken.status == 500
    del node.clients[12345]
    assert (await http.get(node.http_port, "/connz")).status == 200


async def test_stop_closes_the_listener_and_open_connections(start: Any, http: Any) -> None:
    srv = await start()
    port = srv.http_port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\n\r\n")
    await http.read_response(reader)
    await srv.shutdown()
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)


async def test_fixed_port_in_use_fails_start(start: Any) -> None:
    first = await start()
    with pytest.raises(OSError):
        await start(http_port=first.http_port)


async def test_pipelined_flood_is_answered_in_order(node: Server, http: Any) -> None:
    """More answers than the socket buffers hold: answering pauses, then resumes."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", node.http_port))
    sock.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=sock)
    count = 5000  # ~10 MB of answers, well past what the kernel buffers
    writer.write(b"GET /varz HTTP/1.1\r\n\r\nGET /healthz HTTP/1.1\r\n\r\n" * (count // 2))
    await writer.drain()
    await asyncio.sleep(0.2)  # let the server fill the buffers and pause
    for i in range(count):
        response = await http.read_response(reader)
        if i % 2:
            assert response.body == b'{"status":"ok"}', i
        else:
            assert response.body.startswith(b'{\n  "server_id"'), i
    writer.close()
