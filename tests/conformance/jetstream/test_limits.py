"""Stream limits as clients observe them: discard old, per-subject history, max_age, bytes."""

from __future__ import annotations

import asyncio
import time

from nats.aio.client import Client


async def test_discard_old_by_count_and_bytes(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="LIM_N", subjects=["limn"], max_msgs=3)
    for i in range(5):
        await js.publish("limn", b"%d" % i)
    state = (await js.stream_info("LIM_N")).state
    assert (state.messages, state.first_seq, state.last_seq) == (3, 3, 5)
    # Each 10-byte message on "limb" counts 22 + 4 + 10 + 8 = 44 bytes.
    await js.add_stream(name="LIM_B", subjects=["limb"], max_bytes=100)
    for _ in range(4):
        await js.publish("limb", b"0123456789")
    state = (await js.stream_info("LIM_B")).state
    assert (state.messages, state.bytes, state.first_seq) == (2, 88, 3)


async def test_per_subject_history(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="LIM_PS", subjects=["ps.*"], max_msgs_per_subject=2)
    for i in range(6):
        await js.publish(f"ps.{'xy'[i % 2]}", b"%d" % i)
    await js.publish("ps.z", b"z")
    info = await js.stream_info("LIM_PS", subjects_filter="ps.*")
    assert info.state.subjects == {"ps.x": 2, "ps.y": 2, "ps.z": 1}
    assert info.state.messages == 5 and info.state.first_seq == 3
    first_x = await js.get_msg("LIM_PS", 3)
    assert (first_x.subject, first_x.data) == ("ps.x", b"2")


async def test_max_age_expires_messages_without_traffic(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="LIM_AGE", subjects=["age.*"], max_age=0.5)
    await js.publish("age.a", b"old")
    await asyncio.sleep(0.25)
    await js.publish("age.b", b"newer")
    deadline = time.monotonic() + 3
    seen: list[tuple[int, int]] = []
    while time.monotonic() < deadline:
        state = (await js.stream_info("LIM_AGE")).state
        if not seen or seen[-1] != (state.messages, state.first_seq):
            seen.append((state.messages, state.first_seq))
        if state.messages == 0:
            break
        await asyncio.sleep(0.05)
    assert seen[0] == (2, 1)
    assert (1, 2) in seen, f"messages did not expire one by one: {seen}"
    assert seen[-1] == (0, 3)
    info = await js.stream_info("LIM_AGE")
    assert (info.config.max_age, info.config.duplicate_window) == (0.5, 0.5)


async def test_lowering_a_limit_applies_to_stored_messages(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="LIM_UPD", subjects=["upd.*"])
    for i in range(6):
        await js.publish(f"upd.{i % 3}", b"x")
    updated = await js.update_stream(name="LIM_UPD", subjects=["upd.*"], max_msgs_per_subject=1)
    assert updated.state.messages == 3
    assert updated.state.first_seq == 4
