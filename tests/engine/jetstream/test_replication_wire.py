"""The pure parts of mirrors and sources: names, subjects, headers, requests, positions.

Expected values are nats-server 2.15's, as seen on the wire (see the module docstring of
``headwater.server.jetstream.replication.wire``).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from headwater.server.jetstream.replication import wire
from headwater.server.jetstream.replication.link import retry_backoff
from headwater.server.jetstream.replication.sources import recover_positions
from headwater.server.jetstream.replication.storing import align
from headwater.server.jetstream.replication.transforms import SourceTransforms
from headwater.server.jetstream.streamconfig import ExternalStream, StreamSource, SubjectTransform
from headwater.server.jetstream.wire import with_headers
from headwater.server.store import StoreConfig, open_store


def test_index_names() -> None:
    assert wire.index_name(StreamSource(name="ORIG")) == "ORIG > >"
    assert wire.index_name(StreamSource(name="ORIG", filter_subject="o.1")) == "ORIG o.1 >"
    transforms = (SubjectTransform("p.*", "q.{{wildcard(1)}}"), SubjectTransform("r", ""))
    assert (
        wire.index_name(StreamSource(name="O", subject_transforms=transforms))
        == "O p.*\fr q.{{wildcard(1)}}\f>"
    )
    external = StreamSource(name="ORIG", external=ExternalStream(api="$JS.hub.API"))
    assert wire.index_name(external) == f"ORIG:{wire.short_hash('$JS.hub.API')} > >"


def test_short_hash_is_nats_servers_get_hash() -> None:
    # nats-server's getHash; "ORIG:bTMUkJQk" is what it writes for api "$JS.hub.API".
    assert wire.short_hash("$JS.hub.API") == "bTMUkJQk"


def test_source_header_round_trip() -> None:
    value = wire.source_header("ORIG o.1 >", 4, "o.1", "UGihEuDh")
    assert value == "ORIG 4 o.1 > o.1 UGihEuDh"
    assert wire.parse_source_header(value) == ("ORIG", "ORIG o.1 >", 4)
    assert wire.source_header("ORIG > >", 2, "o.x") == "ORIG 2 > > o.x"
    # The 2.10 layout (no subject, no identity) and the pre-2.10 one (no index name).
    assert wire.parse_source_header("ORIG 7 > >") == ("ORIG", "ORIG > >", 7)
    assert wire.parse_source_header("ORIG 7") == ("ORIG", "", 7)
    for bad in ("ORIG", "ORIG 7 >", "ORIG x > > s", ""):
        assert wire.parse_source_header(bad) is None


def test_ack_reply_parsing() -> None:
    info = wire.parse_ack_reply("$JS.ACK.ORIG.JS_SRC_x.1.5.2.1795493371975127251.7")
    assert info == wire.AckInfo("JS_SRC_x", 1, 5, 2, 1795493371975127251, 7)
    long_form = wire.parse_ack_reply("$JS.ACK.dom.hash.ORIG.c.2.9.3.100.0.rand")
    assert long_form is not None and (long_form.consumer, long_form.sseq) == ("c", 9)
    for bad in ("", "_INBOX.x", "$JS.ACK.S.C.1.2.3.4", "$JS.ACK.S.C.1.x.3.4.5"):
        assert wire.parse_ack_reply(bad) is None


def test_control_messages() -> None:
    heartbeat = b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 3\r\n\r\n"
    assert wire.is_control(heartbeat, b"")
    assert not wire.is_control(heartbeat, b"data")
    assert not wire.is_control(b"NATS/1.0\r\nK: v\r\n\r\n", b"")
    assert not wire.is_control(None, b"")


def test_strip_headers() -> None:
    hdr = with_headers(
        None,
        [("Nats-Expected-Last-Sequence", "4"), ("K", "v"), (wire.SOURCE_HEADER, "A 1 > > s")],
    )
    kept = wire.strip_headers(hdr, (wire.SOURCE_HEADER,), "Nats-Expected-")
    assert kept == b"NATS/1.0\r\nK: v\r\n\r\n"
    only = with_headers(None, [("Nats-Expected-Stream", "X")])
    assert wire.strip_headers(only, (), "Nats-Expected-") == b""
    assert wire.strip_headers(kept, (wire.SOURCE_HEADER,)) is kept


def test_consumer_request_and_subjects() -> None:
    src = StreamSource(name="ORIG", filter_subject="o.1")
    filters = wire.filters_of(src)
    body = wire.consumer_request("ORIG", "JS_MIRROR_a", "$JS.M.x", filters, start_seq=5)
    cfg = body["config"]
    assert body["stream_name"] == "ORIG"
    assert (cfg["deliver_policy"], cfg["opt_start_seq"]) == ("by_start_sequence", 5)
    assert (cfg["ack_policy"], cfg["flow_control"], cfg["direct"]) == ("none", True, True)
    assert (cfg["idle_heartbeat"], cfg["inactive_threshold"]) == (10**9, 10 * 10**9)
    assert cfg["filter_subject"] == "o.1"
    assert wire.create_subject(src, "JS_MIRROR_a", filters) == (
        "$JS.API.CONSUMER.CREATE.ORIG.JS_MIRROR_a.o.1"
    )
    many = StreamSource(
        name="O", subject_transforms=(SubjectTransform("a", "b"), SubjectTransform("c", "d"))
    )
    body = wire.consumer_request("O", "n", "d", wire.filters_of(many), start_time="2026-01-01Z")
    assert body["config"]["filter_subjects"] == ["a", "c"]
    assert body["config"]["deliver_policy"] == "by_start_time"
    assert wire.consumer_request("O", "n", "d", [])["config"]["deliver_policy"] == "all"
    ext = StreamSource(name="O", external=ExternalStream(api="$JS.hub.API", deliver="dlv."))
    assert wire.create_subject(ext, "n", []) == "$JS.hub.API.CONSUMER.CREATE.O"
    assert wire.delete_subject(ext, "n") == "$JS.hub.API.CONSUMER.DELETE.O.n"
    assert wire.deliver_subject(ext, "S").startswith("dlv.S.")
    assert wire.deliver_subject(StreamSource(name="O"), "M").startswith("$JS.M.")


def test_identity_depends_on_the_incarnation() -> None:
    one = wire.stream_identity("ORIG", 1)
    assert len(one) == 8
    assert one == wire.stream_identity("ORIG", 1)
    assert one != wire.stream_identity("ORIG", 2)


@pytest.mark.parametrize(("fails", "seconds"), [(0, 0), (1, 10), (5, 50), (20, 120)])
def test_retry_backoff(fails: int, seconds: float) -> None:
    assert retry_backoff(fails) == seconds


def test_transforms_first_match_wins() -> None:
    src = StreamSource(
        name="O",
        subject_transforms=(
            SubjectTransform("a.*", "x.{{wildcard(1)}}"),
            SubjectTransform("b", ""),
            SubjectTransform(">", "all.>"),
        ),
    )
    rules = SourceTransforms(src)
    assert rules.apply("a.1") == "x.1"
    assert rules.apply("c.d") == "all.c.d"
    assert SourceTransforms(StreamSource(name="O")).apply("b") == "b"


def _memory_stream() -> SimpleNamespace:
    store = open_store(StoreConfig(name="T", storage="memory"))
    return SimpleNamespace(store=store, lseq=0)


def test_recover_positions_reads_the_newest_header_of_each_source() -> None:
    stream = _memory_stream()
    rows = [
        ("A 1 > > a", "a"),
        ("B 1 > > b", "b"),
        ("A 2 > > a", "a"),
        (None, "local"),
        ("C 9", "c"),
    ]
    for value, subject in rows:
        hdr = with_headers(None, [(wire.SOURCE_HEADER, value)]) if value else b""
        stream.store.store_msg(subject, hdr, b"x")
    sources = [
        SimpleNamespace(iname="A > >", source=StreamSource(name="A"), sseq=0),
        SimpleNamespace(iname="B > >", source=StreamSource(name="B"), sseq=0),
        SimpleNamespace(iname="C > >", source=StreamSource(name="C"), sseq=0),
        SimpleNamespace(iname="D > >", source=StreamSource(name="D"), sseq=0),
    ]
    recover_positions(stream, sources)  # type: ignore[arg-type]
    assert [s.sseq for s in sources] == [2, 1, 9, 0]


def test_align_skips_or_jumps_to_the_origin_sequence() -> None:
    stream = _memory_stream()
    align(stream, 5)  # type: ignore[arg-type]
    assert stream.lseq == 4
    assert stream.store.store_msg("s", b"", b"x")[0] == 5
    stream.lseq = 5
    align(stream, 9)  # type: ignore[arg-type]
    state = stream.store.state()
    assert (stream.lseq, state.last_seq, state.msgs) == (8, 8, 1)
    assert stream.store.store_msg("s", b"", b"y")[0] == 9
