"""The README's demo: start headwater-server on embedded defaults and use it with nats-py.

Runs the real server as a child process (127.0.0.1, a free port), then pub/sub, a queue
group, request/reply, then a JetStream stream with durable publishes and a pull consumer.
"""

from __future__ import annotations

import asyncio

import nats

from headwater.testing import ServerProcess


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


async def jetstream_demo(url: str) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    info = await js.add_stream(name="ORDERS", subjects=["ORDERS.*"])
    print("stream created:", info.config.name, info.config.subjects)
    for i in range(5):
        ack = await js.publish("ORDERS.new", f"order {i}".encode())
        print(f"stored order {i} at sequence {ack.seq} (acknowledged after fsync)")
    state = (await js.stream_info("ORDERS")).state
    print(f"ORDERS holds {state.messages} messages, {state.bytes} bytes")

    # The seeds' DISPATCH: a durable pull consumer that workers share, with explicit acks.
    workers = await js.pull_subscribe("ORDERS.*", durable="DISPATCH")
    batch = await workers.fetch(3, timeout=2)
    for msg in batch:
        await msg.ack_sync()  # a double ack: the server confirms it recorded the ack
    print("DISPATCH processed:", ", ".join(m.data.decode() for m in batch))
    info = await js.consumer_info("ORDERS", "DISPATCH")
    print(f"DISPATCH ack floor {info.ack_floor.stream_seq}, {info.num_pending} still pending")
    await nc.drain()


async def main() -> None:
    with ServerProcess("headwater", jetstream=True) as srv:
        print(f"headwater-server is listening on {srv.url}")
        await core_demo(srv.url)
        await jetstream_demo(srv.url)
    print("demo finished; the server was stopped with SIGTERM")


if __name__ == "__main__":
    asyncio.run(main())
