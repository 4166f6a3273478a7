"""Connection profiles as the handlers see them: Secrets arrive through kopf's index (filled
by the operator's own index handler), not through API calls."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import kopf
import pytest
from nats.aio.client import Client

from headwater.control.connection import ConnectionSettings
from headwater.testing import ServerProcess
from headwater_operator.config import OperatorConfig
from headwater_operator.handlers import Operator
from tests.operator.handlers.conftest import WAIT_DELAY
from tests.operator.handlers.harness import (
    LOGGER,
    NAMESPACE,
    Harness,
    Resource,
    condition,
    index_of,
    stream_config,
)

NOWHERE = "nats://127.0.0.1:1"


@pytest.fixture
async def lost_harness() -> AsyncIterator[Harness]:
    """An operator whose default server is a port nothing listens on: only a profile can
    lead it to the real one."""
    config = OperatorConfig(
        connection=ConnectionSettings(servers=(NOWHERE,)),
        wait_delay=WAIT_DELAY,
        request_timeout=3.0,
    )
    operator = Operator(config)
    settings = kopf.OperatorSettings()
    await operator.startup(settings=settings, logger=LOGGER)
    try:
        yield Harness(operator, settings)
    finally:
        await operator.cleanup()


def secrets_index(
    operator: Operator, name: str, servers: str, **extra: str
) -> kopf.Index[str, object]:
    """The connection_secrets index as kopf builds it from one labelled Secret."""
    values = {"servers": servers, **extra}
    secret = kopf.Body(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "data": {
                key: base64.b64encode(value.encode()).decode() for key, value in values.items()
            },
        }
    )
    entry = operator.index_secret(name=name, namespace=NAMESPACE, body=secret)
    (key, value) = entry.popitem()
    return index_of({key: value})


async def test_the_namespace_profile_secret_leads_to_the_server(
    lost_harness: Harness, clean_server: ServerProcess, nc: Client
) -> None:
    operator = lost_harness.operator
    secrets = secrets_index(operator, "headwater-connection", clean_server.url)
    orders = Resource("Stream", "orders", {"name": "ORDERS", "subjects": ["ORDERS.*"]})

    await lost_harness.call(operator.on_create, orders, indexes={"connection_secrets": secrets})

    assert await stream_config(nc, "ORDERS") is not None
    assert condition(orders, "Ready")["status"] == "True"


async def test_a_missing_profile_waits_without_touching_any_server(
    lost_harness: Harness, clean_server: ServerProcess, nc: Client
) -> None:
    operator = lost_harness.operator
    # A profile exists, but not the one the resource names.
    secrets = secrets_index(operator, "headwater-connection", clean_server.url)
    orders = Resource(
        "Stream", "orders", {"name": "ORDERS", "subjects": ["ORDERS.*"], "account": "team-a"}
    )

    with pytest.raises(kopf.TemporaryError) as raised:
        await lost_harness.call(
            operator.on_create, orders, retry=5, indexes={"connection_secrets": secrets}
        )

    assert raised.value.delay == WAIT_DELAY
    assert "team-a" in str(raised.value)
    assert condition(orders, "InSync")["reason"] == "ConnectionProfileMissing"
    assert lost_harness.reasons(orders) == ["ConnectionProfileMissing"]
    assert await stream_config(nc, "ORDERS") is None


async def test_an_invalid_spec_js_domain_is_a_permanent_error(lost_harness: Harness) -> None:
    orders = Resource(
        "Stream", "orders", {"name": "ORDERS", "subjects": ["ORDERS.*"], "jsDomain": "a.b"}
    )

    with pytest.raises(kopf.PermanentError) as raised:
        await lost_harness.call(lost_harness.operator.on_create, orders)

    assert "spec.jsDomain" in str(raised.value) and "'a.b'" in str(raised.value)
    assert condition(orders, "InSync")["reason"] == "Invalid"
    assert lost_harness.reasons(orders) == ["Invalid"]


async def test_an_invalid_profile_domain_waits_for_the_profile_to_change(
    lost_harness: Harness, clean_server: ServerProcess, nc: Client
) -> None:
    operator = lost_harness.operator
    secrets = secrets_index(operator, "headwater-connection", clean_server.url, jsDomain="a.b")
    orders = Resource("Stream", "orders", {"name": "ORDERS", "subjects": ["ORDERS.*"]})

    with pytest.raises(kopf.TemporaryError) as raised:
        await lost_harness.call(
            operator.on_create, orders, retry=5, indexes={"connection_secrets": secrets}
        )

    assert raised.value.delay == WAIT_DELAY
    assert "'headwater-connection'" in str(raised.value) and "jsDomain" in str(raised.value)
    assert condition(orders, "InSync")["reason"] == "ConnectionProfileInvalid"
    assert await stream_config(nc, "ORDERS") is None

    # Once the profile is fixed (here: no domain), the same resource reconciles without a
    # spec change.
    fixed = secrets_index(operator, "headwater-connection", clean_server.url)
    await lost_harness.call(operator.on_create, orders, indexes={"connection_secrets": fixed})
    assert condition(orders, "Ready")["status"] == "True"
    assert await stream_config(nc, "ORDERS") is not None


async def test_a_profile_domain_no_server_answers_is_unreachable(
    lost_harness: Harness, clean_server: ServerProcess, nc: Client
) -> None:
    operator = lost_harness.operator
    secrets = secrets_index(operator, "headwater-connection", clean_server.url, jsDomain="nowhere")
    orders = Resource("Stream", "orders", {"name": "ORDERS", "subjects": ["ORDERS.*"]})

    with pytest.raises(kopf.TemporaryError) as raised:
        await lost_harness.call(operator.on_create, orders, indexes={"connection_secrets": secrets})

    assert "$JS.nowhere.API" in str(raised.value)
    assert condition(orders, "Ready")["reason"] == "Unreachable"
    assert await stream_config(nc, "ORDERS") is None
