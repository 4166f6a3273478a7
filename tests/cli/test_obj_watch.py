"""``headwater obj add --tags/--cluster`` and ``obj watch`` (natscli's), on both servers."""

from __future__ import annotations

import asyncio
import threading

import nats
import pytest

from tests.cli.conftest import Cli

pytestmark = pytest.mark.differential


def test_add_places_the_bucket(cli: Cli) -> None:
    info = cli.json("obj", "add", "OBJPL", "--tags", "ssd", "--tags", "eu", "--cluster", "east")
    assert info["config"]["placement"] == {"cluster": "east", "tags": ["ssd", "eu"]}
    cli.ok("obj", "rm", "OBJPL", "--force")


def test_add_refuses_the_flags_nats_py_cannot_pass(cli: Cli) -> None:
    """Bucket metadata and compression have no field in nats-py's ObjectStoreConfig: the
    flags are not offered rather than accepted and dropped."""
    for flag in ("--metadata", "--compress"):
        result = cli.fails("obj", "add", "OBJNO", flag)
        assert f"No such option: {flag}" in result.stderr


def _put_and_delete_until(url: str, done: threading.Event) -> None:
    """Put an object then delete it, over and over, until ``done`` (bounded: 200 rounds)."""

    async def main() -> None:
        nc = await nats.connect(url)
        try:
            store = await nc.jetstream().object_store("WATCHOBJ")
            for number in range(200):
                if done.is_set():
                    break
                await store.put(f"live-{number}", b"x" * 10)
                await asyncio.sleep(0.05)
                await store.delete(f"live-{number}")
                await asyncio.sleep(0.05)
        finally:
            await nc.close()

    asyncio.run(main())


def test_watch_shows_stored_objects_then_changes(cli: Cli, js_server, tmp_path) -> None:
    cli.ok("obj", "add", "WATCHOBJ")
    stored = tmp_path / "old.txt"
    stored.write_bytes(b"stored")
    cli.ok("obj", "put", "WATCHOBJ", str(stored), "--name", "old")
    done = threading.Event()
    writer = threading.Thread(target=_put_and_delete_until, args=(js_server.url, done))
    writer.start()
    try:
        seen = cli.json_lines("obj", "watch", "WATCHOBJ", "--count", "5", "--wait", "10s")
    finally:
        done.set()
        writer.join(timeout=30)
    assert len(seen) == 5
    assert seen[0]["name"] == "old" and seen[0]["size"] == 6 and not seen[0].get("deleted")
    live = seen[1:]
    assert all(entry["name"].startswith("live-") for entry in live)
    assert any(entry.get("deleted") for entry in live)
    assert any(not entry.get("deleted") and entry["size"] == 10 for entry in live)

    text = cli.ok("obj", "watch", "WATCHOBJ", "--count", "1", "--wait", "5s").stdout
    assert "PUT WATCHOBJ > old: 6 B in 1 chunks" in text
    cli.ok("obj", "rm", "WATCHOBJ", "--force")


def test_watch_gives_up_after_wait(cli: Cli) -> None:
    cli.ok("obj", "add", "QUIETOBJ")
    result = cli.fails("obj", "watch", "QUIETOBJ", "--count", "1", "--wait", "300ms")
    assert "received 0 of 1" in result.stderr
    assert "bucket NOSUCHOBJ not found" in cli.fails("obj", "watch", "NOSUCHOBJ").stderr
    cli.ok("obj", "rm", "QUIETOBJ", "--force")
