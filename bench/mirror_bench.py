"""Mirror catch-up: how fast a new mirror copies a stream that already holds N messages.

    python bench/mirror_bench.py [--quick] [--msgs N] [--through-consumer] [--source]

For each server (headwater-server, then nats-server, same run): fill a file stream with N
16-byte messages, create a mirror of it, and time from the create request until the mirror
holds all N. Both servers use file storage with periodic sync (``sync_interval: "2m"``,
nats-server's default), so the rows compare like with like. Default N is 1,000,000;
``--quick`` uses 100,000. Figures are printed, never asserted (issue 5's target: at least
50% of nats-server's rate).

Headwater copies an origin of the same server straight from its store before it follows it
through a consumer; ``--through-consumer`` runs headwater in JetStream domain ``hub`` and
names the origin through ``external.api: $JS.hub.API``, which it reaches through the
consumer: the path a remote origin takes. nats-server always mirrors through a consumer, so
its row is its ordinary mirror (it serves a domain's API prefix to leaf nodes, not to its
own account).

``--source`` times a stream that *sources* the origin instead of mirroring it (every message
then goes through the sourcing stream's publish path and gets a ``Nats-Stream-Source``
header), on both servers.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import js_config
import nats
from js_config import INTERVAL
from nats.aio.client import Client
from nats.js.api import ExternalStream, StorageType, StreamConfig, StreamSource
from servers import KINDS, LABELS, running

SIZE = 16
DOMAIN = "hub"
CHUNK = 5_000
"""Plain publishes per flush while filling (untimed)."""


async def _count(nc: Client, name: str) -> int:
    return int((await nc.jetstream().stream_info(name)).state.messages)


async def fill(nc: Client, name: str, subject: str, msgs: int) -> None:
    """Make ``name`` hold ``msgs`` messages; what a loaded server dropped is sent again."""
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[subject], storage=StorageType.FILE)
    payload = b"x" * SIZE
    have = 0
    while have < msgs:
        for start in range(have, msgs, CHUNK):
            for _ in range(min(CHUNK, msgs - start)):
                await nc.publish(subject, payload)
            await nc.flush()
        previous = -1
        while have != previous and have < msgs:
            previous = have
            await asyncio.sleep(0.2)
            have = await _count(nc, name)


async def catch_up(url: str, msgs: int, api: str, as_source: bool) -> float:
    """Seconds from the mirror's (or sourcing stream's) creation until it holds ``msgs``."""
    nc = await nats.connect(url, allow_reconnect=False, pending_size=256 * 1024 * 1024)
    try:
        await fill(nc, "ORIGIN", "origin.data", msgs)
        js = nc.jetstream()
        began = time.perf_counter()
        external = ExternalStream(api=api) if api else None
        source = StreamSource("ORIGIN", external=external)
        if as_source:
            config = StreamConfig(name="MIRROR", storage=StorageType.FILE, sources=[source])
        else:
            config = StreamConfig(name="MIRROR", storage=StorageType.FILE, mirror=source)
        await js.add_stream(config)
        while await _count(nc, "MIRROR") < msgs:
            await asyncio.sleep(0.02)
        return time.perf_counter() - began
    finally:
        await nc.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 messages instead of 1M")
    parser.add_argument("--msgs", type=int, help="messages in the origin stream")
    parser.add_argument(
        "--through-consumer",
        action="store_true",
        help="reach the origin through external.api (the consumer path of remote origins)",
    )
    parser.add_argument("--source", action="store_true", help="source the origin, not mirror")
    args = parser.parse_args(argv)
    msgs = args.msgs or (100_000 if args.quick else 1_000_000)
    rates: dict[str, float] = {}
    domain = DOMAIN if args.through_consumer else ""
    sync = dict.fromkeys(KINDS, INTERVAL)
    with js_config.js_args(sync) as plain, js_config.js_args(sync, domain) as in_domain:
        for kind in KINDS:
            with running(kind, (in_domain if kind == "headwater" else plain)[kind]) as server:
                api = f"$JS.{DOMAIN}.API" if domain and kind == "headwater" else ""
                seconds = asyncio.run(catch_up(server.url, msgs, api, args.source))
            rates[kind] = msgs / seconds
            how = " through a consumer" if args.through_consumer and kind == "headwater" else ""
            what = "source" if args.source else "mirror"
            print(
                f"{LABELS[kind]:<12} {what} catch-up{how} of {msgs:,} msgs: {seconds:7.2f}s "
                f"= {rates[kind]:>10,.0f} msgs/s",
                flush=True,
            )
    ratio = rates["headwater"] / rates["nats"]
    # Issue 5's target is for the mirror of an origin on the same server.
    target = "" if args.source or args.through_consumer else " (target >= 0.50)"
    print(f"ratio headwater/nats-server: {ratio:.2f}{target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
