"""spec.restore.from end to end: kopf's runner, the fake API server, a real headwater-server.

The operator's server is Headwater; backups are Headwater archives (docs/ARCHIVE.md) or, for
the migration path, a nats-server 2.15 backup (``stream.tar.s2``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from headwater.control import api, units
from headwater.control.backup import ARCHIVE_FILE, NATS_ARCHIVE_FILE, backup_stream
from headwater.testing import ServerProcess
from tests.operator.conftest import Cluster, consumer_info, eventually, run_on, stream_info

pytestmark = pytest.mark.parametrize("js_server", ["headwater"], indirect=True)

ORDERS = {"name": "ORDERS", "subjects": ["ORDERS.*"], "storage": "file"}
MESSAGES = 5
OWNER = "kubernetes:default/stream/orders"
ACKED = 2


async def _fill_and_back_up(
    nc: Client, directory: Path, metadata: dict[str, str] | None = None
) -> None:
    """ORDERS (with ``metadata``) with messages (one with headers) and a durable consumer that
    acked two."""
    await api.request(nc, "STREAM.CREATE.ORDERS", {**ORDERS, "metadata": metadata or {}})
    js = nc.jetstream()
    for index in range(1, MESSAGES + 1):
        await js.publish(f"ORDERS.{index}", f"order {index}".encode(), headers={"N": str(index)})
    await js.add_consumer("ORDERS", durable_name="worker", ack_policy="explicit")
    sub = await js.pull_subscribe_bind("worker", "ORDERS")
    for msg in await sub.fetch(ACKED, timeout=2):
        await msg.ack_sync()
    await sub.unsubscribe()
    await backup_stream(nc, "ORDERS", directory)
    await api.request(nc, "STREAM.DELETE.ORDERS")


def make_backup(cluster: Cluster, directory: Path, metadata: dict[str, str] | None = None) -> Path:
    async def body(nc: Client) -> None:
        await _fill_and_back_up(nc, directory, metadata)

    run_on(cluster.server, body)
    assert stream_info(cluster.server, "ORDERS") is None
    return directory


def fetch_all(cluster: Cluster) -> list[tuple[int, str, str]]:
    """(sequence, payload, header N) of every message, read by direct get."""

    async def body(nc: Client) -> list[tuple[int, str, str]]:
        js = nc.jetstream()
        out = []
        for seq in range(1, MESSAGES + 1):
            msg = await js.get_msg("ORDERS", seq)
            out.append((msg.seq or 0, (msg.data or b"").decode(), (msg.headers or {})["N"]))
        return out

    return run_on(cluster.server, body)


def condition(cluster: Cluster, kind: str) -> dict[str, Any]:
    return cluster.condition("streams", "orders", kind)


def test_a_missing_stream_is_restored_with_messages_and_consumer_state(
    cluster: Cluster, tmp_path: Path
) -> None:
    backup = make_backup(cluster, tmp_path / "orders")

    # The spec differs from the backed-up config (max_age): applied as an update after.
    cluster.create("Stream", "orders", {**ORDERS, "maxAge": "1h", "restore": {"from": str(backup)}})

    ready = eventually(lambda: condition(cluster, "Ready").get("reason") == "Restored")
    assert ready
    eventually(lambda: condition(cluster, "InSync").get("status") == "True")
    info = stream_info(cluster.server, "ORDERS") or {}
    assert info["state"]["messages"] == MESSAGES
    assert info["state"]["first_seq"] == 1
    assert info["state"]["last_seq"] == MESSAGES
    assert info["config"]["max_age"] == units.HOUR
    assert info["config"]["metadata"]["headwater.io/managed-by"] == OWNER
    assert fetch_all(cluster) == [(seq, f"order {seq}", str(seq)) for seq in range(1, MESSAGES + 1)]
    worker = consumer_info(cluster.server, "ORDERS", "worker") or {}
    assert worker["ack_floor"]["stream_seq"] == ACKED
    assert worker["delivered"]["stream_seq"] == ACKED
    assert worker["num_pending"] == MESSAGES - ACKED
    restored = eventually(lambda: cluster.events("orders", "Restored"))
    assert str(backup) in restored[0]["message"]
    assert f"{MESSAGES} messages" in restored[0]["message"]
    assert not cluster.events("orders", "Created")

    # From now on the stream exists: the timer leaves it (and its messages) alone.
    eventually(lambda: "spec.restore ignored" in condition(cluster, "Ready").get("message", ""))
    assert (stream_info(cluster.server, "ORDERS") or {})["state"]["messages"] == MESSAGES


def test_a_restored_stream_carries_the_resources_owner(cluster: Cluster, tmp_path: Path) -> None:
    """A backup taken when the stream was another owner's (here the legacy value) comes back
    as this resource's: restored, then in sync, not a Conflict."""
    legacy = {"headwater.io/managed-by": "headwater", "team": "orders"}
    backup = make_backup(cluster, tmp_path / "orders", legacy)

    cluster.create("Stream", "orders", {**ORDERS, "restore": {"from": str(backup)}})

    eventually(lambda: condition(cluster, "Ready").get("reason") == "Restored")
    eventually(lambda: condition(cluster, "InSync").get("status") == "True")
    info = stream_info(cluster.server, "ORDERS") or {}
    assert info["config"]["metadata"]["headwater.io/managed-by"] == OWNER
    assert info["state"]["messages"] == MESSAGES
    assert not cluster.events("orders", "Conflict")


def test_a_nats_server_backup_is_restored(cluster: Cluster, tmp_path: Path) -> None:
    """Migrating under the operator: a stream backed up from nats-server is restored into
    Headwater from ``spec.restore.from``, messages and consumer state included."""
    backup = tmp_path / "orders"
    with ServerProcess("nats", jetstream=True) as origin:

        async def body(nc: Client) -> None:
            await _fill_and_back_up(nc, backup)

        run_on(origin, body)
    assert (backup / NATS_ARCHIVE_FILE).is_file()
    cluster.create("Stream", "orders", {**ORDERS, "restore": {"from": str(backup)}})
    eventually(lambda: condition(cluster, "Ready").get("reason") == "Restored")
    assert fetch_all(cluster) == [(seq, f"order {seq}", str(seq)) for seq in range(1, MESSAGES + 1)]
    worker = consumer_info(cluster.server, "ORDERS", "worker") or {}
    assert worker["ack_floor"]["stream_seq"] == ACKED
    assert worker["num_pending"] == MESSAGES - ACKED


def test_a_damaged_backup_is_refused_and_nothing_is_created(
    cluster: Cluster, tmp_path: Path
) -> None:
    backup = make_backup(cluster, tmp_path / "orders")
    archive = backup / ARCHIVE_FILE
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF
    archive.write_bytes(bytes(data))

    cluster.create("Stream", "orders", {**ORDERS, "restore": {"from": str(backup)}})

    ready = eventually(
        lambda: (
            condition(cluster, "Ready").get("reason") == "BackupInvalid"
            and condition(cluster, "Ready")
        )
    )
    assert ready["status"] == "False"
    assert "finding" in ready["message"]
    assert "archive_" in ready["message"]  # the verifier's kind: checksum, malformed...
    assert condition(cluster, "InSync")["reason"] == "BackupInvalid"
    assert cluster.events("orders", "BackupInvalid")
    # A permanent error: neither the handler nor the timer retries it (several intervals).
    time.sleep(1.5)
    assert stream_info(cluster.server, "ORDERS") is None
    assert len(cluster.events("orders", "BackupInvalid")) == 1
    assert not cluster.events("orders", "Created")

    # A spec change is a new attempt: pointing at nothing is a finding too.
    cluster.patch("streams", "orders", {"spec": {"restore": {"from": str(tmp_path / "none")}}})
    eventually(lambda: len(cluster.events("orders", "BackupInvalid")) == 2)
    assert "missing" in condition(cluster, "Ready")["message"]
    assert stream_info(cluster.server, "ORDERS") is None


def test_restore_is_ignored_when_the_stream_exists(cluster: Cluster, tmp_path: Path) -> None:
    backup = make_backup(cluster, tmp_path / "orders")

    async def recreate(nc: Client) -> None:
        await api.request(nc, "STREAM.CREATE.ORDERS", dict(ORDERS))
        await nc.jetstream().publish("ORDERS.new", b"kept")

    run_on(cluster.server, recreate)

    cluster.create("Stream", "orders", {**ORDERS, "restore": {"from": str(backup)}})

    ready = eventually(
        lambda: (
            "spec.restore ignored" in condition(cluster, "Ready").get("message", "")
            and condition(cluster, "Ready")
        )
    )
    assert ready["status"] == "True"
    eventually(lambda: condition(cluster, "InSync").get("status") == "True")
    info = stream_info(cluster.server, "ORDERS") or {}
    assert info["state"]["messages"] == 1
    assert consumer_info(cluster.server, "ORDERS", "worker") is None
    assert not cluster.events("orders", "Restored")


def test_the_timer_restores_a_stream_deleted_behind_the_operator(
    cluster: Cluster, tmp_path: Path
) -> None:
    backup = make_backup(cluster, tmp_path / "orders")
    cluster.create("Stream", "orders", {**ORDERS, "restore": {"from": str(backup)}})
    eventually(lambda: cluster.events("orders", "Restored"))

    async def delete(nc: Client) -> None:
        await api.request(nc, "STREAM.DELETE.ORDERS")

    run_on(cluster.server, delete)

    # driftPolicy correct re-creates a missing stream: from the backup, not empty.
    eventually(lambda: len(cluster.events("orders", "Restored")) == 2)
    eventually(
        lambda: (
            (stream_info(cluster.server, "ORDERS") or {}).get("state", {}).get("messages")
            == MESSAGES
        )
    )
    assert (consumer_info(cluster.server, "ORDERS", "worker") or {})["num_pending"] == (
        MESSAGES - ACKED
    )
