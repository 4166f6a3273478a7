"""The client protocol byte for byte, against Headwater and nats-server alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headwater.testing import ServerProcess
from support.wire import WireClient


async def test_info_fields(any_shared_server: ServerProcess) -> None:
    client = await WireClient.connect(any_shared_server.port)
    info = client.info
    for key in (
        "server_id",
        "server_name",
        "version",
        "proto",
        "headers",
        "max_payload",
        "client_id",
        "client_ip",
        "host",
        "port",
    ):
        assert key in info, key
    assert info["proto"] == 1
    assert info["headers"] is True
    assert info["max_payload"] == 1024 * 1024
    major, minor = (int(x) for x in info["version"].split(".")[:2])
    assert (major, minor) >= (2, 9)
    await client.close()


async def test_ping_pong_and_verbose_ok(any_shared_server: ServerProcess) -> None:
    client = await WireClient.connect(any_shared_server.port, {"verbose": True})
    await client.expect("+OK")
    await client.send("PING\r\n")
    await client.expect("PONG")
    await client.send("SUB foo 1\r\n")
    await client.expect("+OK")
    await client.send("PUB foo 2\r\nhi\r\n")
    await client.expect("+OK")
    line, data = await client.msg()
    assert line == "MSG foo 1 2"
    assert data == b"hi"
    await client.close()


async def test_hpub_delivers_hmsg(any_shared_server: ServerProcess) -> None:
    client = await WireClient.connect(any_shared_server.port, {})
    await client.send("SUB h 9\r\n")
    hdr = "NATS/1.0\r\nA: b\r\n\r\n"
    await client.send(f"HPUB h r.x {len(hdr)} {len(hdr) + 3}\r\n{hdr}abc\r\n")
    line, data = await client.msg()
    assert line == f"HMSG h 9 r.x {len(hdr)} {len(hdr) + 3}"
    assert data == hdr.encode() + b"abc"
    await client.close()


async def test_headers_stripped_for_clients_without_header_support(
    any_shared_server: ServerProcess,
) -> None:
    old = await WireClient.connect(any_shared_server.port, {"headers": False})
    new = await WireClient.connect(any_shared_server.port, {})
    await old.send("SUB legacy 1\r\nPING\r\n")
    await old.expect("PONG")
    hdr = "NATS/1.0\r\nA: b\r\n\r\n"
    await new.send(f"HPUB legacy {len(hdr)} {len(hdr) + 2}\r\n{hdr}ok\r\n")
    line, data = await old.msg()
    assert line == "MSG legacy 1 2"
    assert data == b"ok"
    await old.close()
    await new.close()


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ("FOO BAR\r\n", "-ERR 'Unknown Protocol Operation'"),
        ("PUB foo 2000000\r\n", "-ERR 'Maximum Payload Violation'"),
        ("SUB " + "x" * 5000 + " 1\r\n", "-ERR 'maximum control line exceeded'"),
    ],
)
async def test_fatal_errors_send_err_and_close(
    any_shared_server: ServerProcess, data: str, error: str
) -> None:
    client = await WireClient.connect(any_shared_server.port, {})
    await client.send(data)
    assert (await client.expect("-ERR")).startswith(error)
    assert await client.closed()


@pytest.mark.parametrize("data", ["PUB foo\r\n", "PUB foo bar baz 2\r\n", "UNSUB\r\n"])
async def test_malformed_arguments_close_the_connection(
    any_shared_server: ServerProcess, data: str
) -> None:
    client = await WireClient.connect(any_shared_server.port, {})
    await client.send(data)
    assert await client.closed()


async def test_invalid_subscription_subject_keeps_connection(
    any_shared_server: ServerProcess,
) -> None:
    client = await WireClient.connect(any_shared_server.port, {})
    await client.send("SUB foo..bar 1\r\n")
    assert await client.expect("-ERR") == "-ERR 'Invalid Subject'"
    await client.send("PING\r\n")
    await client.expect("PONG")
    await client.close()


async def test_pedantic_rejects_wildcard_publish_subject(any_shared_server: ServerProcess) -> None:
    client = await WireClient.connect(any_shared_server.port, {"pedantic": True})
    await client.send("PUB foo.* 1\r\nx\r\n")
    assert await client.expect("-ERR") == "-ERR 'Invalid Publish Subject'"
    await client.send("PING\r\n")
    await client.expect("PONG")
    await client.close()


async def test_no_responders_needs_headers(any_shared_server: ServerProcess) -> None:
    client = await WireClient.connect(any_shared_server.port)
    opts = {"verbose": False, "headers": False, "no_responders": True}
    await client.send(f"CONNECT {json.dumps(opts)}\r\n")
    line = await client.expect("-ERR")
    assert line == "-ERR 'no responders requires headers support'"
    assert await client.closed()


async def test_no_responders_status_on_the_wire(any_shared_server: ServerProcess) -> None:
    client = await WireClient.connect(any_shared_server.port, {"no_responders": True})
    await client.send("SUB _INBOX.x 1\r\nPUB nobody _INBOX.x 0\r\n\r\n")
    line, data = await client.msg()
    assert line.startswith("HMSG _INBOX.x 1 ")
    assert data.startswith(b"NATS/1.0 503")
    await client.close()


async def test_unsub_max_on_the_wire(any_shared_server: ServerProcess) -> None:
    client = await WireClient.connect(any_shared_server.port, {})
    await client.send("SUB m 1\r\nUNSUB 1 2\r\n")
    await client.send("PUB m 1\r\na\r\nPUB m 1\r\nb\r\nPUB m 1\r\nc\r\nPING\r\n")
    assert (await client.msg())[1] == b"a"
    assert (await client.msg())[1] == b"b"
    await client.expect("PONG")
    await client.close()


async def test_servers_only_subjects_are_refused_like_a_denied_publish(
    shared_server: ServerProcess, tmp_path: Path
) -> None:
    """Headwater reserves ``$HW.`` for its servers (docs/DIFFERENCES.md): a client's publish
    there, plain or batched, gets exactly what nats-server sends for a publish its
    permissions deny, and the connection stays. A reply subject there is refused with
    nats-server's text for a reply subject it refuses."""
    conf = tmp_path / "deny.conf"
    conf.write_text(
        "authorization { users = [ { user: a, password: b,\n"
        '  permissions: { publish: { deny: ["$HW.>"] } } } ] }\n'
    )
    # Three in one write: Headwater's parser hands them over as one batch.
    three = "PUB $HW.JSC.x 1\r\na\r\nPUB $HW.JSC.x 1\r\nb\r\nPUB $HW.JSC.x 1\r\nc\r\nPING\r\n"
    refused = "-ERR 'Permissions Violation for Publish to \"$HW.JSC.x\"'"
    lines = {}
    with ServerProcess("nats", ["-c", str(conf), "-a", "127.0.0.1", "-p", "-1"]) as reference:
        for name, port, creds in (
            ("nats", reference.port, {"user": "a", "pass": "b"}),
            ("headwater", shared_server.port, {}),
        ):
            client = await WireClient.connect(port, creds)
            await client.send(three)
            lines[name] = [await client.line() for _ in range(4)]
            await client.close()
    assert lines["headwater"] == lines["nats"] == [refused, refused, refused, "PONG"]

    client = await WireClient.connect(shared_server.port, {})
    await client.send("PUB ok $HW.JSR.y 1\r\nd\r\nPING\r\n")
    assert (
        await client.line()
        == "-ERR 'Permissions Violation for Publish with Reply of \"$HW.JSR.y\"'"
    )
    assert await client.line() == "PONG"
    await client.close()
