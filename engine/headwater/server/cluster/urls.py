"""Route URLs: ``nats-route://[user:password@]host:port`` (``nats://`` is taken too)."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from headwater.server.connections.listen import join_host_port


@dataclass(frozen=True)
class RouteURL:
    host: str
    port: int
    user: str | None = None
    password: str | None = None

    @property
    def address(self) -> str:
        return join_host_port(self.host, self.port)

    def __str__(self) -> str:
        return f"nats-route://{self.address}"


def parse_route_url(text: str) -> RouteURL:
    """A route URL as configured or gossiped (``info.ip``); ValueError when unusable."""
    parts = urllib.parse.urlsplit(text.strip())
    port = parts.port  # ValueError for a non-numeric one
    if not parts.hostname or port is None:
        raise ValueError(f"route URL {text!r} has no host:port")
    user = urllib.parse.unquote(parts.username) if parts.username else None
    password = urllib.parse.unquote(parts.password) if parts.password else None
    return RouteURL(parts.hostname, port, user, password)


__all__ = ["RouteURL", "parse_route_url"]
