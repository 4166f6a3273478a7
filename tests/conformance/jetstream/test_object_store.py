"""Object stores end to end through nats-py's public object-store API (ADR-20).

An object is chunk messages on ``$O.<bucket>.C.<nuid>`` plus a rolled-up meta message on
``$O.<bucket>.M.<name>``; reads go through an ordered consumer over the chunks, lists and
watches through one over the meta subjects. The same body runs against Headwater and
nats-server, so every assertion is something nats-server does.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json

import pytest
from nats.aio.client import Client
from nats.js import api
from nats.js.errors import (
    APIError,
    LinkIsABucketError,
    NotFoundError,
    ObjectNotFoundError,
)

CHUNK = 128 * 1024


def _digest(data: bytes) -> str:
    return "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()


async def test_put_get_small_and_multi_chunk(nc: Client) -> None:
    js = nc.jetstream()
    obs = await js.create_object_store("files")
    stream = await js.stream_info("OBJ_files")
    assert stream.config.subjects == ["$O.files.C.>", "$O.files.M.>"]
    assert (stream.config.allow_rollup_hdrs, stream.config.discard) == (True, "new")

    small = b"hello object store"
    info = await obs.put("small.txt", small)
    assert (info.name, info.bucket, info.size, info.chunks) == ("small.txt", "files", 18, 1)
    assert info.digest == _digest(small)

    big = bytes(range(256)) * 4096 + b"tail"  # 1 MiB + 4 bytes: nine chunks
    info = await obs.put("big.bin", big)
    assert (info.size, info.chunks, info.digest) == (len(big), 9, _digest(big))

    result = await obs.get("small.txt")
    assert (result.data, result.info.digest, result.info.size) == (small, _digest(small), 18)
    result = await obs.get("big.bin")
    assert result.data == big and result.info.chunks == 9
    sink = io.BytesIO()
    await obs.get("big.bin", writeinto=sink)
    assert sink.getvalue() == big

    empty = await obs.put("empty", b"")
    assert (empty.size, empty.chunks) == (0, 0)
    assert (await obs.get("empty")).data == b""

    meta = await obs.get_info("big.bin")
    assert (meta.name, meta.size, meta.chunks, meta.deleted) == ("big.bin", len(big), 9, False)
    assert meta.options is not None and meta.options.max_chunk_size == CHUNK
    with pytest.raises(ObjectNotFoundError):
        await obs.get_info("absent")
    with pytest.raises(ObjectNotFoundError):
        await obs.get("absent")

    # Each chunk is one message (none for the empty object); each object one meta message,
    # on its base64url-encoded name.
    state = (await js.stream_info("OBJ_files", subjects_filter="$O.files.M.>")).state
    assert state.messages == 1 + 9 + 3
    assert state.subjects == {
        "$O.files.M.c21hbGwudHh0": 1,
        "$O.files.M.YmlnLmJpbg==": 1,
        "$O.files.M.ZW1wdHk=": 1,
    }


async def test_replace_list_delete_and_meta(nc: Client) -> None:
    js = nc.jetstream()
    obs = await js.create_object_store("docs", description="documents")
    with pytest.raises(NotFoundError):
        await obs.list()
    await obs.put("a", b"first")
    await obs.put("b", b"x" * (CHUNK + 1))
    replaced = await obs.put("a", b"second version")
    assert replaced.size == 14
    assert (await obs.get("a")).data == b"second version"
    # Replacing an object purges the old chunks: a's one chunk, b's two, three metas.
    assert (await js.stream_info("OBJ_docs")).state.messages == 1 + 2 + 2

    listed = await obs.list()
    assert [(o.name, o.size, o.deleted) for o in listed] == [
        ("b", CHUNK + 1, False),
        ("a", 14, False),
    ]

    await obs.update_meta("a", api.ObjectMeta(name="a", description="the letter a"))
    info = await obs.get_info("a")
    assert (info.description, info.size) == ("the letter a", 14)
    assert (await obs.get("a")).data == b"second version"

    await obs.delete("b")
    with pytest.raises(ObjectNotFoundError):
        await obs.get_info("b")
    gone = await obs.get_info("b", show_deleted=True)
    assert (gone.deleted, gone.size, gone.chunks) == (True, 0, 0)
    assert [o.name for o in await obs.list(ignore_deletes=True)] == ["a"]
    assert [(o.name, o.deleted) for o in await obs.list()] == [("a", False), ("b", True)]

    status = await obs.status()
    assert (status.bucket, status.description, status.sealed) == ("docs", "documents", False)
    assert status.size == (await js.stream_info("OBJ_docs")).state.bytes > 0
    # Only a's chunk and the two metas are left.
    assert status.stream_info.state.messages == 3

    assert await js.delete_object_store("docs") is True
    with pytest.raises(NotFoundError):
        await js.object_store("docs")


async def test_watch_initial_then_updates(nc: Client) -> None:
    js = nc.jetstream()
    obs = await js.create_object_store("watched")
    watcher = await obs.watch()
    assert await watcher.updates(timeout=2) is None
    await obs.put("one", b"1")
    first = await watcher.updates(timeout=2)
    assert first is not None and (first.name, first.size, first.deleted) == ("one", 1, False)
    await watcher.stop()

    await obs.put("two", b"22")
    await obs.delete("one")
    again = await obs.watch()
    initial = []
    while (entry := await again.updates(timeout=2)) is not None:
        initial.append((entry.name, entry.size, entry.deleted))
    assert initial == [("two", 2, False), ("one", 0, True)]
    await obs.put("three", b"333")
    live = await again.updates(timeout=2)
    assert live is not None and (live.name, live.size) == ("three", 3)
    await again.stop()

    only_new = await obs.watch(updates_only=True)
    await obs.put("four", b"4444")
    live = await only_new.updates(timeout=2)
    assert live is not None and live.name == "four"
    await only_new.stop()


async def test_large_object_from_a_stream_with_headers(nc: Client) -> None:
    js = nc.jetstream()
    obs = await js.create_object_store("large")
    # 5 MiB: past nats-py's flow-control thresholds on the ordered consumer reading it.
    data = hashlib.sha256(b"seed").digest() * (5 * 1024 * 1024 // 32)
    meta = api.ObjectMeta(name="blob", description="five MiB", headers={"X-Kind": "test"})
    info = await obs.put("blob", io.BytesIO(data), meta=meta)
    assert (info.name, info.size, info.chunks) == ("blob", len(data), 40)
    result = await obs.get("blob")
    assert result.data == data
    assert result.info.digest == _digest(data)
    assert (result.info.description, result.info.headers) == ("five MiB", {"X-Kind": "test"})
    await obs.delete("blob")
    assert (await js.stream_info("OBJ_large")).state.messages == 1


async def test_history_watch_and_sealed_bucket(nc: Client) -> None:
    js = nc.jetstream()
    obs = await js.create_object_store("sealed")
    await obs.put("x", b"one")
    await obs.put("x", b"two!")
    history = await obs.watch(include_history=True)
    sizes = []
    while (entry := await history.updates(timeout=2)) is not None:
        sizes.append((entry.name, entry.size))
    # The meta subject rolls up: only the latest meta message is left to replay.
    assert sizes == [("x", 4)]
    await history.stop()

    await obs.seal()
    status = await obs.status()
    assert status.sealed is True
    with pytest.raises(APIError) as refused:
        await obs.put("y", b"late")
    assert "sealed" in str(refused.value).lower()
    assert (await obs.get("x")).data == b"two!"


async def _add_link(nc: Client, bucket: str, name: str, target: api.ObjectLink) -> None:
    """What nats.go's AddLink/AddBucketLink publish (nats-py has no call for it): a meta
    message carrying ``options.link``, rolled up on the link's meta subject."""
    key = base64.urlsafe_b64encode(name.encode()).decode()
    meta = {
        "name": name,
        "bucket": bucket,
        "nuid": "LINK" + key.rstrip("="),
        "mtime": "2026-11-24T00:00:00Z",
        "options": {"link": {"bucket": target.bucket, "name": target.name or ""}},
    }
    await nc.jetstream().publish(
        f"$O.{bucket}.M.{key}", json.dumps(meta).encode(), headers={"Nats-Rollup": "sub"}
    )


async def test_links_to_an_object_and_to_a_bucket(nc: Client) -> None:
    js = nc.jetstream()
    origin = await js.create_object_store("linked")
    await origin.put("report.txt", b"quarterly numbers")
    links = await js.create_object_store("links")
    await _add_link(nc, "links", "latest", api.ObjectLink(bucket="linked", name="report.txt"))
    await _add_link(nc, "links", "all", api.ObjectLink(bucket="linked"))

    info = await links.get_info("latest")
    assert info.is_link() and info.options.link.bucket == "linked"
    result = await links.get("latest")  # nats-py follows an object link to its target
    assert result.data == b"quarterly numbers" and result.info.name == "report.txt"
    with pytest.raises(LinkIsABucketError):
        await links.get("all")
    assert sorted(i.name for i in await links.list()) == ["all", "latest"]


@pytest.mark.slow
async def test_fifty_megabyte_object_round_trip(nc: Client) -> None:
    js = nc.jetstream()
    obs = await js.create_object_store("huge")
    seed = hashlib.sha256(b"fifty").digest()
    data = b"".join(hashlib.sha256(seed + i.to_bytes(4, "big")).digest() for i in range(50 * 2**15))
    assert len(data) == 50 * 1024 * 1024
    info = await obs.put("fifty.bin", io.BytesIO(data))
    assert (info.size, info.chunks, info.digest) == (len(data), len(data) // CHUNK, _digest(data))
    result = await obs.get("fifty.bin")
    assert result.data == data
    assert hashlib.sha256(result.data).digest() == hashlib.sha256(data).digest()
    assert result.info.digest == _digest(data)
