"""``headwater pub|sub|req`` and ``account info``, plus connection errors, on both servers."""

from __future__ import annotations

import asyncio
import threading

import nats
from nats.aio.msg import Msg

from headwater.testing import ServerProcess


def _publish_until(url: str, subject: str, done: threading.Event) -> None:
    """Publish until ``done`` (the CLI subscribes at a moment the test cannot see)."""

    async def main() -> None:
        nc = await nats.connect(url)
        try:
            number = 0
            while not done.is_set():
                number += 1
                await nc.publish(subject, f"m{number}".encode(), headers={"X-N": str(number)})
                await nc.flush()
                await asyncio.sleep(0.05)
        finally:
            await nc.close()

    asyncio.run(main())


def test_sub_prints_messages_until_count(cli, js_server: ServerProcess):
    done = threading.Event()
    publisher = threading.Thread(target=_publish_until, args=(js_server.url, "chat.x", done))
    publisher.start()
    try:
        got = cli.json_lines("sub", "chat.>", "--count", "3", "--wait", "10s")
        text = cli.ok("sub", "chat.x", "--count", "1", "--wait", "10s").stdout
    finally:
        done.set()
        publisher.join()
    assert len(got) == 3
    assert all(msg["subject"] == "chat.x" for msg in got)
    numbers = [int(msg["data"][1:]) for msg in got]
    assert numbers == sorted(numbers)
    assert got[0]["headers"]["X-N"] == str(numbers[0])
    assert "[#1] Received on chat.x" in text


def test_sub_gives_up_after_wait(cli):
    result = cli.fails("sub", "silence", "--count", "1", "--wait", "200ms")
    assert "received 0 of 1" in result.stderr


def _serve_echo(url: str, ready: threading.Event, done: threading.Event) -> None:
    async def main() -> None:
        nc = await nats.connect(url)

        async def echo(msg: Msg) -> None:
            prefix = (msg.headers or {}).get("Prefix", "")
            await msg.respond(prefix.encode() + msg.data.upper())

        try:
            await nc.subscribe("echo", cb=echo)
            await nc.flush()
            ready.set()
            while not done.is_set():
                await asyncio.sleep(0.02)
        finally:
            await nc.close()

    asyncio.run(main())


def test_req_prints_the_reply(cli, js_server: ServerProcess):
    ready, done = threading.Event(), threading.Event()
    responder = threading.Thread(target=_serve_echo, args=(js_server.url, ready, done))
    responder.start()
    try:
        assert ready.wait(10)
        reply = cli.json_lines("req", "echo", "hello", "-H", "Prefix:>")
        text = cli.ok("req", "echo", input="from stdin").stdout
    finally:
        done.set()
        responder.join()
    assert reply[0]["data"] == ">HELLO"
    assert "FROM STDIN" in text
    result = cli.fails("req", "nobody.home", "x")
    assert "no responders on nobody.home" in result.stderr
    assert "invalid header" in cli.fails("req", "echo", "x", "-H", "novalue").stderr


def test_pub_jetstream_shows_the_stream_ack(cli):
    cli.ok("stream", "add", "PUBJS", "--subjects", "pubjs.>")
    acks = cli.json_lines("pub", "pubjs.a", "x{{Count}}", "--count", "2", "-J")
    assert [(a["stream"], a["seq"]) for a in acks] == [("PUBJS", 1), ("PUBJS", 2)]
    text = cli.ok("pub", "pubjs.b", "y", "--jetstream").stdout
    assert "Stored in stream PUBJS as sequence 3" in text
    dedupe = cli.json_lines("pub", "pubjs.c", "z", "-J", "-H", "Nats-Msg-Id:one", "--count", "2")
    assert [a.get("duplicate", False) for a in dedupe] == [False, True]
    wrong = cli.fails("pub", "pubjs.d", "w", "-J", "-H", "Nats-Expected-Stream:OTHER")
    assert "expected stream does not match" in wrong.stderr and "10060" in wrong.stderr
    assert "no stream stores subject nostream.x" in cli.fails("pub", "nostream.x", "-J").stderr


def test_account_info(cli):
    cli.ok("stream", "add", "ACCT", "--subjects", "acct")
    info = cli.json("account", "info")
    assert info["streams"] >= 1
    assert {"memory", "storage", "limits", "api"} <= set(info)
    text = cli.ok("account", "info").stdout
    assert "Streams" in text and "Storage" in text


def test_an_unreachable_server_is_a_one_line_error():
    from typer.testing import CliRunner

    from headwater.cli.app import app

    result = CliRunner().invoke(app, ["-s", "nats://127.0.0.1:1", "--timeout", "1", "stream", "ls"])
    assert result.exit_code == 1
    assert "cannot connect" in result.stderr and "127.0.0.1:1" in result.stderr
    assert "Traceback" not in result.output
    quick = CliRunner().invoke(app, ["-s", "nats://127.0.0.1:1", "--timeout", "300ms", "kv", "ls"])
    assert quick.exit_code == 1 and "cannot connect" in quick.stderr
    bad = CliRunner().invoke(app, ["--timeout", "soon", "stream", "ls"])
    assert bad.exit_code == 1 and "--timeout" in bad.output


def test_nats_url_from_the_environment(js_server: ServerProcess):
    from typer.testing import CliRunner

    from headwater.cli.app import app

    result = CliRunner().invoke(app, ["account", "info", "--json"], env={"NATS_URL": js_server.url})
    assert result.exit_code == 0, result.output
    assert "limits" in result.stdout
