"""``headwater kv``: buckets, keys, history and watch, on both servers."""

from __future__ import annotations

import asyncio
import threading

import nats


def test_add_creates_an_adr8_bucket(cli):
    info = cli.json("kv", "add", "CFG", "--history", "5", "--ttl", "1h")
    config = info["config"]
    assert config["name"] == "KV_CFG"
    assert config["subjects"] == ["$KV.CFG.>"]
    assert config["max_msgs_per_subject"] == 5
    assert config["max_age"] == 3600 * 10**9
    assert config["allow_rollup_hdrs"] is True and config["deny_delete"] is True
    assert "CFG" in cli.json("kv", "ls")


def test_put_get_history_and_delete(cli):
    cli.ok("kv", "add", "KV1", "--history", "10")
    assert cli.json("kv", "put", "KV1", "color", "red") == {
        "bucket": "KV1",
        "key": "color",
        "revision": 1,
    }
    cli.ok("kv", "put", "KV1", "color", "green")
    cli.ok("kv", "put", "KV1", "color", input="blue")  # value from stdin
    entry = cli.json("kv", "get", "KV1", "color")
    assert (entry["value"], entry["revision"], entry["operation"]) == ("blue", 3, "PUT")
    assert cli.ok("kv", "get", "KV1", "color", "--raw").stdout == "blue"
    assert cli.json("kv", "get", "KV1", "color", "--revision", "1")["value"] == "red"

    history = cli.json("kv", "history", "KV1", "color")
    assert [(e["revision"], e["value"]) for e in history] == [(1, "red"), (2, "green"), (3, "blue")]
    table = cli.ok("kv", "history", "KV1", "color").stdout
    assert "green" in table

    cli.ok("kv", "del", "KV1", "color")
    gone = cli.fails("kv", "get", "KV1", "color")
    assert "key color not found in bucket KV1" in gone.stderr
    assert cli.json("kv", "history", "KV1", "color")[-1]["operation"] == "DEL"
    cli.ok("kv", "del", "KV1", "color", "--purge")
    assert [e["operation"] for e in cli.json("kv", "history", "KV1", "color")] == ["PURGE"]


def test_ls_lists_keys(cli):
    cli.ok("kv", "add", "KEYS")
    assert cli.json("kv", "ls", "KEYS") == []
    for key in ("b", "a", "c.d"):
        cli.ok("kv", "put", "KEYS", key, "1")
    assert cli.json("kv", "ls", "KEYS") == ["a", "b", "c.d"]
    assert "c.d" in cli.ok("kv", "ls", "KEYS").stdout


def _put_until(url: str, done: threading.Event) -> None:
    async def main() -> None:
        nc = await nats.connect(url)
        try:
            kv = await nc.jetstream().key_value("WATCHED")
            number = 0
            while not done.is_set():
                number += 1
                await kv.put("live", str(number).encode())
                await asyncio.sleep(0.05)
        finally:
            await nc.close()

    asyncio.run(main())


def test_watch_shows_current_values_then_updates(cli, js_server):
    cli.ok("kv", "add", "WATCHED")
    cli.ok("kv", "put", "WATCHED", "old", "stored")
    done = threading.Event()
    writer = threading.Thread(target=_put_until, args=(js_server.url, done))
    writer.start()
    try:
        seen = cli.json_lines("kv", "watch", "WATCHED", "--count", "3", "--wait", "10s")
    finally:
        done.set()
        writer.join()
    assert seen[0]["key"] == "old" and seen[0]["value"] == "stored"
    assert [e["key"] for e in seen[1:]] == ["live", "live"]
    assert seen[1]["revision"] < seen[2]["revision"]


def test_watch_gives_up_after_wait(cli):
    cli.ok("kv", "add", "QUIET")
    result = cli.fails("kv", "watch", "QUIET", "--count", "1", "--wait", "300ms")
    assert "received 0 of 1" in result.stderr


def test_rm_deletes_the_bucket(cli):
    cli.ok("kv", "add", "TEMP")
    assert "--force" in cli.fails("kv", "rm", "TEMP").stderr
    cli.ok("kv", "rm", "TEMP", "--force")
    assert "TEMP" not in cli.json("kv", "ls")
    assert "bucket TEMP not found" in cli.fails("kv", "get", "TEMP", "x").stderr


def test_errors(cli):
    assert "bucket NOPE not found" in cli.fails("kv", "put", "NOPE", "k", "v").stderr
    assert "bucket NOPE not found" in cli.fails("kv", "history", "NOPE", "k").stderr
    assert "invalid value for --history" in cli.fails("kv", "add", "H", "--history", "65").stderr
    assert "invalid value for --ttl" in cli.fails("kv", "add", "H", "--ttl", "forever").stderr
    cli.ok("kv", "add", "ERR")
    assert "key missing not found" in cli.fails("kv", "history", "ERR", "missing").stderr
    assert "invalid key 'bad key'" in cli.fails("kv", "put", "ERR", "bad key", "v").stderr
    assert "invalid key '.x'" in cli.fails("kv", "get", "ERR", ".x").stderr
    assert "invalid bucket name 'a.b'" in cli.fails("kv", "add", "a.b").stderr
