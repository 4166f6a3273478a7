"""KV round trips through nats-py: sequential ``kv.put`` and ``kv.get`` ops/s, both servers.

    python bench/kv_bench.py [--quick] [--ops N]

For each server (headwater-server, then nats-server, same run): create a bucket (history 1,
file storage, direct gets on as ``create_key_value`` sets them), then time N puts of 16-byte
values over 100 keys, each awaited before the next (a round trip: publish, store, ack), then
N gets of those keys (direct get ``last_by_subj``). Both servers use file storage with
periodic sync (``sync_interval: "2m"``, nats-server's default) so the rows compare like with
like. Figures are printed, never asserted (issue 5's target: at least 90% of nats-server's
ops/s).
"""

from __future__ import annotations

import argparse
import asyncio
import time

import js_config
import nats
from js_config import INTERVAL
from servers import KINDS, LABELS, running

KEYS = 100
VALUE = b"v" * 16


async def round_trips(url: str, ops: int) -> tuple[float, float]:
    """(put ops/s, get ops/s) of one server."""
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        js = nc.jetstream()
        kv = await js.create_key_value(bucket="bench", history=1)
        for i in range(KEYS):  # warm up: every key exists before the timed gets
            await kv.put(f"key{i}", VALUE)
        began = time.perf_counter()
        for i in range(ops):
            await kv.put(f"key{i % KEYS}", VALUE)
        puts = ops / (time.perf_counter() - began)
        began = time.perf_counter()
        for i in range(ops):
            await kv.get(f"key{i % KEYS}")
        gets = ops / (time.perf_counter() - began)
        return puts, gets
    finally:
        await nc.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 ops instead of 20,000")
    parser.add_argument("--ops", type=int, help="puts (and gets) per server")
    args = parser.parse_args(argv)
    ops = args.ops or (2_000 if args.quick else 20_000)
    rates: dict[str, tuple[float, float]] = {}
    with js_config.js_args(dict.fromkeys(KINDS, INTERVAL)) as per_kind:
        for kind in KINDS:
            with running(kind, per_kind[kind]) as server:
                rates[kind] = asyncio.run(round_trips(server.url, ops))
            puts, gets = rates[kind]
            print(
                f"{LABELS[kind]:<12} {ops:,} ops: put {puts:>8,.0f} ops/s, get {gets:>8,.0f} ops/s",
                flush=True,
            )
    for index, name in enumerate(("put", "get")):
        ratio = rates["headwater"][index] / rates["nats"][index]
        print(f"ratio headwater/nats-server {name}: {ratio:.2f} (target >= 0.90)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
