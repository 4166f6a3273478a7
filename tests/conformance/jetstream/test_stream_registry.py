"""One stream per name, whichever paths race for it (the registry's claims).

A template creates its stream in a task that awaits (``meta.inf`` is written in a thread), and
the API worker creates streams too. A message on a template subject and a STREAM.CREATE of the
same name, sent in one write, start both paths in the same loop iteration: exactly one of them
may win, and the other must be told so, never get a second stream over the same directory.
The race is run for several names, since which path wins varies.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
from nats.aio.client import Client

from headwater.testing import ServerProcess
from support.wire import WireClient

NAMES = "abcdefgh"


async def info_of(nc: Client, name: str) -> dict[str, Any]:
    for _ in range(50):  # the losing path may still be finishing its create
        info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=5)).data)
        if "config" in info:
            return info
        await asyncio.sleep(0.1)
    raise AssertionError(f"no stream {name}: {info}")


async def race(port: int, nc: Client, token: str) -> tuple[str, dict[str, Any]]:
    name = f"race_{token}"
    wire = await WireClient.connect(port, connect={})
    create = json.dumps({"name": name, "subjects": [f"race.{token}"]})
    await wire.send(
        "SUB _R 1\r\n"
        f"PUB race.{token} 5\r\nfirst\r\n"
        f"PUB $JS.API.STREAM.CREATE.{name} _R {len(create)}\r\n{create}\r\n"
    )
    _, payload = await wire.msg(timeout=10)
    wire.writer.close()
    created = json.loads(payload)
    info = await info_of(nc, name)
    owner = info["config"].get("template_owner", "")
    if "error" in created:
        # The template won: the API was told the name is taken.
        assert created["error"]["err_code"] == 10058, created
        assert owner == "T", info["config"]
    else:
        # The API won: the template's own create must have failed, not replaced it.
        assert owner == "", info["config"]
    await nc.publish(f"race.{token}", b"second")
    await nc.flush()
    state = (await info_of(nc, name))["state"]
    # The first message is stored once (by the template's stream) or not at all (the API's
    # stream did not exist yet when it arrived); the second exactly once.
    assert state["messages"] in (1, 2), state
    assert state["last_seq"] == state["messages"], state
    return owner, state


async def test_template_auto_create_and_stream_create_never_both_win(
    headwater: ServerProcess,
) -> None:
    nc = await nats.connect(headwater.url)
    template = {
        "name": "T",
        "max_streams": 100,
        "config": {"name": "", "subjects": ["race.*"], "storage": "file"},
    }
    reply = await nc.request("$JS.API.STREAM.TEMPLATE.CREATE.T", json.dumps(template).encode())
    assert "error" not in json.loads(reply.data), reply.data
    try:
        outcomes = {token: await race(headwater.port, nc, token) for token in NAMES}
    finally:
        await nc.close()

    headwater.restart()
    nc = await nats.connect(headwater.url)
    try:
        for token, (owner, state) in outcomes.items():
            after = await info_of(nc, f"race_{token}")
            assert after["state"] == state
            assert after["config"].get("template_owner", "") == owner
    finally:
        await nc.close()
