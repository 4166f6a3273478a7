"""What ``-s``/``$NATS_URL`` must look like, and why a connection to an HTTP port fails.

People paste the monitoring address (``http://host:8222``) where a NATS URL belongs. nats-py
then fails with "Name or service not known" (it reads ``http`` as part of a host name), or,
given ``nats://host:8222``, waits for an INFO line an HTTP server never sends and times out.
Both errors hide the cause; these checks name it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from urllib.parse import urlsplit

#: The schemes nats-py connects with (ws:// and wss:// are NATS over websockets).
NATS_SCHEMES = ("nats", "tls", "ws", "wss")
CLIENT_PORT = 4222
MONITORING_PORT = 8222
#: An HTTP server answers a request with a status line starting with this.
_HTTP_REPLY = b"HTTP/"


def check_urls(urls: Sequence[str]) -> str | None:
    """Why the first unusable URL cannot be a NATS server's, or None when all can be."""
    for url in urls:
        scheme = url.split("://", 1)[0].lower() if "://" in url else "nats"
        if scheme in NATS_SCHEMES:
            continue
        if scheme not in ("http", "https"):
            schemes = ", ".join(f"{name}://" for name in NATS_SCHEMES[:-1])
            return f"{url}: unknown URL scheme {scheme}://; use {schemes} or wss://"
        host, port = _host_port(url)
        if port == MONITORING_PORT:
            why = f" ({MONITORING_PORT} is the HTTP monitoring port)"
        elif scheme == "https":
            why = f" (or tls://{host}:{CLIENT_PORT} for TLS)"
        else:
            why = ""
        return f"{url} is not a NATS URL: use nats://{host}:{CLIENT_PORT}{why}"
    return None


def _host_port(url: str) -> tuple[str, int | None]:
    """Host and port as nats-py reads them (no scheme means nats://); None: no valid port."""
    parts = urlsplit(url if "://" in url else f"nats://{url}")
    try:
        port = parts.port
    except ValueError:  # not a number or out of range
        port = None
    return parts.hostname or "127.0.0.1", port


async def answers_http(url: str, timeout: float) -> bool:
    """Whether ``url`` answers an HTTP request with an HTTP reply, within ``timeout``.

    Asked only after a NATS connection failed: a NATS server speaks first (INFO), so one
    that stayed silent and then answers ``HTTP/...`` to a request is an HTTP port.
    """
    host, port = _host_port(url)
    port = port or CLIENT_PORT
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(b"HEAD / HTTP/1.0\r\nHost: " + host.encode() + b"\r\n\r\n")
                await writer.drain()
                first = await reader.read(len(_HTTP_REPLY))
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except (TimeoutError, OSError):
        return False
    return first == _HTTP_REPLY


async def http_port_error(urls: Sequence[str], timeout: float) -> str | None:
    """A one-line error for the first URL that is an HTTP port, or None when none is."""
    # All at once, so a list of servers costs one timeout, not one each.
    found = await asyncio.gather(*(answers_http(url, timeout) for url in urls))
    for url, is_http in zip(urls, found, strict=True):
        if is_http:
            return (
                f"cannot connect to {url}: it is an HTTP port (a monitoring port?), not a NATS "
                f"one; use the client port ({CLIENT_PORT} by default)"
            )
    return None
