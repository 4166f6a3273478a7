"""Fixtures of the handler-level tests: an Operator (started as kopf would start it) whose
default connection points at a real, empty JetStream server of each kind."""

from __future__ import annotations

from collections.abc import AsyncIterator

import kopf
import pytest
from nats.aio.client import Client

from headwater.control.connection import ConnectionSettings
from headwater.testing import ServerProcess
from headwater_operator.config import OperatorConfig
from headwater_operator.handlers import Operator
from tests.operator.handlers.harness import LOGGER, Harness

WAIT_DELAY = 0.3
MAX_BACKOFF = 8.0


@pytest.fixture
async def harness(clean_server: ServerProcess) -> AsyncIterator[Harness]:
    config = OperatorConfig(
        connection=ConnectionSettings(servers=(clean_server.url,)),
        wait_delay=WAIT_DELAY,
        max_backoff=MAX_BACKOFF,
        request_timeout=3.0,
    )
    operator = Operator(config)
    settings = kopf.OperatorSettings()
    await operator.startup(settings=settings, logger=LOGGER)
    try:
        yield Harness(operator, settings)
    finally:
        await operator.cleanup()


@pytest.fixture
async def nc(clean_server: ServerProcess) -> AsyncIterator[Client]:
    """A client of its own, to look at (and tamper with) the server behind the operator."""
    client = await ConnectionSettings(servers=(clean_server.url,)).connect()
    try:
        yield client
    finally:
        await client.close()
