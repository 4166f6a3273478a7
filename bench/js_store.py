"""A stream holding many messages: each server's RSS, and its restart-to-ready time.

The issue defines these end to end: the server process, not the store alone. Each server
runs on its own (nothing else in its heap) with periodic sync (headwater ``sync_interval
"2m"``, nats-server's default). The messages come from gobench ``core_pub`` on the stream's
subject: plain publishes are stored like acked ones, and gobench's ``js_pub_async`` cannot be
used here because it deletes its stream when it exits. Without acks there is no flow control,
and nats-server drops what its stream ingest queue cannot hold ("Dropping messages due to
excessive stream ingest rate"), so loading repeats with the shortfall until the stream holds
at least the count asked for; figures per message use the count actually stored.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

import js_config
import loads_gobench
import nats
from js_config import DEFAULT, INTERVAL
from nats.js.api import StorageType
from results import Measure, Target
from scenarios import SIZE, Plan
from servers import KINDS, LABELS, pid_of, rss_kib, running

STREAM = "GOSTORE"
SUBJECT = "gobench.core"  # where gobench core_pub publishes
FULL_MSGS = 2_000_000  # the count the targets are stated for
SETTLE_S = 0.5  # no growth over this long means the server has stored all it will
MAX_ROUNDS = 40


@dataclass(frozen=True)
class Stored:
    """One server's figures with ``msgs`` messages in the stream."""

    msgs: int  # stored (at least the count asked for)
    rounds: int  # core_pub runs it took (nats-server drops under an ingest burst)
    load_s: float
    rss_empty_kib: int  # fresh server, empty stream
    rss_loaded_kib: int  # right after loading (write-path garbage included)
    restart_s: float  # start of the process to "Server is ready"
    restart_ready_s: float  # ... to stream info answering with every message
    rss_restarted_kib: int  # after the restart


async def _stream_msgs(url: str, create: bool) -> int:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream(timeout=30)
        if create:
            await js.add_stream(name=STREAM, subjects=[SUBJECT], storage=StorageType.FILE)
        return (await js.stream_info(STREAM)).state.messages
    finally:
        await nc.close()


def _settled_count(url: str, timeout: float) -> int:
    """The stream's message count once it stops growing (the server has drained its input)."""
    deadline = time.monotonic() + timeout
    last = -1
    while time.monotonic() < deadline:
        got = asyncio.run(_stream_msgs(url, create=False))
        if got == last:
            return got
        last = got
        time.sleep(SETTLE_S)
    raise RuntimeError(f"stream still growing after {timeout:.0f} s ({last:,} msgs)")


def _load(binary: Path, url: str, msgs: int) -> tuple[int, int]:
    """Publish until the stream holds at least ``msgs``; returns (stored, publish rounds)."""
    stored = 0
    for rounds in range(1, MAX_ROUNDS + 1):
        loads_gobench.gobench(binary, url, "core_pub", msgs - stored, SIZE, timeout=600)
        stored = _settled_count(url, timeout=600)
        if stored >= msgs:
            return stored, rounds
    raise RuntimeError(f"stream holds {stored:,} of {msgs:,} msgs after {MAX_ROUNDS} rounds")


def measure_server(kind: str, msgs: int, sync: str | None) -> Stored:
    binary = loads_gobench.ensure_gobench()
    with js_config.js_args({k: sync for k in KINDS}) as args, running(kind, args[kind]) as server:
        asyncio.run(_stream_msgs(server.url, create=True))
        time.sleep(0.5)
        pid = pid_of(server)
        empty = rss_kib(pid)
        started = time.monotonic()
        stored, rounds = _load(binary, server.url, msgs)
        load_s = time.monotonic() - started
        time.sleep(0.5)
        loaded = rss_kib(pid)
        server.stop()
        started = time.monotonic()
        server.start(timeout=120)
        ready = time.monotonic() - started
        if asyncio.run(_stream_msgs(server.url, create=False)) != stored:
            raise RuntimeError(f"{LABELS[kind]} lost messages over the restart")
        answered = time.monotonic() - started
        time.sleep(0.5)
        restarted = rss_kib(pid_of(server))
    return Stored(stored, rounds, load_s, empty, loaded, ready, answered, restarted)


def stored_messages(plan: Plan) -> list[Measure]:
    """RSS with ``plan.js_stored_msgs`` messages stored, and restart-to-ready, both servers."""
    msgs = plan.js_stored_msgs
    sync = {"headwater": INTERVAL, "nats": DEFAULT}
    scenario = f"JS stream, {msgs:,} stored 16 B msgs"
    ids = ("js_store.rss", "js_store.per_msg", "js_store.restart")
    try:
        got = {kind: measure_server(kind, msgs, sync[kind]) for kind in KINDS}
    except (RuntimeError, loads_gobench.GobenchUnavailable, OSError) as exc:
        reason = str(exc).splitlines()[0][:200]
        return [
            Measure(i, scenario, "gobench", "-", None, None, None, f"n/a: {reason}") for i in ids
        ]
    hw, nt = got["headwater"], got["nats"]
    full = msgs >= FULL_MSGS
    target_note = "" if full else f"targets apply to {FULL_MSGS:,} msgs; "

    def mb(kib: int) -> float:
        return kib * 1024 / 1e6

    def per_msg(s: Stored) -> float:
        return (s.rss_restarted_kib - s.rss_empty_kib) * 1024 / s.msgs

    modes = f"hw {js_config.describe(sync['headwater'])}, nats {js_config.describe(sync['nats'])}"
    return [
        Measure(
            "js_store.rss",
            scenario,
            "gobench",
            "RSS MB",
            mb(hw.rss_restarted_kib),
            mb(nt.rss_restarted_kib),
            None,
            f"{modes}; after a restart; right after loading: hw {mb(hw.rss_loaded_kib):.1f}, "
            f"nats {mb(nt.rss_loaded_kib):.1f}; empty stream: hw {mb(hw.rss_empty_kib):.1f}, "
            f"nats {mb(nt.rss_empty_kib):.1f}; loaded by core_pub in {hw.load_s:.1f} s "
            f"({hw.rounds} rounds) / {nt.load_s:.1f} s ({nt.rounds} rounds): stored "
            f"{hw.msgs:,} / {nt.msgs:,}",
        ),
        Measure(
            "js_store.per_msg",
            scenario,
            "gobench",
            "B/msg",
            per_msg(hw),
            per_msg(nt),
            Target("headwater_max", 64.0, "hw <= 64 B") if full else None,
            f"{target_note}(RSS after restart - RSS with the stream empty) / msgs",
        ),
        Measure(
            "js_store.restart",
            scenario,
            "gobench",
            "restart s",
            hw.restart_s,
            nt.restart_s,
            Target("headwater_max", 5.0, "hw <= 5 s") if full else None,
            f"{target_note}process start to 'Server is ready'; to stream info with every "
            f"msg: hw {hw.restart_ready_s:.2f} s, nats {nt.restart_ready_s:.2f} s",
        ),
    ]
