"""Listening sockets bound the way nats-server binds them (Go's ``net.Listen("tcp", ...)``).

Go listens on a wildcard address (``0.0.0.0``, ``::`` or none), nats-server's default, with
one dual-stack IPv6 socket: the same port answers over IPv4 and IPv6. asyncio would bind
``0.0.0.0`` to IPv4 only (and, for no host at all, open one socket per family, each with its
own port when the port is picked at random), so the socket is made here and handed to
``create_server``. Where IPv6 is unavailable the wildcard falls back to IPv4. A literal
address (``127.0.0.1``, ``::1``) is that address only; a name is bound to its first IPv4
address if it has one (Go's preference), else its first address.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from typing import Any

WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})

# Errors that mean "this machine has no usable IPv6", not "the port is taken".
_NO_IPV6 = frozenset({errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT})


def listen_socket(host: str, port: int) -> socket.socket:
    """A bound (not yet listening) TCP socket for ``host:port``; port 0 picks a free one."""
    if host in WILDCARD_HOSTS:
        sock = _dual_stack(port)
        return sock if sock is not None else _bind(socket.AF_INET, ("0.0.0.0", port))
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, address = next((i for i in infos if i[0] == socket.AF_INET), infos[0])
    return _bind(family, address)


def join_host_port(host: str, port: int) -> str:
    """``host:port`` with IPv6 literals bracketed, like Go's ``net.JoinHostPort``."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def peer_ip(address: str) -> str:
    """A peer's IP as nats-server reports it: an IPv4 client of a dual-stack socket shows as
    ``::ffff:a.b.c.d``, which Go reports as plain ``a.b.c.d``."""
    if not address.startswith("::ffff:"):
        return address
    try:
        mapped = ipaddress.IPv6Address(address).ipv4_mapped
    except ValueError:
        return address
    return str(mapped) if mapped is not None else address


def _dual_stack(port: int) -> socket.socket | None:
    """An IPv6 wildcard socket that also takes IPv4, or None where IPv6 is unavailable."""
    if not socket.has_ipv6:
        return None
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    except OSError:
        return None
    try:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    except OSError:  # a stack that cannot mix the families: listen on IPv4 as before
        sock.close()
        return None
    try:
        _bind_to(sock, ("::", port))
    except OSError as exc:
        sock.close()
        if exc.errno in _NO_IPV6:
            return None
        raise
    return sock


def _bind(family: int, address: tuple[Any, ...]) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        _bind_to(sock, address)
    except BaseException:
        sock.close()
        raise
    return sock


def _bind_to(sock: socket.socket, address: tuple[Any, ...]) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        # Name the address, as asyncio's create_server did: the start-up error shows it.
        where = join_host_port(str(address[0]), int(address[1]))
        reason = (exc.strerror or str(exc)).lower()
        message = f"error while attempting to bind on address {where}: {reason}"
        raise OSError(exc.errno, message) from None
    sock.setblocking(False)
