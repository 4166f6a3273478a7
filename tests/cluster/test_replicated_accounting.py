"""What `$JS.API.INFO` counts for a replicated stream, against nats-server's cluster.

nats-server counts a replicated stream once, and its bytes once per replica (an R3 memory
stream of B bytes uses 3B of the account's memory), whichever server answers.
"""

from __future__ import annotations

import pytest
from cluster.helpers import KINDS, js_api, request_until_answered, wait_until
from nats.aio.client import Client as NATS

from headwater.testing import Cluster

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("js_cluster", KINDS, indirect=True)
async def test_an_r3_stream_counts_once_and_its_bytes_three_times(
    js_cluster: Cluster, js_clients: list[NATS]
) -> None:
    config = {"name": "ACCT", "subjects": ["acct"], "storage": "memory", "num_replicas": 3}
    created = await js_api(js_clients[0], "$JS.API.STREAM.CREATE.ACCT", config, timeout=10)
    assert "error" not in created, created
    # A new stream's subject reaches nats-server's other servers a moment after the create
    # is answered; the first publish is asked again until a stream answers (the count of
    # messages does not matter here, only that every replica holds the same bytes).
    await request_until_answered(js_clients[1], "acct", 10, b"0123456789")
    for _ in range(9):
        await js_clients[1].request("acct", b"0123456789", timeout=5)
    info = await js_api(js_clients[2], "$JS.API.STREAM.INFO.ACCT", timeout=5)
    size = info["state"]["bytes"]
    assert size > 0

    async def counted(nc: NATS) -> dict[str, int]:
        reply = await js_api(nc, "$JS.API.INFO", timeout=5)
        return {key: reply[key] for key in ("streams", "memory")}

    for nc in js_clients:
        # Every replica applies what is committed a moment after the ack.
        await wait_until(
            lambda nc=nc: _equals(counted(nc), {"streams": 1, "memory": 3 * size}),
            10,
            "one stream, three replicas' bytes",
        )


async def _equals(got: object, want: dict[str, int]) -> bool:
    return await got == want  # type: ignore[misc]
