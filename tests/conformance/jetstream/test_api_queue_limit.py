"""The JetStream API queue is bounded (``jetstream { request_queue_limit }``), as in nats-server.

When a request fills the queue, every waiting request is dropped unanswered, a warning is
logged and ``$JS.EVENT.ADVISORY.API.LIMIT_REACHED`` says how many were dropped. Requests sent
in one write are all routed before the API worker runs, which makes the outcome exact.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import nats

from headwater.testing import ServerProcess
from support.wire import WireClient

LIMIT = 5
SENT = 12


async def test_a_full_queue_drops_the_waiting_requests_and_says_so(tmp_path: Path) -> None:
    conf = tmp_path / "server.conf"
    conf.write_text(
        f'listen: "127.0.0.1:-1"\njetstream {{ store_dir: "{tmp_path / "js"}", '
        f"request_queue_limit: {LIMIT} }}\n"
    )
    with ServerProcess("headwater", args=["-c", str(conf)]) as srv:
        watcher = await nats.connect(srv.url)
        advisories = await watcher.subscribe("$JS.EVENT.ADVISORY.API.LIMIT_REACHED")
        await watcher.flush()
        client = await WireClient.connect(srv.port, connect={})
        burst = "SUB _R.* 1\r\n" + "".join(
            f"PUB $JS.API.INFO _R.{i} 0\r\n\r\n" for i in range(SENT)
        )
        await client.send(burst + "PING\r\n")
        await client.expect("PONG")
        # Bounded by count: at most one reply per request, one advisory per drop.
        answered = 0
        with contextlib.suppress(TimeoutError):
            for _ in range(SENT):
                _, payload = await client.msg(timeout=1.0)
                assert json.loads(payload)["type"].endswith(".account_info_response")
                answered += 1
        dropped = 0
        with contextlib.suppress(nats.errors.TimeoutError):
            for _ in range(SENT):
                msg = await advisories.next_msg(timeout=0.5)
                body = json.loads(msg.data)
                assert body["type"] == "io.nats.jetstream.advisory.v1.api_limit_reached"
                assert body["server"] and body["id"] and body["timestamp"]
                dropped += body["dropped"]
        await watcher.close()
        log = srv.log()
    # 12 requests, a queue of 5: the 5th and the 10th each drop the five waiting.
    assert (dropped, answered) == (10, 2)
    assert log.count("JetStream API queue limit reached, dropping 5 requests") == 2
    assert "has no effect" not in log  # the setting is read, not accepted and ignored
