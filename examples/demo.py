"""The README's demo: start headwater-server on embedded defaults and use it with nats-py.

Runs the real server as a child process (127.0.0.1, a free port), then pub/sub, a queue
group, request/reply; the seeds' ORDERS stream and consumers set up from YAML through the
control plane (plan, apply, plan again); durable publishes and a pull consumer with acks; and
a backup, a stream lost by hand (drift) and its verified restore.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import nats

from headwater.control import render
from headwater.control.backup import backup_stream, restore_stream
from headwater.control.documents import load_documents
from headwater.control.reconcile import apply_resources, plan_resources
from headwater.testing import ServerProcess

ORDERS_YAML = Path(__file__).resolve().parent / "orders"


async def core_demo(url: str) -> None:
    nc = await nats.connect(url, name="headwater-demo")
    got: list[str] = []

    async def on_msg(msg: nats.aio.msg.Msg) -> None:
        got.append(f"{msg.subject}: {msg.data.decode()}")

    await nc.subscribe("demo.>", cb=on_msg)

    async def echo(msg: nats.aio.msg.Msg) -> None:
        await msg.respond(msg.data.upper())

    await nc.subscribe("svc.upper", queue="workers", cb=echo)
    for i in range(3):
        await nc.publish(f"demo.greeting.{i}", f"hello {i}".encode())
    reply = await nc.request("svc.upper", b"request/reply works", timeout=2)
    await nc.flush()
    await asyncio.sleep(0.05)
    for line in got:
        print("received", line)
    print("reply:", reply.data.decode())
    try:
        await nc.request("nobody.home", b"?", timeout=2)
    except nats.errors.NoRespondersError:
        print("no responders: the server answered 503 at once")
    await nc.drain()


OWNER = "demo"
"""Who this demo is: what it creates carries headwater.io/managed-by: demo (docs/CONTROL.md)."""


async def gitops_demo(url: str) -> None:
    """The seeds' ORDERS setup kept as YAML (examples/orders/): plan, apply, plan again."""
    resources = load_documents([ORDERS_YAML])
    nc = await nats.connect(url)
    plan, _ = await plan_resources(nc, resources, owner=OWNER)
    print(render.owner_line(plan))
    print(render.summary_line(plan))
    for change in plan.changes:
        print(f"  {change.action.value} {change.key}")
    _, report = await apply_resources(nc, resources, owner=OWNER)
    print(render.report_summary(report))
    again, _ = await plan_resources(nc, resources, owner=OWNER)
    print("plan after apply:", render.summary_line(again))
    await nc.drain()


async def jetstream_demo(url: str) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    for i in range(5):
        ack = await js.publish("ORDERS.received", f"order {i}".encode())
        print(f"stored order {i} at sequence {ack.seq} (acknowledged after fsync)")
    state = (await js.stream_info("ORDERS")).state
    print(f"ORDERS holds {state.messages} messages, {state.bytes} bytes")

    # The seeds' NEW: a durable pull consumer that workers share, with explicit acks.
    workers = await js.pull_subscribe_bind(durable="NEW", stream="ORDERS")
    batch = await workers.fetch(3, timeout=2)
    for msg in batch:
        await msg.ack_sync()  # a double ack: the server confirms it recorded the ack
    print("NEW processed:", ", ".join(m.data.decode() for m in batch))
    info = await js.consumer_info("ORDERS", "NEW")
    print(f"NEW ack floor {info.ack_floor.stream_seq}, {info.num_pending} still pending")
    await nc.drain()


async def backup_demo(url: str, directory: Path) -> None:
    """Back ORDERS up, lose it, see the drift, restore it with its consumers' positions."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    result = await backup_stream(nc, "ORDERS", directory / "ORDERS")
    print(f"backup: {result.messages} messages, {result.archive_bytes} bytes of archive")
    await js.delete_stream("ORDERS")
    drift, _ = await plan_resources(nc, load_documents([ORDERS_YAML]), owner=OWNER)
    print("after deleting ORDERS by hand, plan shows drift:", render.summary_line(drift))
    await restore_stream(nc, directory / "ORDERS", verify=True)
    state = (await js.stream_info("ORDERS")).state
    info = await js.consumer_info("ORDERS", "NEW")
    print(
        f"restored: {state.messages} messages; NEW ack floor {info.ack_floor.stream_seq}, "
        f"{info.num_pending} still pending"
    )
    await nc.drain()


async def main() -> None:
    with ServerProcess("headwater", jetstream=True) as srv, tempfile.TemporaryDirectory() as tmp:
        print(f"headwater-server is listening on {srv.url}")
        await core_demo(srv.url)
        await gitops_demo(srv.url)
        await jetstream_demo(srv.url)
        await backup_demo(srv.url, Path(tmp))
    print("demo finished; the server was stopped with SIGTERM")


if __name__ == "__main__":
    asyncio.run(main())
