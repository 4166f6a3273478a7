"""``store_raw_msg``: the store primitive a restore rebuilds a stream with."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.server.store import StoreConfig, StoreError, open_store

HDR = b"NATS/1.0\r\nA: 1\r\n\r\n"


@pytest.mark.parametrize("storage", ["file", "memory"])
def test_sequences_gaps_and_times_survive(tmp_path: Path, storage: str) -> None:
    cfg = StoreConfig(name="S", storage=storage, directory=tmp_path)  # type: ignore[arg-type]
    store = open_store(cfg)
    store.store_raw_msg("a", b"", b"one", 5, 1000)
    store.store_raw_msg("b", HDR, b"two", 6, 1000)
    store.store_raw_msg("a", b"", b"three", 9, 2000)
    store.skip_msgs(10, 2, ts_ns=3000)  # the last two were deleted before the backup
    store.check()

    def verify() -> None:
        state = store.state(deleted_details=True)
        assert (state.msgs, state.first_seq, state.last_seq) == (3, 5, 11)
        assert state.deleted == [7, 8, 10, 11]
        assert (state.first_ts, state.last_ts) == (1000, 3000)
        msg = store.load_msg(6)
        assert msg is not None
        assert (msg.subject, msg.hdr, msg.data, msg.ts) == ("b", HDR, b"two", 1000)
        nine = store.load_msg(9)
        assert nine is not None and nine.ts == 2000
        assert store.subject_state(">") == {"a": 2, "b": 1}

    verify()
    if storage == "file":
        store.close()
        store = open_store(cfg)
        verify()
        store.check()
    store.close()


def test_out_of_order_is_refused(tmp_path: Path) -> None:
    store = open_store(StoreConfig(name="S", storage="memory"))
    store.store_raw_msg("a", b"", b"", 3, 50)
    with pytest.raises(StoreError):
        store.store_raw_msg("a", b"", b"", 3, 60)
    with pytest.raises(StoreError):
        store.store_raw_msg("a", b"", b"", 4, 40)
    store.close()


def test_ttl_is_rearmed(tmp_path: Path) -> None:
    store = open_store(StoreConfig(name="S", storage="memory"))
    store.store_raw_msg("a", b"", b"", 1, 1_000, ttl_ns=500)
    store.store_raw_msg("a", b"", b"", 2, 1_000, ttl_ns=-1)
    assert store.next_expiry() == 1_500
    assert store.expire(now_ns=2_000) == 1
    assert store.state().msgs == 1
    store.close()


def test_skip_keeps_a_zero_time(tmp_path: Path) -> None:
    store = open_store(StoreConfig(name="S", storage="file", directory=tmp_path))
    store.skip_msgs(1, 999, ts_ns=0)  # a never-used stream created with first_seq 1000
    state = store.state()
    assert (state.first_seq, state.last_seq, state.last_ts) == (1000, 999, 0)
    store.close()
