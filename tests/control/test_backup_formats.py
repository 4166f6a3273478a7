"""The backup directory names its archive by format: ``stream.hwarc`` from Headwater,
``stream.tar.s2`` from nats-server (as ``nats stream backup`` names it). Restoring accepts
either (exactly one of them), verifies either before contacting the server, and sends the
bytes unchanged."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from headwater.archive import MAGIC, ArchiveFormat, archive_format
from headwater.archive.s2 import S2_MAGIC
from headwater.control.backup import (
    ARCHIVE_FILE,
    BACKUP_FILE,
    NATS_ARCHIVE_FILE,
    BackupError,
    backup_stream,
    read_backup,
    restore_stream,
)
from headwater.testing import ServerProcess
from support.snapshots import collecting

ARCHIVES = {"headwater": ARCHIVE_FILE, "nats": NATS_ARCHIVE_FILE}


async def connect(srv: ServerProcess) -> Client:
    return await nats.connect(srv.url, allow_reconnect=False)


@pytest.fixture
async def nc(clean_server: ServerProcess) -> AsyncIterator[Client]:
    client = await connect(clean_server)
    try:
        yield client
    finally:
        await client.close()


async def make_stream(nc: Client, name: str, count: int = 30) -> None:
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name.lower()}.>"])
    for i in range(count):
        await js.publish(f"{name.lower()}.{i % 3}", os.urandom(50 + i), headers={"I": str(i)})
    await js.add_consumer(name, durable_name="D")


async def test_archive_named_by_format_and_restored_unchanged(
    nc: Client, clean_server: ServerProcess, tmp_path: Path
) -> None:
    """Each server's backup lands under its format's name and restores, verified first, with
    the same bytes the restore advisory counts."""
    await make_stream(nc, "FMT")
    before = await nc.jetstream().stream_info("FMT")
    result = await backup_stream(nc, "FMT", tmp_path)
    expected = ARCHIVES[clean_server.kind]
    assert sorted(os.listdir(tmp_path)) == sorted([BACKUP_FILE, expected])
    assert result.archive == tmp_path / expected
    raw = result.archive.read_bytes()
    assert len(raw) == result.archive_bytes
    kind = archive_format(raw[:10])
    assert kind is (ArchiveFormat.HEADWATER if expected == ARCHIVE_FILE else ArchiveFormat.NATS)
    backup, archive = read_backup(tmp_path)
    assert archive == result.archive
    assert backup["config"]["name"] == "FMT"

    await nc.jetstream().delete_stream("FMT")
    completes, sub = await collecting(nc, "$JS.EVENT.ADVISORY.STREAM.RESTORE_COMPLETE.FMT")
    info = await restore_stream(nc, tmp_path, verify=True)
    for _ in range(100):
        if completes:
            break
        await asyncio.sleep(0.02)
    await sub.unsubscribe()
    assert info["state"]["messages"] == before.state.messages == 30
    assert info["state"]["last_seq"] == before.state.last_seq
    assert info["state"]["consumer_count"] == 1
    assert json.loads(completes[0].data)["bytes"] == len(raw)
    assert result.archive.read_bytes() == raw  # restoring does not touch the backup


async def test_force_backup_replaces_the_other_format(
    js_server_pair: tuple[ServerProcess, ServerProcess], tmp_path: Path
) -> None:
    """Backing a stream up over an earlier backup in the other format leaves one archive."""
    hw_srv, nats_srv = js_server_pair
    target = tmp_path / "b"
    order = [(nats_srv, NATS_ARCHIVE_FILE), (hw_srv, ARCHIVE_FILE), (nats_srv, NATS_ARCHIVE_FILE)]
    for srv, name in order:
        nc = await connect(srv)
        try:
            await make_stream(nc, "SWAP", 5)
            await backup_stream(nc, "SWAP", target, force=True)
            await nc.jetstream().delete_stream("SWAP")
        finally:
            await nc.close()
        assert sorted(os.listdir(target)) == sorted([BACKUP_FILE, name])
        assert read_backup(target)[1] == target / name


async def test_both_archives_are_refused_as_ambiguous(nc: Client, tmp_path: Path) -> None:
    await make_stream(nc, "BOTH", 3)
    await backup_stream(nc, "BOTH", tmp_path)
    await nc.jetstream().delete_stream("BOTH")
    (archive,) = [p for p in tmp_path.iterdir() if p.name != BACKUP_FILE]
    other = NATS_ARCHIVE_FILE if archive.name == ARCHIVE_FILE else ARCHIVE_FILE
    (tmp_path / other).write_bytes(archive.read_bytes())
    with pytest.raises(BackupError, match="ambiguous") as failure:
        read_backup(tmp_path)
    assert ARCHIVE_FILE in str(failure.value) and NATS_ARCHIVE_FILE in str(failure.value)
    seen, sub = await collecting(nc, "$JS.API.STREAM.RESTORE.>")
    for verify in (False, True):
        with pytest.raises(BackupError, match="ambiguous"):
            await restore_stream(nc, tmp_path, verify=verify)
    await nc.flush()
    await sub.unsubscribe()
    assert seen == []
    assert (await nc.jetstream().streams_info()) == []
    # Removing the stray copy makes the directory a backup again.
    (tmp_path / other).unlink()
    info = await restore_stream(nc, tmp_path, verify=True)
    assert info["state"]["messages"] == 3


async def test_directory_without_an_archive(tmp_path: Path) -> None:
    (tmp_path / BACKUP_FILE).write_text(json.dumps({"config": {"name": "X"}, "state": {}}))
    with pytest.raises(BackupError, match="is not a backup directory") as failure:
        read_backup(tmp_path)
    assert ARCHIVE_FILE in str(failure.value) and NATS_ARCHIVE_FILE in str(failure.value)
    (tmp_path / BACKUP_FILE).unlink()
    (tmp_path / NATS_ARCHIVE_FILE).write_bytes(S2_MAGIC)
    with pytest.raises(BackupError, match="is not a backup directory"):
        read_backup(tmp_path)


async def test_verify_checks_the_archive_is_the_configs_stream(
    nc: Client, clean_server: ServerProcess, tmp_path: Path
) -> None:
    """A Headwater archive records its stream: verifying it under another name is refused
    locally. A nats-server archive records none, and takes the config's."""
    await make_stream(nc, "NAMED", 4)
    await backup_stream(nc, "NAMED", tmp_path)
    config = json.loads((tmp_path / BACKUP_FILE).read_text())["config"]
    renamed = dict(config, name="OTHER", subjects=["other.>"])
    if clean_server.kind == "headwater":
        seen, sub = await collecting(nc, "$JS.API.STREAM.RESTORE.>")
        with pytest.raises(BackupError, match="holds stream 'NAMED', not 'OTHER'"):
            await restore_stream(nc, tmp_path, verify=True, config=renamed)
        await nc.flush()
        await sub.unsubscribe()
        assert seen == []
    else:
        info = await restore_stream(nc, tmp_path, verify=True, config=renamed)
        assert info["config"]["name"] == "OTHER"
        assert info["state"]["messages"] == 4


# --------------------------------------------------------------------------- scripted snapshots


async def scripted_snapshot(
    srv: ServerProcess, chunks: list[bytes], directory: Path
) -> tuple[Path | None, BackupError | None]:
    """Back up ``FAKE`` from a responder that streams ``chunks`` as the snapshot (each one
    acknowledged by the client), on a plain server: the naming sees exactly these bytes."""
    responder = await connect(srv)
    client = await connect(srv)
    tasks: list[asyncio.Task[None]] = []

    async def stream_chunks(deliver: str) -> None:
        for piece in chunks:
            ack = await responder.request(deliver, piece, timeout=5)
            assert ack.data == b""
        await responder.publish(deliver, b"")

    async def on_snapshot(msg: Msg) -> None:
        request = json.loads(msg.data)
        reply = {
            "type": "io.nats.jetstream.api.v1.stream_snapshot_response",
            "config": {"name": "FAKE", "subjects": ["fake"], "storage": "file"},
            "state": {"messages": 1, "bytes": sum(map(len, chunks))},
        }
        await msg.respond(json.dumps(reply).encode())
        tasks.append(asyncio.create_task(stream_chunks(request["deliver_subject"])))

    await responder.subscribe("$JS.API.STREAM.SNAPSHOT.FAKE", cb=on_snapshot)
    await responder.flush()
    try:
        result = await backup_stream(client, "FAKE", directory, timeout=5)
        return result.archive, None
    except BackupError as error:
        return None, error
    finally:
        await asyncio.gather(*tasks)
        await client.close()
        await responder.close()


@pytest.mark.parametrize(
    ("head", "name"),
    [(MAGIC, ARCHIVE_FILE), (S2_MAGIC, NATS_ARCHIVE_FILE)],
    ids=["headwater", "nats"],
)
async def test_format_sniffed_across_tiny_chunks(
    server: ServerProcess, tmp_path: Path, head: bytes, name: str
) -> None:
    """The first bytes may come one per chunk: the name is still the format's, and the file
    is exactly what was sent."""
    chunks = [bytes([b]) for b in head[:10]] + [b"rest of the archive" * 10]
    archive, error = await scripted_snapshot(server, chunks, tmp_path)
    assert error is None
    assert archive == tmp_path / name
    assert archive.read_bytes() == b"".join(chunks)
    assert sorted(os.listdir(tmp_path)) == sorted([BACKUP_FILE, name])


@pytest.mark.parametrize(
    "chunks",
    [[b"PK\x03\x04", b"a zip file, not a snapshot" * 20], [b"\xff\x06\x00"], [b"NATSARC1..."]],
    ids=["zip", "short", "bare-natsarc"],
)
async def test_unknown_format_is_refused_leaving_nothing(
    server: ServerProcess, tmp_path: Path, chunks: list[bytes]
) -> None:
    archive, error = await scripted_snapshot(server, chunks, tmp_path / "b")
    assert archive is None and error is not None
    assert "no archive format" in str(error)
    assert os.listdir(tmp_path / "b") == []
