"""Consumer lifecycle for the JetStream service: create, update, delete, recover, expire.

A stream's consumers live in ``stream.consumers`` (name -> :class:`.consumer.Consumer`). The
manager wires each one to its stream (interest filters for interest retention, the
``CONSUMER.MSG.NEXT`` subscription of pull consumers, push delivery, durable state on disk)
and sends the consumer advisories.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from headwater.server.jetstream import errors, groupops
from headwater.server.jetstream.wire import dumps, rfc3339
from headwater.server.subscription import Subscription

from . import config as ccfg
from . import state as cstate
from .config import cfg_get
from .consumer import Consumer, Pending
from .push import PushDelivery

if TYPE_CHECKING:
    from headwater.server.jetstream.service import JetStreamService
    from headwater.server.jetstream.stream import Stream

__all__ = ["ConsumerManager"]

log = logging.getLogger("headwater.jetstream")

ADVISORY = "$JS.EVENT.ADVISORY.CONSUMER"
METRIC = "$JS.EVENT.METRIC.CONSUMER.ACK"


def sample_rate(cfg: Any) -> int:
    """``sample_freq`` ("80" or "80%") as a percentage; 0 when unset or unreadable."""
    text = str(cfg_get(cfg, "sample_freq", "") or "").strip().rstrip("%")
    try:
        return max(0, min(int(text), 100))
    except ValueError:
        return 0


class StateWriter(Protocol):
    """What keeps a consumer's state: :class:`.state.ConsumerState` on disk, or the stream's
    log for a replicated stream (:mod:`headwater.server.jetstream.groupconsumers`)."""

    def changed(self, consumer: Consumer) -> None: ...

    async def flush(self) -> None: ...


class _Wiring:
    """What the manager attached to one consumer, to detach it again."""

    def __init__(self) -> None:
        self.subs: list[Subscription] = []
        self.state: StateWriter | None = None
        self.inactive: asyncio.TimerHandle | None = None


class ConsumerManager:
    def __init__(self, service: JetStreamService) -> None:
        self.service = service
        self._wiring: dict[int, _Wiring] = {}

    # --- creation ------------------------------------------------------------------------

    def persistent(self, stream: Stream, cfg: Any) -> bool:
        return (
            stream.directory is not None
            and bool(cfg_get(cfg, "durable_name", ""))
            and not cfg_get(cfg, "mem_storage", False)
        )

    async def create(self, stream: Stream, name: str, cfg: Any) -> Consumer:
        created = time.time_ns()
        if stream.group is not None:
            # Into the stream's log: applying it here starts the live consumer.
            await stream.group.submit(
                groupops.ConsumerAdd(name, orjson.dumps(ccfg.stored_json(cfg)), created)
            )
            live = stream.consumers.get(name)
            if live is None:  # this replica stopped leading right after
                raise errors.CLUSTER_NOT_AVAIL.exc()
            return live
        consumer = Consumer(stream, name, cfg, created)
        directory = None
        if self.persistent(stream, cfg):
            assert stream.directory is not None
            directory = cstate.consumer_dir(stream.directory, name)
            await asyncio.to_thread(cstate.write_meta, directory, ccfg.stored_json(cfg), created)
        self._attach(consumer, fresh=True, directory=directory)
        self._advise(stream, name, "create")
        return consumer

    def recover(self, stream: Stream) -> None:
        """Reopen the durable consumers saved under the stream's directory."""
        if stream.directory is None:
            return
        for item in cstate.load_consumers(stream.directory):
            try:
                cfg = ccfg.from_stored(item.config_json)
                consumer = Consumer(stream, item.name, cfg, item.created_ns)
                if item.state is not None:
                    cstate.restore(consumer, item.state)
                else:
                    # Never dropped for a lost state: it starts over from its config.
                    consumer.position_after_loss()
            except Exception as exc:
                log.error("Error recreating consumer %s > %s: %s", stream.name, item.name, exc)
                continue
            self._attach(consumer, fresh=False, directory=item.directory, gen=item.gen)
            wiring = self._wiring.get(id(consumer))
            if item.state is None and wiring is not None and wiring.state is not None:
                wiring.state.changed(consumer)  # the new starting point, saved
            if item.skipped:
                self._state_recovered(consumer, item)

    def _state_recovered(self, consumer: Consumer, item: cstate.StoredConsumer) -> None:
        """Some of the consumer's files were unreadable (a power cut during an unsynced
        write, a damaged disk): say so, and what it was recovered from."""
        fallback = "saved" if item.state is not None else "config"
        log.warning(
            "consumer '%s > %s': unreadable state files (%s); recovered from the %s state: "
            "delivered stream seq %d, ack floor stream seq %d",
            consumer.stream.name,
            consumer.name,
            "; ".join(item.skipped),
            "last readable" if item.state is not None else "config's starting",
            consumer.delivered_stream_seq(),
            consumer.asflr,
        )
        body = self._base("consumer_state_recovered", consumer.stream, consumer.name)
        body |= {
            "recovered_from": fallback,
            "unreadable": item.skipped,
            "delivered_stream_seq": consumer.delivered_stream_seq(),
            "ack_floor_stream_seq": consumer.asflr,
        }
        subject = f"{ADVISORY}.STATE_RECOVERED.{consumer.stream.name}.{consumer.name}"
        self._publish_advisory(subject, body)

    async def restore(
        self, stream: Stream, name: str, cfg: Any, created_ns: int, state: bytes
    ) -> Consumer:
        """Add a consumer taken from a backup, with its delivery state (stream restore)."""
        consumer = Consumer(stream, name, cfg, created_ns)
        cstate.restore(consumer, state)
        directory = None
        if self.persistent(stream, cfg):
            assert stream.directory is not None
            directory = cstate.consumer_dir(stream.directory, name)
            await asyncio.to_thread(cstate.write_meta, directory, ccfg.stored_json(cfg), created_ns)
        self._attach(consumer, fresh=False, directory=directory)
        wiring = self._wiring.get(id(consumer))
        if wiring is not None and wiring.state is not None:
            wiring.state.changed(consumer)  # the restored state, saved as any later change
        return consumer

    def start_live(
        self,
        stream: Stream,
        name: str,
        cfg: Any,
        created_ns: int,
        state: bytes,
        writer: Callable[[Consumer, Any], StateWriter],
        *,
        created: bool,
    ) -> None:
        """Run a replicated stream's consumer here, its leader, from its recorded state;
        ``writer(consumer, propose)`` keeps its state in the stream's log. ``created``: it is
        new (the create advisory goes)."""
        assert stream.group is not None
        consumer = Consumer(stream, name, cfg, created_ns)
        cstate.restore(consumer, state)
        self._attach(consumer, fresh=False, writer=writer(consumer, stream.group.propose))
        if created:
            self._advise(stream, name, "create")

    def stop_live(self, consumer: Consumer, *, deleted: bool, reason: str | None = None) -> None:
        """Stop a replicated stream's live consumer here: deleted, or no longer leading."""
        stream = consumer.stream
        self._detach(consumer, deleted=deleted, reason=reason)
        stream.consumers.pop(consumer.name, None)
        self._refresh_interest(stream)
        if deleted:
            self._advise(stream, consumer.name, "delete")

    def _attach(
        self,
        consumer: Consumer,
        *,
        fresh: bool,
        directory: Any = None,
        gen: int = 0,
        writer: StateWriter | None = None,
    ) -> None:
        stream = consumer.stream
        wiring = _Wiring()
        self._wiring[id(consumer)] = wiring
        stream.consumers[consumer.name] = consumer
        wiring.state = writer
        if directory is not None:
            wiring.state = cstate.ConsumerState(consumer, directory, self.service.sync, gen)
        consumer.on_max_deliveries = self._max_deliveries
        consumer.on_terminated = self._terminated
        consumer.on_naked = self._naked
        consumer.on_acked = self._ack_metric if sample_rate(consumer.config) > 0 else None
        for prefix in self.service.api_prefixes:
            subject = f"{prefix}.CONSUMER.MSG.NEXT.{stream.name}.{consumer.name}"
            wiring.subs.append(stream.client.subscribe(subject, self._make_next(consumer)))
        if not consumer.is_pull:
            consumer.push = PushDelivery(consumer)
        self._refresh_interest(stream)
        consumer.start(fresh=fresh)
        if consumer.push is not None:
            consumer.push.start()
        if fresh and wiring.state is not None:
            wiring.state.changed(consumer)
        self._arm_inactive(consumer)

    @staticmethod
    def _make_next(consumer: Consumer) -> Any:
        def on_next(
            sub: Subscription, subject: str, reply: str, hdr: bytes | None, payload: bytes
        ) -> None:
            consumer.request_next(reply, bytes(payload))

        return on_next

    def _refresh_interest(self, stream: Stream) -> None:
        if stream.group is not None:
            return  # its records decide, on every replica alike (groupconsumers)
        filters: list[str] = []
        for c in stream.consumers.values():
            filters.extend(c.filters or [""])
        stream.interest_filters = filters

    async def update(self, consumer: Consumer, cfg: Any) -> None:
        group = consumer.stream.group
        if group is not None:
            # Into the stream's log: applying it here reconfigures the live consumer.
            stored = orjson.dumps(ccfg.stored_json(cfg))
            await group.submit(groupops.ConsumerAdd(consumer.name, stored, consumer.created_ns))
            return
        # Write the new config first and swap it in only once it is on disk: a failed write
        # (raised to the API, which replies with an error) leaves the consumer as it was.
        wiring = self._wiring.get(id(consumer))
        if wiring is not None and isinstance(wiring.state, cstate.ConsumerState):
            await asyncio.to_thread(
                cstate.write_meta,
                wiring.state.directory,
                ccfg.stored_json(cfg),
                consumer.created_ns,
            )
        self.reconfigure(consumer, cfg)

    def reconfigure(self, consumer: Consumer, cfg: Any) -> None:
        """Take an updated config now (stored already, or in the stream's log)."""
        consumer.reconfigure(cfg)
        consumer.on_acked = self._ack_metric if sample_rate(cfg) > 0 else None
        self._refresh_interest(consumer.stream)
        consumer.kick()

    # --- removal -------------------------------------------------------------------------

    async def delete(self, consumer: Consumer, *, advise: bool = True) -> None:
        stream = consumer.stream
        if stream.group is not None:
            # Into the stream's log: applying it here stops the live consumer.
            await stream.group.submit(groupops.ConsumerDelete(consumer.name))
            await stream.consumer_removed(consumer)
            return
        self._detach(consumer, deleted=True)
        stream.consumers.pop(consumer.name, None)
        self._refresh_interest(stream)
        if stream.directory is not None:
            directory = cstate.consumer_dir(stream.directory, consumer.name)
            await asyncio.to_thread(cstate.remove_consumer_dir, directory)
        if advise:
            self._advise(stream, consumer.name, "delete")
        await stream.consumer_removed(consumer)

    def _detach(self, consumer: Consumer, *, deleted: bool, reason: str | None = None) -> None:
        consumer.stop(deleted=deleted, reason=reason)
        wiring = self._wiring.pop(id(consumer), None)
        if wiring is None:
            return
        for sub in wiring.subs:
            consumer.client.unsubscribe(sub)
        if wiring.inactive is not None:
            wiring.inactive.cancel()

    async def close_stream(self, stream: Stream, *, deleted: bool) -> None:
        """The stream is closing (shutdown) or going away: stop all its consumers."""
        for consumer in list(stream.consumers.values()):
            wiring = self._wiring.get(id(consumer))
            self._detach(consumer, deleted=deleted)
            if not deleted and wiring is not None and wiring.state is not None:
                try:
                    await wiring.state.flush()
                except OSError as exc:
                    log.error("consumer %s: final state write failed: %s", consumer.name, exc)
        stream.consumers.clear()

    # --- inactivity ----------------------------------------------------------------------

    def _arm_inactive(self, consumer: Consumer) -> None:
        threshold = int(cfg_get(consumer.config, "inactive_threshold", 0))
        wiring = self._wiring.get(id(consumer))
        if threshold <= 0 or wiring is None:
            return
        loop = asyncio.get_running_loop()
        wiring.inactive = loop.call_later(threshold / 1e9, self._check_inactive, consumer)

    def _check_inactive(self, consumer: Consumer) -> None:
        wiring = self._wiring.get(id(consumer))
        if wiring is None or consumer.closed:
            return
        wiring.inactive = None
        threshold = int(cfg_get(consumer.config, "inactive_threshold", 0))
        if consumer.push is not None:
            active = consumer.push.has_interest()
            if active:
                consumer.last_active = time.time_ns()
        else:
            active = len(consumer.waiting) > 0
        idle_ns = time.time_ns() - max(consumer.last_active, consumer.created_ns)
        if not active and idle_ns >= threshold:
            asyncio.get_running_loop().create_task(self._expire(consumer))
            return
        wait = threshold if active else threshold - idle_ns
        wiring.inactive = asyncio.get_running_loop().call_later(
            max(wait, 1_000_000) / 1e9, self._check_inactive, consumer
        )

    async def _expire(self, consumer: Consumer) -> None:
        try:
            await self.delete(consumer)
        except errors.ApiErrorException as exc:
            # A replicated stream's replica that stopped leading meanwhile: its next leader
            # checks the consumer's activity again.
            log.info("consumer %s not deleted for inactivity: %s", consumer.name, exc)

    # --- advisories ----------------------------------------------------------------------

    def _publish_advisory(self, subject: str, body: dict[str, Any]) -> None:
        client = self.service.client
        if client is None:
            return
        if self.service.domain:
            body["domain"] = self.service.domain
        client.publish(subject, dumps(body))

    def _base(self, kind: str, stream: Stream, consumer: str) -> dict[str, Any]:
        return {
            "type": f"io.nats.jetstream.advisory.v1.{kind}",
            "id": secrets.token_hex(11),
            "timestamp": rfc3339(time.time_ns()),
            "stream": stream.name,
            "consumer": consumer,
        }

    def _advise(self, stream: Stream, consumer: str, action: str) -> None:
        subject = f"{ADVISORY}.{'CREATED' if action == 'create' else 'DELETED'}"
        body = self._base("consumer_action", stream, consumer) | {"action": action}
        self._publish_advisory(f"{subject}.{stream.name}.{consumer}", body)

    def _max_deliveries(self, consumer: Consumer, seq: int, deliveries: int) -> None:
        body = self._base("max_deliver", consumer.stream, consumer.name)
        body |= {"stream_seq": seq, "deliveries": deliveries}
        subject = f"{ADVISORY}.MAX_DELIVERIES.{consumer.stream.name}.{consumer.name}"
        self._publish_advisory(subject, body)

    def _terminated(self, consumer: Consumer, sseq: int, cseq: int, dc: int, reason: str) -> None:
        body = self._base("terminated", consumer.stream, consumer.name)
        body |= {"consumer_seq": cseq, "stream_seq": sseq, "deliveries": dc}
        if reason:
            body["reason"] = reason
        subject = f"{ADVISORY}.MSG_TERMINATED.{consumer.stream.name}.{consumer.name}"
        self._publish_advisory(subject, body)

    def _naked(self, consumer: Consumer, sseq: int, cseq: int, dc: int) -> None:
        body = self._base("nak", consumer.stream, consumer.name)
        body |= {"consumer_seq": cseq, "stream_seq": sseq, "deliveries": dc}
        subject = f"{ADVISORY}.MSG_NAKED.{consumer.stream.name}.{consumer.name}"
        self._publish_advisory(subject, body)

    def _ack_metric(self, consumer: Consumer, sseq: int, pend: Pending, dc: int) -> None:
        """``sample_freq`` percent of acks publish their delay (the seeds' ack sampling)."""
        if random.random() * 100 >= sample_rate(consumer.config):
            return
        body = self._base("consumer_ack", consumer.stream, consumer.name)
        body["type"] = "io.nats.jetstream.metric.v1.consumer_ack"
        body |= {
            "consumer_seq": pend.cseq,
            "stream_seq": sseq,
            "ack_time": max(time.time_ns() - pend.ts, 0),
            "deliveries": dc,
        }
        subject = f"{METRIC}.{consumer.stream.name}.{consumer.name}"
        self._publish_advisory(subject, body)

    def new_name(self, stream: Stream) -> str:
        while True:
            name = ccfg.ephemeral_name()
            if name not in stream.consumers:
                return name
