"""The Go-shaped value formats of the monitoring JSON."""

from __future__ import annotations

import datetime

import pytest

from headwater.server.monitoring.formats import go_duration, go_number, nanos, rfc3339, rtt, uptime


def test_rfc3339_is_utc_with_trimmed_fraction() -> None:
    ts = datetime.datetime(2026, 11, 24, 1, 48, 48, 290500, tzinfo=datetime.UTC).timestamp()
    assert rfc3339(ts) == "2026-11-24T01:48:48.2905Z"
    whole = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC).timestamp()
    assert rfc3339(whole) == "2026-01-02T03:04:05Z"
    # Go parses it back to the same instant.
    parsed = datetime.datetime.fromisoformat(rfc3339(ts).replace("Z", "+00:00"))
    assert parsed.timestamp() == pytest.approx(ts, abs=1e-6)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.9, "0s"),
        (59.99, "59s"),
        (60, "1m0s"),
        (62, "1m2s"),
        (3600, "1h0m0s"),
        (3 * 3600 + 4 * 60 + 5, "3h4m5s"),
        (86400, "1d0h0m0s"),
        (2 * 86400 + 3661, "2d1h1m1s"),
        (365 * 86400 + 86400 + 1, "1y1d0h0m1s"),
        (-5, "0s"),
    ],
)
def test_uptime_matches_nats_server_format(seconds: float, text: str) -> None:
    assert uptime(seconds) == text


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (1, "1ns"),
        (999, "999ns"),
        (1_000, "1µs"),
        (1_500, "1.5µs"),
        (600_123, "600.123µs"),
        (1_000_000, "1ms"),
        (1_234_567, "1.234567ms"),
        (1_000_000_000, "1s"),
        (1_500_000_000, "1.5s"),
        (62_000_000_000, "1m2s"),
        (3_600_000_000_000, "1h0m0s"),
        (3_723_400_000_000, "1h2m3.4s"),
        (-1_500, "-1.5µs"),
    ],
)
def test_go_duration_matches_go(ns: int, text: str) -> None:
    assert go_duration(ns) == text


def test_rtt_truncates_to_microseconds_below_a_millisecond() -> None:
    assert rtt(0.0) == "0s"
    assert rtt(0.000600789) == "600µs"
    assert rtt(0.0000005) == "500ns"
    assert rtt(0.0015) == "1.5ms"
    assert rtt(1.25) == "1.25s"


def test_nanos_and_go_number() -> None:
    assert nanos(120.0) == 120_000_000_000
    assert nanos(0.5) == 500_000_000
    assert go_number(2.0) == 2 and isinstance(go_number(2.0), int)
    assert go_number(0.375) == 0.375
    assert go_number(7) == 7
