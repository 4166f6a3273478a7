"""Publishing to streams through nats-py: acks, dedupe and every refusal's error code."""

from __future__ import annotations

import json

import pytest
from nats.aio.client import Client
from nats.js.errors import APIError, NoStreamResponseError


async def publish_error(
    nc: Client, subject: str, headers: dict[str, str], data: bytes = b"x"
) -> int:
    with pytest.raises(APIError) as info:
        await nc.jetstream().publish(subject, data, headers=headers)
    assert info.value.err_code is not None
    return info.value.err_code


async def test_acks_and_dedupe(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="ACKS", subjects=["acks.>"])
    first = await js.publish("acks.a", b"1")
    assert (first.stream, first.seq, first.duplicate) == ("ACKS", 1, None)
    one = await js.publish("acks.a", b"2", headers={"Nats-Msg-Id": "m1"})
    dup = await js.publish("acks.a", b"2", headers={"Nats-Msg-Id": "m1"})
    assert (one.seq, one.duplicate) == (2, None)
    assert (dup.seq, dup.duplicate) == (2, True)
    raw = await nc.request("acks.b", b"3", headers={"Nats-Msg-Id": "m1"}, timeout=5)
    assert raw.data == b'{"stream":"ACKS","seq":2,"duplicate": true}'
    plain = await nc.request("acks.b", b"4", timeout=5)
    assert plain.data == b'{"stream":"ACKS","seq":3}'
    assert (await js.stream_info("ACKS")).state.messages == 3
    with pytest.raises(NoStreamResponseError):
        await js.publish("not.captured", b"x")


async def test_expected_header_errors(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="EXP", subjects=["exp.*"])
    await js.publish("exp.a", b"1", headers={"Nats-Msg-Id": "first"})
    await js.publish("exp.b", b"2")
    assert await publish_error(nc, "exp.a", {"Nats-Expected-Stream": "OTHER"}) == 10060
    assert await publish_error(nc, "exp.a", {"Nats-Expected-Last-Sequence": "1"}) == 10071
    assert await publish_error(nc, "exp.a", {"Nats-Expected-Last-Sequence": "bad"}) == 10071
    assert await publish_error(nc, "exp.a", {"Nats-Expected-Last-Subject-Sequence": "2"}) == 10071
    other = {
        "Nats-Expected-Last-Subject-Sequence": "1",
        "Nats-Expected-Last-Subject-Sequence-Subject": "exp.b",
    }
    assert await publish_error(nc, "exp.a", other) == 10071
    assert await publish_error(nc, "exp.a", {"Nats-Expected-Last-Msg-Id": "first"}) == 10070
    ok = await js.publish("exp.a", b"3", headers={"Nats-Expected-Last-Sequence": "2"})
    assert ok.seq == 3
    ok = await js.publish("exp.a", b"4", headers={"Nats-Expected-Last-Subject-Sequence": "3"})
    assert ok.seq == 4
    ok = await js.publish("exp.c", b"5", headers={"Nats-Expected-Last-Subject-Sequence": "0"})
    assert ok.seq == 5
    reply = await nc.request("exp.a", b"x", headers={"Nats-Expected-Last-Sequence": "1"}, timeout=5)
    assert json.loads(reply.data) == {
        "error": {"code": 400, "err_code": 10071, "description": "wrong last sequence: 5"},
        "stream": "EXP",
        "seq": 0,
    }


async def test_feature_and_size_refusals(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="REF", subjects=["ref"], max_msg_size=64)
    assert await publish_error(nc, "ref", {"Nats-Rollup": "sub"}) == 10111
    assert await publish_error(nc, "ref", {"Nats-TTL": "5s"}) == 10166
    assert await publish_error(nc, "ref", {"Nats-TTL": "bogus"}) == 10165
    assert await publish_error(nc, "ref", {}, data=b"x" * 65) == 10054
    assert (await js.publish("ref", b"x" * 64)).seq == 1


async def test_discard_new_limits(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="DNEW", subjects=["dn.*"], max_msgs=2, discard="new")
    await js.publish("dn.a", b"1")
    await js.publish("dn.b", b"2")
    with pytest.raises(APIError) as info:
        await js.publish("dn.c", b"3")
    assert (info.value.err_code, info.value.description) == (10077, "maximum messages exceeded")
    await js.add_stream(
        name="DPER",
        subjects=["dp.*"],
        max_msgs_per_subject=1,
        discard="new",
        discard_new_per_subject=True,
    )
    await js.publish("dp.a", b"1")
    with pytest.raises(APIError) as info:
        await js.publish("dp.a", b"2")
    assert info.value.description == "maximum messages per subject exceeded"
    assert (await js.publish("dp.b", b"3")).seq == 2


async def test_sealed_stream_refuses_publishes(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="SEAL", subjects=["seal"])
    await js.publish("seal", b"before")
    sealed = await js.update_stream(name="SEAL", subjects=["seal"], sealed=True)
    assert sealed.config.sealed and sealed.config.deny_delete and sealed.config.deny_purge
    assert await publish_error(nc, "seal", {}) == 10109
    with pytest.raises(APIError) as info:
        await js.delete_msg("SEAL", 1)
    assert info.value.err_code == 10109


async def test_rollup_subject(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="ROLL", subjects=["roll.*"], allow_rollup_hdrs=True)
    for subject in ("roll.a", "roll.a", "roll.b"):
        await js.publish(subject, b"x")
    await js.publish("roll.a", b"snapshot", headers={"Nats-Rollup": "sub"})
    info = await js.stream_info("ROLL", subjects_filter=">")
    assert info.state.subjects == {"roll.a": 1, "roll.b": 1}
    assert (await js.get_last_msg("ROLL", "roll.a")).data == b"snapshot"
