"""Client workloads that record a :class:`headwater.testing_history.History` (nats-py).

Three kinds of worker run together until ``stop`` is set (each also bounded in count):

- publishers: each publishes ids ``p<i>-<n>`` (payload and ``Nats-Msg-Id`` alike) to
  ``<subject>.<i>``; an attempt that times out is retried with the same id (deduplication
  must keep one copy), at most ``retries`` times, then the publisher moves on;
- KV clients: get / put / update (with the revision the client last saw of the key, 0 when
  it saw none: create) on a few keys, values ``c<j>-<n>`` unique per write;
- one worker on a durable pull consumer: fetch, then ``ack_sync`` every message.

Outcomes are classified strictly: ``ok`` only on an answer that says so, ``fail`` only when
the operation certainly took no effect (no responders: no stream subscribed; an update
refused for a wrong last sequence; a key not found), and ``info`` for everything else
(timeouts, dropped connections, other API errors), which the checkers treat as "may have
happened, even later". After an ``info`` a worker takes a new process name (Jepsen's
convention: the old one may still have an operation in flight).

Every client lists every server, its own first, and reconnects on its own.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS

from headwater.testing_history import REFUSED, History

WRONG_LAST_SEQUENCE = (10071, 10164)
NO_MESSAGE_FOUND = 10037


@dataclass
class Workload:
    urls: Sequence[str]
    stream: str = "HIST"
    subject: str = "hist"
    bucket: str = "HISTKV"
    durable: str = "WORKER"
    keys: tuple[str, ...] = ("k0", "k1", "k2")
    publishers: int = 3
    kv_clients: int = 3
    op_timeout: float = 1.0
    retries: int = 2
    max_ops: int = 20_000
    """Per worker: a bound on the loop, whatever ``stop`` does."""
    seed: int = 1

    async def connect(self, i: int) -> NATS:
        """A client preferring server ``i % n``, failing over to the others."""
        n = len(self.urls)
        servers = [self.urls[(i + k) % n] for k in range(n)]

        async def quiet(*_: object) -> None:  # reconnects are expected here
            return None

        return await nats.connect(
            servers=servers,
            dont_randomize=True,
            allow_reconnect=True,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.2,
            connect_timeout=1,
            error_cb=quiet,
            disconnected_cb=quiet,
            reconnected_cb=quiet,
        )

    async def run(self, history: History, stop: asyncio.Event) -> None:
        """Run every worker until ``stop`` is set; connections are closed after."""
        clients = [await self.connect(i) for i in range(self.publishers + self.kv_clients + 1)]
        try:
            pubs = [self.publisher(clients[i], i, history, stop) for i in range(self.publishers)]
            kvs = [
                self.kv_client(clients[self.publishers + j], j, history, stop)
                for j in range(self.kv_clients)
            ]
            await asyncio.gather(*pubs, *kvs, self.consumer(clients[-1], history, stop))
        finally:
            for nc in clients:
                await nc.close()

    async def publisher(self, nc: NATS, i: int, history: History, stop: asyncio.Event) -> None:
        js = nc.jetstream(timeout=self.op_timeout)
        gen = 0
        for n in range(self.max_ops):
            if stop.is_set():
                return
            msg_id = f"p{i}-{n}"
            for attempt in range(self.retries + 1):
                op = history.invoke(f"pub{i}.{gen}", "publish", id=msg_id, attempt=attempt)
                try:
                    ack = await js.publish(
                        f"{self.subject}.{i}", msg_id.encode(), headers={"Nats-Msg-Id": msg_id}
                    )
                except nats.js.errors.NoStreamResponseError:
                    history.fail(op, "no responders")
                    await asyncio.sleep(0.05)
                except Exception as exc:  # any other error: unknown outcome
                    history.info(op, repr(exc))
                    gen += 1
                    await asyncio.sleep(0.05)
                else:
                    history.ok(op, {"seq": ack.seq, "duplicate": bool(ack.duplicate)})
                    break
                if stop.is_set():
                    return

    async def kv_client(self, nc: NATS, j: int, history: History, stop: asyncio.Event) -> None:
        js = nc.jetstream(timeout=self.op_timeout)
        kv = await js.key_value(self.bucket)
        rng = random.Random(self.seed * 1000 + j)
        seen: dict[str, int] = {}
        gen = 0
        for n in range(self.max_ops):
            if stop.is_set():
                return
            key, roll, value = rng.choice(self.keys), rng.random(), f"c{j}-{n}"
            process = f"kv{j}.{gen}"
            if roll < 0.4:
                op = history.invoke(process, "get", key=key)
            elif roll < 0.7:
                op = history.invoke(process, "put", key=key, value=value)
            else:
                expected = seen.get(key, 0)
                op = history.invoke(process, "update", key=key, value=value, expected=expected)
            try:
                if op.kind == "get":
                    entry = await kv.get(key)
                    assert entry.value is not None and entry.revision is not None
                    history.ok(op, [entry.value.decode(), entry.revision])
                    seen[key] = entry.revision
                elif op.kind == "put":
                    seen[key] = await kv.put(key, value.encode())
                    history.ok(op, seen[key])
                else:
                    seen[key] = await kv.update(key, value.encode(), last=op.args["expected"])
                    history.ok(op, seen[key])
            except nats.js.errors.KeyNotFoundError as exc:
                code = getattr(exc.__context__, "err_code", None)
                if op.kind == "get" and code == NO_MESSAGE_FOUND:
                    history.ok(op, None)
                    seen.pop(key, None)
                else:
                    history.info(op, repr(exc.__context__ or exc))
                    gen += 1
            except nats.js.errors.KeyWrongLastSequenceError as exc:
                # nats-server says which revision it found ("wrong last sequence: 42")
                text = exc.description or ""
                history.fail(op, text if text.startswith(REFUSED) else REFUSED)
            except nats.js.errors.NoStreamResponseError:
                history.fail(op, "no responders")
            except Exception as exc:  # any other error: unknown outcome
                history.info(op, repr(exc))
                gen += 1
                await asyncio.sleep(0.05)

    async def consumer(self, nc: NATS, history: History, stop: asyncio.Event) -> None:
        js = nc.jetstream(timeout=self.op_timeout)
        psub = await js.pull_subscribe_bind(self.durable, self.stream)
        gen = 0
        for _ in range(self.max_ops):
            if stop.is_set():
                return
            op = history.invoke(f"worker.{gen}", "fetch", batch=10)
            try:
                msgs = await psub.fetch(10, timeout=self.op_timeout)
            except nats.errors.TimeoutError:
                msgs = []
            except Exception as exc:  # any other error: unknown outcome
                history.info(op, repr(exc))
                gen += 1
                await asyncio.sleep(0.05)
                continue
            delivered = [[m.metadata.sequence.stream, m.metadata.num_delivered] for m in msgs]
            history.ok(op, delivered)
            for msg in msgs:
                ack = history.invoke(f"worker.{gen}", "ack", seq=msg.metadata.sequence.stream)
                try:
                    await msg.ack_sync(timeout=self.op_timeout)
                except Exception as exc:  # unknown outcome
                    history.info(ack, repr(exc))
                    gen += 1
                else:
                    history.ok(ack)
