"""The backup action against a real server, and the verify action (Spark) on its output."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from gh_actions.locations import RunAction
from nats.js.api import ConsumerConfig, StreamConfig

from headwater.testing import ServerProcess


@pytest.fixture
async def orders(headwater_js: ServerProcess) -> AsyncIterator[ServerProcess]:
    """ORDERS with 20 messages and a durable consumer."""
    nc = await nats.connect(headwater_js.url)
    try:
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name="ORDERS", subjects=["ORDERS.*"]))
        await js.add_consumer("ORDERS", ConsumerConfig(durable_name="NEW"))
        for n in range(20):
            await js.publish("ORDERS.received", f"order {n}".encode())
        yield headwater_js
    finally:
        await nc.close()


def test_backup_writes_the_directory(
    orders: ServerProcess, act: RunAction, workspace: Path
) -> None:
    run = act("backup", server=orders.url, stream="ORDERS", directory="backups/orders")
    assert run.ok, run.log
    assert run.outputs["directory"] == "backups/orders"
    result = json.loads(run.outputs["json"])
    assert result["stream"] == "ORDERS" and result["messages"] == 20
    saved = workspace / "backups" / "orders"
    assert (saved / "backup.json").is_file() and (saved / "stream.hwarc").is_file()
    assert "Backed up stream `ORDERS` to `backups/orders`." in run.summary

    again = act("backup", server=orders.url, stream="ORDERS", directory="backups/orders")
    assert not again.ok  # an existing non-empty directory needs force
    forced = act(
        "backup", server=orders.url, stream="ORDERS", directory="backups/orders", force="true"
    )
    assert forced.ok, forced.log


def test_backup_of_a_missing_stream_fails(headwater_js: ServerProcess, act: RunAction) -> None:
    run = act("backup", server=headwater_js.url, stream="NOPE", directory="b")
    assert not run.ok
    assert "stream not found" in run.log


@pytest.mark.slow
def test_verify_finds_a_flipped_byte(
    orders: ServerProcess, act: RunAction, workspace: Path
) -> None:
    assert act("backup", server=orders.url, stream="ORDERS", directory="backups/good").ok
    shutil.copytree(workspace / "backups" / "good", workspace / "backups" / "bad")
    archive = workspace / "backups" / "bad" / "stream.hwarc"
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF
    archive.write_bytes(bytes(data))

    clean = act("verify", paths="backups/good", master="local[1]")
    assert clean.ok, clean.log
    assert clean.outputs["clean"] == "true"
    assert json.loads(clean.outputs["json"])["reports"][0]["messages"] == 20
    assert "1 backup(s) verified: clean." in clean.summary

    found = act("verify", paths="backups/good\nbackups/bad", master="local[1]", report="rep")
    assert not found.ok
    assert found.outputs["clean"] == "false"
    result = json.loads(found.outputs["json"])
    assert result["backups"] == 2 and not result["ok"]
    kinds = {f["kind"] for r in result["reports"] for f in r["findings"]}
    assert kinds == {"archive_checksum"}
    assert re.search(r"/backups/good \| ORDERS \| 20 \| 1 \| 0 \|", found.summary)
    assert re.search(r"/backups/bad \| ORDERS \| \d+ \| \d+ \| 1 \|", found.summary)
    assert re.search(r"/backups/bad \| archive_checksum \|", found.summary)
    assert (workspace / "rep" / "summary.json").is_file()


def test_verify_compare_needs_two_directories(act: RunAction) -> None:
    run = act("verify", compare="only-one")
    assert not run.ok
    assert run.annotations[0].message == "compare needs two directories, got: only-one"


def test_backup_for_nats_server(orders: ServerProcess, act: RunAction, workspace: Path) -> None:
    run = act("backup", server=orders.url, stream="ORDERS", directory="b", format="nats")
    assert run.ok, run.log
    assert json.loads(run.outputs["json"])["archive"] == "stream.tar.s2"
    assert sorted(p.name for p in (workspace / "b").iterdir()) == ["backup.json", "stream.tar.s2"]
    bad = act("backup", server=orders.url, stream="ORDERS", directory="c", format="zip")
    assert not bad.ok
