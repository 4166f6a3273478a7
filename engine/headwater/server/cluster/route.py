"""One route: a connection to another server of the cluster, either side of it.

The handshake follows nats-server: the side that dials (solicits) sends ``CONNECT`` then its
``INFO``; the side that accepts sends its ``INFO`` at once and waits for the ``CONNECT``
(checked against ``cluster { authorization }`` and the cluster name). A route is registered
with the :class:`~headwater.server.cluster.manager.Cluster` when the remote ``INFO``
arrives; from then on it carries interest (RS+/RS-) and messages (RMSG/HMSG) both ways.

The remote's interest lives in the server's sublist as :class:`RemoteSubscription`\\ s whose
client is this route, so routing finds local and remote receivers in one match.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import TYPE_CHECKING, Any

from headwater.server.budget import SLICE_S
from headwater.server.cluster import wire
from headwater.server.connections import auth
from headwater.server.connections.timers import Keepalive, Timers
from headwater.server.protocol import encoder
from headwater.server.protocol.parser import ProtocolError
from headwater.server.subscription import Subscription

if TYPE_CHECKING:
    from headwater.server.cluster.manager import Cluster
    from headwater.server.cluster.urls import RouteURL

log = logging.getLogger("headwater.server")

#: The only account until multi-tenancy (issue 19): nats-server's global account.
GLOBAL_ACCOUNT = "$G"

#: Operations between two looks at the clock while working through one read.
CLOCK_EVERY = 64


class RemoteSubscription(Subscription):
    """Interest of a remote server: one per (subject, queue) and route."""

    __slots__ = ("key", "weight")

    def __init__(self, route: RouteConnection, subject: str, queue: str | None, weight: int):
        key = f"{subject} {queue}" if queue else subject
        super().__init__(route, subject, queue, key)
        self.key = key
        self.weight = weight


class RouteConnection(asyncio.Protocol):
    """Server side of one route connection (accepted or solicited)."""

    kind = "route"
    echo = True
    headers = True

    def __init__(self, cluster: Cluster, cid: int, url: RouteURL | None = None) -> None:
        self.cluster = cluster
        self.server = cluster.server
        self.cid = cid
        self.url = url
        """The URL dialled, for a solicited route; None for an accepted one."""
        self.solicited = url is not None
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_event_loop()
        self.parser = wire.RouteParser(self.server.settings.max_control_line)
        self.subs: dict[str, RemoteSubscription] = {}
        self.closed = False
        self.registered = False
        self.connected = False  # the remote's CONNECT checked (accepted side)
        self.remote_id = ""
        self.remote_name = ""
        self.remote_info: dict[str, Any] = {}
        self.connect_urls: list[str] = []
        self.ip = ""
        self.port = 0
        self.start = time.time()
        self.last_activity = self.start
        self.in_msgs = self.in_bytes = self.out_msgs = self.out_bytes = 0
        self.out: list[bytes] = []
        self.out_size = 0
        self.flush_scheduled = False
        self.close_reason = ""
        self.rtt = 0.0
        self.timers = Timers()
        self.keepalive = Keepalive(self, cluster.settings, self._stale)
        self._held: list[wire.RoutedOp] = []
        self._early: list[bytes] = []
        self._deferred: asyncio.Handle | None = None
        self._checking: asyncio.Future[str | None] | None = None
        self.closed_future: asyncio.Future[str] = self.loop.create_future()

    # --- transport callbacks -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername") or ("", 0)
        self.ip, self.port = str(peer[0]), int(peer[1])
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # Without it, Nagle's algorithm holds a small write until the peer's delayed ACK
            # (40 ms): routes then move in bursts a few dozen times a second.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        cluster = self.cluster
        if self.solicited:
            assert self.url is not None
            self.send(wire.connect(cluster.connect_fields(self.url)))
            self.send(wire.info(cluster.route_info()))
        else:
            self.send(wire.info(cluster.route_info()))
            settings = cluster.settings
            self.timers.arm("auth", settings.auth_timeout, self._auth_timeout)
        self.keepalive.start(cluster.settings.ping_interval)
        # A peer that never completes the handshake (not a NATS server, or stuck) is closed
        # instead of holding a route slot and its dialling loop forever.
        self.timers.arm("handshake", 2 * cluster.settings.auth_timeout, self._handshake_timeout)

    def register(self, info: dict[str, Any], connect_urls: list[str]) -> None:
        """The cluster accepted this route: it now carries interest and messages."""
        self.registered = True
        self.remote_info = info
        self.connect_urls = connect_urls
        self.timers.disarm("handshake")

    def _handshake_timeout(self) -> None:
        self.timers.fired("handshake")
        if not self.registered and not self.closed:
            log.error(
                "rid:%d route %s: no INFO within the handshake time", self.cid, self.describe()
            )
            self.close("Stale Connection")

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if self._deferred is not None or self._checking is not None:
            self._early.append(data)
            return
        began = time.perf_counter()
        try:
            ops = self.parser.feed(data)
        except ProtocolError as exc:
            self._protocol_error(exc)
            return
        self.last_activity = time.time()
        self._run_ops(ops, began)

    def _run_ops(self, ops: list[wire.RoutedOp], began: float) -> None:
        until = began + SLICE_S
        check_at = CLOCK_EVERY
        for i, op in enumerate(ops):
            if i >= check_at:
                if time.perf_counter() >= until:
                    self._defer(ops[i:])
                    return
                check_at = i + CLOCK_EVERY
            try:
                self._op(op)
            except ProtocolError as exc:
                self._protocol_error(exc)
                return
            if self.closed:
                return
            if self._checking is not None:
                self._hold(ops[i + 1 :])
                return

    def _defer(self, rest: list[wire.RoutedOp]) -> None:
        """A read that ran a whole slice finishes on a later pass, reading paused meanwhile
        (as a client connection does): one busy route never stalls the loop."""
        self._hold(rest)
        self._deferred = self.loop.call_soon(self._resume)

    def _hold(self, rest: list[wire.RoutedOp]) -> None:
        assert self.transport is not None
        self._held = rest
        self.transport.pause_reading()

    def _waiting(self) -> bool:
        return self.closed or self._deferred is not None or self._checking is not None

    def _resume(self) -> None:
        """Run what was held (for a later pass or a password check), then the bytes read
        meanwhile, then read again, unless the work stopped once more."""
        self._deferred = None
        if self.closed:
            return
        held, self._held = self._held, []
        self._run_ops(held, time.perf_counter())
        if self._waiting():
            return
        early, self._early = self._early, []
        for chunk in early:
            self.data_received(chunk)
        if not self._waiting() and self.transport is not None:
            self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.close("Client Closed" if exc is None else "Read Error", lost=True)

    def pause_writing(self) -> None:
        self.timers.arm("write", self.server.settings.write_deadline, self._write_deadline)

    def resume_writing(self) -> None:
        self.timers.disarm("write")

    # --- operations ----------------------------------------------------------------------

    def _op(self, op: wire.RoutedOp) -> None:
        kind = op[0]
        if kind == wire.BATCH:
            if self.registered:
                self._on_msg_batch(op[1], op[2], op[3])
            return
        if kind == wire.MSG:
            if self.registered:
                self._on_msg(op[1], op[2], op[3], op[4], op[5], op[6])
            return
        if kind == wire.SUB:
            if self.registered:
                self._on_sub(op[1], op[2], op[3], op[4])
            return
        if kind == wire.UNSUB:
            if self.registered:
                self._on_unsub(op[1], op[2], op[3])
            return
        if kind == wire.PING:
            self.send(b"PONG\r\n")
        elif kind == wire.PONG:
            self.keepalive.pong()
        elif kind == wire.CONNECT:
            self._on_connect(op[1])
        elif kind == wire.INFO:
            self._on_info(op[1])
        elif kind == wire.ERR:
            # nats-server tries a route of its own for its system account first, and gives
            # it up with this error when the peer does not pool: expected, not a fault.
            level = logging.DEBUG if "dedicated route" in op[1] else logging.ERROR
            log.log(level, "rid:%d route error from %s: %s", self.cid, self.describe(), op[1])

    def _on_connect(self, fields: dict[str, Any]) -> None:
        if self.solicited or self.connected:
            return  # nats-server ignores a CONNECT it does not expect
        refusal = self.cluster.check_connect(fields)
        if isinstance(refusal, auth.SecretCheck):
            # A bcrypt hash: checked off the loop, the rest of the read held till then.
            self._checking = self.loop.run_in_executor(auth.EXECUTOR, auth.run_check, refusal)
            self._checking.add_done_callback(self._checked)
            return
        if refusal is not None:
            self._refuse(*refusal)
            return
        self.connected = True
        self.timers.disarm("auth")

    def _checked(self, done: asyncio.Future[str | None]) -> None:
        self._checking = None
        if self.closed or done.cancelled():
            return
        if done.result() is None:
            self._refuse("Authorization Violation", "Authorization Violation")
            return
        self.connected = True
        self.timers.disarm("auth")
        self._resume()

    def _refuse(self, reason: str, text: str) -> None:
        """Refuse an accepted route: ``text`` goes to the log and, as ``-ERR``, to the
        dialling server (which logs it too); ``reason`` is the close reason."""
        log.error("rid:%d route from %s: %s", self.cid, self.describe(), text)
        self.send_err(text)
        self.close(reason)

    def _on_info(self, info: dict[str, Any]) -> None:
        if not self.registered:
            if not self.solicited and not self.connected:
                # An INFO before the CONNECT: nats-server requires the CONNECT first.
                self.send_err("Authorization Violation")
                self.close("Authentication Failure")
                return
            self.cluster.handshake(self, info)
            return
        remote = str(info.get("server_id") or "")
        if remote and remote != self.remote_id:
            self.cluster.learned(info, via=self)  # gossip about another server
            return
        self.cluster.updated(self, info)

    def _on_sub(self, account: str, subject: str, queue: str | None, weight: int) -> None:
        if account != GLOBAL_ACCOUNT:
            return  # other accounts ($SYS of nats-server) have no receivers here
        key = f"{subject} {queue}" if queue else subject
        sub = self.subs.get(key)
        if sub is None:
            sub = RemoteSubscription(self, subject, queue, weight)
            try:
                self.server.subscribe(sub)
            except ValueError:
                log.debug("rid:%d invalid remote subject %r", self.cid, subject)
                return
            self.subs[key] = sub
        elif queue:
            sub.weight = weight

    def _on_unsub(self, account: str, subject: str, queue: str | None) -> None:
        if account != GLOBAL_ACCOUNT:
            return
        sub = self.subs.pop(f"{subject} {queue}" if queue else subject, None)
        if sub is not None:
            self.server.unsubscribe(sub)

    def _on_msg(
        self,
        account: str,
        subject: str,
        reply: str,
        queues: tuple[str, ...],
        hdr: bytes | None,
        payload: bytes,
    ) -> None:
        size = len(payload) + (len(hdr) if hdr is not None else 0)
        self.in_msgs += 1
        self.in_bytes += size
        if account != GLOBAL_ACCOUNT:
            return
        if "@" in reply:
            # ``<reply>@<deliver subject>``: routed on the deliver subject, shown as ``subject``
            # (a consumer's delivery; see Server._route_clustered).
            reply, _, deliver = reply.rpartition("@")
            self.server.route_from_route(self, deliver, reply, queues, hdr, payload, size, subject)
            return
        self.server.route_from_route(self, subject, reply, queues, hdr, payload, size)

    def _on_msg_batch(self, account: str, subject: str, payloads: list[bytes]) -> None:
        total = sum(map(len, payloads))
        self.in_msgs += len(payloads)
        self.in_bytes += total
        if account == GLOBAL_ACCOUNT:
            self.server.route_batch(self, subject, payloads, total)

    # --- outbound ------------------------------------------------------------------------

    def send_msg(
        self,
        subject: str,
        reply: str,
        queues: list[str] | tuple[str, ...],
        hdr: bytes | None,
        payload: bytes,
    ) -> None:
        if self.closed or not self.registered:
            return
        self.out_msgs += 1
        self.out_bytes += len(payload) + (len(hdr) if hdr is not None else 0)
        self.send(wire.routed_msg(GLOBAL_ACCOUNT, subject, reply, queues, hdr, payload))

    def deliver(
        self, sub: Subscription, subject: str, reply: str, hdr: bytes | None, payload: bytes
    ) -> None:
        """A delivery through a path that does not know routes (one message, no queues)."""
        self.send_msg(subject, reply, (), hdr, payload)

    def deliver_batch(
        self, sub: Subscription | None, subject: str, payloads: list[bytes], total: int
    ) -> None:
        """Plain messages for the remote server in one write (``sub`` is not needed: a route
        gets one RMSG per message whatever matched)."""
        if self.closed or not self.registered:
            return
        lead = b"RMSG $G %s " % subject.encode()
        size = len(payloads[0])
        if total == size * len(payloads) and all(len(p) == size for p in payloads):
            line = lead + b"%d\r\n" % size
            data = line + (b"\r\n" + line).join(payloads) + b"\r\n"
        else:
            data = b"".join([lead + b"%d\r\n%s\r\n" % (len(p), p) for p in payloads])
        self.out_msgs += len(payloads)
        self.out_bytes += total
        self.send(data)

    def send(self, data: bytes) -> None:
        if self.closed:
            return
        self.out.append(data)
        self.out_size += len(data)
        if self.out_size + self._pending() > self.server.settings.max_pending:
            self.flush()
            if self._pending() > self.server.settings.max_pending:
                log.error("rid:%d route to %s is a slow consumer", self.cid, self.describe())
                self.server.slow_consumers += 1
                self.close("Slow Consumer (Pending Bytes)", abort=True)
                return
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.loop.call_soon(self.flush)

    def _pending(self) -> int:
        return self.transport.get_write_buffer_size() if self.transport is not None else 0

    def flush(self) -> None:
        self.flush_scheduled = False
        if not self.out or self.transport is None or self.closed:
            return
        out, self.out, self.out_size = self.out, [], 0
        self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def send_err(self, text: str) -> None:
        self.send(encoder.err(text))

    # --- timers --------------------------------------------------------------------------

    def _stale(self) -> None:
        """More PINGs went unanswered than ``cluster { ping_max }`` allows."""
        log.error("rid:%d route to %s is stale", self.cid, self.describe())
        self.send_err("Stale Connection")
        self.close("Stale Connection")

    def _auth_timeout(self) -> None:
        self.timers.fired("auth")
        if not self.connected and not self.closed:
            log.error("rid:%d route from %s: authentication timeout", self.cid, self.describe())
            self.send_err("Authentication Timeout")
            self.close("Authentication Timeout")

    def _write_deadline(self) -> None:
        self.timers.fired("write")
        if not self.closed:
            log.error("rid:%d route to %s: write deadline exceeded", self.cid, self.describe())
            self.close("Slow Consumer (Write Deadline)", abort=True)

    # --- lifecycle -----------------------------------------------------------------------

    def _protocol_error(self, exc: ProtocolError) -> None:
        log.error("rid:%d Router parser ERROR on %s: %s", self.cid, self.describe(), exc)
        if exc.text is not None:
            self.send_err(exc.text)
        self.close("Protocol Violation")

    def describe(self) -> str:
        name = self.remote_name or self.remote_id
        where = f"{self.ip}:{self.port}"
        return f"{name} ({where})" if name else where

    def close(self, reason: str, abort: bool = False, lost: bool = False) -> None:
        if self.closed:
            return
        if not abort and not lost:
            self.flush()
        self.closed = True
        self.close_reason = reason
        self.timers.clear()
        for sub in self.subs.values():
            self.server.unsubscribe(sub)
        self.subs.clear()
        self.out.clear()
        self.cluster.route_closed(self)
        if self.transport is not None and not lost:
            if abort:
                self.transport.abort()
            else:
                self.transport.close()
        if not self.closed_future.done():
            self.closed_future.set_result(reason)


__all__ = ["GLOBAL_ACCOUNT", "RemoteSubscription", "RouteConnection"]
