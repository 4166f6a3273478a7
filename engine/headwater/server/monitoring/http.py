"""The HTTP monitoring listener (``-m``): nats-server's endpoints on the server's event loop.

Why not aiohttp: importing ``aiohttp.web`` costs about 0.2 s, more than the rest of the
server's start-up together, and every endpoint here is a GET answered synchronously from
in-memory state. So this is a small HTTP/1.1 server on an ``asyncio.Protocol``: it parses
request heads (bodies are skipped), supports keep-alive and pipelining, and answers each
request inside ``data_received`` without creating tasks. Reading a document never awaits, so
every answer is a consistent snapshot of the server.

Endpoints: ``/`` (index page), ``/varz``, ``/connz``, ``/subsz`` (alias ``/subscriptionsz``),
``/routez``, ``/jsz``, ``/healthz`` and ``/metrics`` (Prometheus text). Every module a
request needs is imported at start-up: an import on first use would stall the loop (cold
prometheus_client: ~100 ms). ``/jsz`` reads JetStream's modules only once the JetStream
service, which imported them, is running.
Unknown paths are 404, a bad parameter is 400 with a plain-text reason, as in nats-server.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import orjson

from headwater.server.config.settings import RANDOM_PORT
from headwater.server.connections.listen import join_host_port, listen_socket
from headwater.server.monitoring import metrics
from headwater.server.monitoring.connz import ConnzOptions, connz
from headwater.server.monitoring.healthz import HealthzOptions, healthz
from headwater.server.monitoring.jsz import JszOptions, jsz
from headwater.server.monitoring.params import BadRequest, Query
from headwater.server.monitoring.routez import routez
from headwater.server.monitoring.subsz import SubszOptions, subsz
from headwater.server.monitoring.varz import varz
from headwater.server.node import ADVERTISED_VERSION

if TYPE_CHECKING:
    from headwater.server.node import Server

log = logging.getLogger("headwater.server")

#: Largest request head (request line plus headers) we read before answering 431.
MAX_HEAD = 16 * 1024
#: Seconds an open connection may sit without a request before we close it.
IDLE_TIMEOUT = 120.0

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
HTML = "text/html; charset=utf-8"

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}
# The end of a request head; bare LF line ends are accepted, as Go's server does.
_HEAD_END = re.compile(rb"\r?\n\r?\n")

# (status, content type, body)
Response = tuple[int, str, bytes]


def _json(doc: Any, status: int = 200) -> Response:
    return status, JSON, orjson.dumps(doc, option=orjson.OPT_INDENT_2)


class MonitoringService:
    """Serves the monitoring endpoints for ``server``; started and stopped with it."""

    def __init__(self, server: Server) -> None:
        self.server = server
        #: Requests served per endpoint, reported as ``http_req_stats`` in /varz.
        self.requests: dict[str, int] = {}
        self._listener: asyncio.AbstractServer | None = None
        self._connections: set[_HttpConnection] = set()
        self._metrics: metrics.MetricsEndpoint | None = None
        self._routes: dict[str, tuple[str, Callable[[Query], Response]]] = {
            "/": ("/", self._index),
            "/varz": ("/varz", self._varz),
            "/connz": ("/connz", self._connz),
            "/subsz": ("/subsz", self._subsz),
            "/subscriptionsz": ("/subsz", self._subsz),
            "/routez": ("/routez", self._routez),
            "/jsz": ("/jsz", self._jsz),
            "/healthz": ("/healthz", self._healthz),
            "/metrics": ("/metrics", self._prometheus),
        }

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        settings = self.server.settings
        port = 0 if settings.http_port == RANDOM_PORT else settings.http_port
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(
            lambda: _HttpConnection(self), sock=listen_socket(settings.http_host, port)
        )
        sockets = self._listener.sockets or []
        bound = sockets[0].getsockname()[1] if sockets else port
        self.server.http_port = bound
        log.info("Starting http monitor on %s", join_host_port(settings.http_host, bound))

    async def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is None:
            return
        listener.close()
        for conn in list(self._connections):
            conn.close()
        await listener.wait_closed()

    # --- requests ------------------------------------------------------------------------

    def respond(self, target: str) -> Response:
        """Answer one request for ``target`` (path and query)."""
        parts = urlsplit(target)
        route = self._routes.get(unquote(parts.path))
        if route is None:
            return 404, TEXT, b"404 page not found\n"
        name, handler = route
        self.requests[name] = self.requests.get(name, 0) + 1
        try:
            return handler(Query.parse(parts.query))
        except BadRequest as exc:
            return 400, TEXT, str(exc).encode()
        except Exception:
            # A broken document must not take the listener (or the server) down.
            log.exception("monitoring request %s failed", target)
            return 500, TEXT, b"internal error\n"

    def _index(self, query: Query) -> Response:
        return 200, HTML, _index_page().encode()

    def _varz(self, query: Query) -> Response:
        return _json(varz(self.server, self.requests))

    def _connz(self, query: Query) -> Response:
        return _json(connz(self.server, ConnzOptions.from_query(query)))

    def _subsz(self, query: Query) -> Response:
        return _json(subsz(self.server, SubszOptions.from_query(query)))

    def _routez(self, query: Query) -> Response:
        return _json(routez(self.server, query))

    def _jsz(self, query: Query) -> Response:
        return _json(jsz(self.server, JszOptions.from_query(query)))

    def _healthz(self, query: Query) -> Response:
        status, body = healthz(self.server, HealthzOptions.from_query(query))
        return status, JSON, orjson.dumps(body)

    def _prometheus(self, query: Query) -> Response:
        if self._metrics is None:
            self._metrics = metrics.MetricsEndpoint(self.server)
        return 200, metrics.CONTENT_TYPE, self._metrics.render()


class _HttpConnection(asyncio.Protocol):
    """One HTTP/1.x connection to the monitoring port."""

    def __init__(self, service: MonitoringService) -> None:
        self.service = service
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.discard = 0  # body bytes of the current request still to skip
        self.closing = False
        self.paused = False  # the transport's buffer is full: answer nothing more for now
        self.idle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.service._connections.add(self)
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.service._connections.discard(self)
        if self.idle is not None:
            self.idle.cancel()

    def pause_writing(self) -> None:
        # A client that pipelines requests without reading the answers gets no more answers
        # until it reads: stop answering, and stop reading its requests.
        self.paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        if self.transport is not None and not self.closing:
            self.transport.resume_reading()
            self._process()

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self._arm_idle()
        self.buffer += data
        self._process()

    def _process(self) -> None:
        """Answer every complete request in the buffer, unless paused or closing."""
        while not self.closing and not self.paused:
            if self.discard:
                skipped = min(self.discard, len(self.buffer))
                del self.buffer[:skipped]
                self.discard -= skipped
                if self.discard:
                    return
            match = _HEAD_END.search(self.buffer)
            if match is None:
                if len(self.buffer) > MAX_HEAD:
                    self._fail(431, "request head too large")
                elif self._bad_request_line():
                    # Answered at once, as Go's server does: something that is not HTTP (a
                    # NATS route dialling this port) learns it without waiting for a head
                    # that never ends.
                    self._fail(400, "malformed request line")
                return
            if match.start() > MAX_HEAD:
                self._fail(431, "request head too large")
                return
            # Stray line ends between pipelined requests are allowed (RFC 9112, 2.2).
            head = bytes(self.buffer[: match.start()]).lstrip(b"\r\n")
            del self.buffer[: match.end()]
            if head:
                self._request(head)

    def _bad_request_line(self) -> bool:
        """Whether the buffer's first complete line is there and is no HTTP request line."""
        text = bytes(self.buffer).lstrip(b"\r\n")
        end = text.find(b"\n")
        return end >= 0 and not _is_request_line(text[:end].decode("latin-1"))

    def _request(self, head: bytes) -> None:
        lines = head.decode("latin-1").splitlines()
        if not _is_request_line(lines[0]):
            self._fail(400, "malformed request line")
            return
        request_line = lines[0].split()
        method, target, version = request_line
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                self._fail(400, "malformed header line")
                return
            headers[name.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._fail(501, "chunked request bodies are not supported")
            return
        length_text = headers.get("content-length", "0") or "0"
        if not length_text.isascii() or not length_text.isdigit():
            self._fail(400, "bad Content-Length")
            return
        self.discard = int(length_text)
        connection = headers.get("connection", "").lower()
        if version == "HTTP/1.0":
            keep_alive = "keep-alive" in connection
        else:
            keep_alive = "close" not in connection
        status, ctype, body = self.service.respond(target)
        self._write(status, ctype, b"" if method == "HEAD" else body, len(body), keep_alive)
        if not keep_alive:
            self.close()

    def _write(self, status: int, ctype: str, body: bytes, length: int, keep_alive: bool) -> None:
        if self.transport is None:
            return
        head = [
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}",
            f"Content-Type: {ctype}",
            f"Date: {email.utils.formatdate(usegmt=True)}",
            f"Content-Length: {length}",
        ]
        if ctype == JSON:
            # Browser dashboards read the endpoints cross-origin, as nats-server allows.
            head.append("Access-Control-Allow-Origin: *")
        if not keep_alive:
            head.append("Connection: close")
        self.transport.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)

    def _fail(self, status: int, reason: str) -> None:
        body = f"{status} {reason}\n".encode()
        self._write(status, TEXT, body, len(body), keep_alive=False)
        self.close()

    def _arm_idle(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
        self.idle = asyncio.get_running_loop().call_later(IDLE_TIMEOUT, self.close)

    def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        if self.idle is not None:
            self.idle.cancel()
        if self.transport is not None:
            self.transport.close()


def _is_request_line(line: str) -> bool:
    parts = line.split()
    return len(parts) == 3 and parts[2].startswith("HTTP/1.")


_ENDPOINTS = (
    ("varz", "General"),
    ("connz", "Connections"),
    ("subsz", "Subscriptions"),
    ("routez", "Routes"),
    ("jsz", "JetStream"),
    ("healthz", "Health Probe"),
    ("metrics", "Prometheus Metrics"),
)


def _index_page() -> str:
    links = "\n".join(
        f'    <a href="./{path}">{title} <code>/{path}</code></a><br/>'
        for path, title in _ENDPOINTS
    )
    return (
        '<html lang="en">\n'
        "  <head><title>headwater-server monitoring</title></head>\n"
        "  <body>\n"
        "    <h1>headwater-server</h1>\n"
        f"    <p>NATS server monitoring, nats-server {ADVERTISED_VERSION} compatible</p>\n"
        f"{links}\n"
        "  </body>\n"
        "</html>\n"
    )
