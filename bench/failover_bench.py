"""Leader failover of a replicated (R3) stream: prints the figures docs/BENCHMARKS.md
("Replicated streams: failover") quotes.

Run: ``python bench/failover_bench.py [--runs 5]``. No asserts; the figures are for reading.

Each run starts a 3-server cluster of one kind (Headwater, or nats-server), creates an R3
memory stream, publishes a few messages through a follower's server, kills the stream
leader's server with SIGKILL (its etcd member with it, on Headwater), and publishes through
the same follower's server every 50 ms (each request waiting at most 250 ms) until one is
acknowledged: the time from the kill to that acknowledgement is the failover. Both kinds run
the same scenario in the same session; the ratio is Headwater's median over nats-server's.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from cluster.helpers import connect, crash, js_api, wait_jetstream

from headwater.testing import Cluster

LIMIT_S = 30.0


async def one_run(kind: str) -> float:
    with Cluster(kind, 3, jetstream=True) as cluster:
        await wait_jetstream(cluster)
        clients = [await connect(url) for url in cluster.urls]
        try:
            config = {"name": "S", "subjects": ["s"], "storage": "memory", "num_replicas": 3}
            created = await js_api(clients[0], "$JS.API.STREAM.CREATE.S", config, timeout=10)
            leader = cluster.names.index(created["cluster"]["leader"])
            follower = clients[(leader + 1) % 3]
            for _ in range(5):
                await follower.request("s", b"before", timeout=2)
            crash(cluster, leader)
            began = time.monotonic()
            while time.monotonic() - began < LIMIT_S:
                try:
                    await follower.request("s", b"after", timeout=0.25)
                    return time.monotonic() - began
                except (NoRespondersError, NatsTimeoutError):
                    await asyncio.sleep(0.05)
            return float("inf")
        finally:
            for nc in clients:
                if nc.is_connected:
                    await nc.close()


async def main(runs: int) -> None:
    medians = {}
    for kind in ("headwater", "nats"):
        times = [await one_run(kind) for _ in range(runs)]
        medians[kind] = statistics.median(times)
        shown = ", ".join(f"{t:.2f}" for t in times)
        print(f"{kind:>10}: median {medians[kind]:.2f} s  (runs: {shown})")
    print(f"     ratio: {medians['headwater'] / medians['nats']:.2f}x of nats-server's time")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    asyncio.run(main(parser.parse_args().runs))
