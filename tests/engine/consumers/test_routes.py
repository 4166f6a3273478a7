"""The consumer API routes: every one reaches a ConsumerApi handler; MSG.NEXT is not routed."""

from __future__ import annotations

import pytest

from headwater.server.consumers.api import ConsumerApi
from headwater.server.jetstream import api


def test_every_consumer_route_has_a_handler() -> None:
    for route in api.CONSUMER_ROUTES:
        assert route.type.startswith("io.nats.jetstream.api.v1.consumer_")
        assert callable(getattr(ConsumerApi, route.handler))


@pytest.mark.parametrize(
    ("subject", "handler"),
    [
        ("CONSUMER.CREATE.S", "consumer_create"),
        ("CONSUMER.CREATE.S.C", "consumer_create"),
        ("CONSUMER.CREATE.S.C.orders.*.new", "consumer_create"),
        ("CONSUMER.DURABLE.CREATE.S.C", "consumer_durable_create"),
        ("CONSUMER.INFO.S.C", "consumer_info"),
        ("CONSUMER.DELETE.S.C", "consumer_delete"),
        ("CONSUMER.NAMES.S", "consumer_names"),
        ("CONSUMER.LIST.S", "consumer_list"),
        ("CONSUMER.PAUSE.S.C", "consumer_pause"),
    ],
)
def test_consumer_subjects_route(subject: str, handler: str) -> None:
    route = api.match_route(subject.split("."), api.ROUTES + api.CONSUMER_ROUTES)
    assert route is not None and route.handler == handler


@pytest.mark.parametrize("subject", ["CONSUMER.MSG.NEXT.S.C", "CONSUMER.INFO.S", "CONSUMER.X.S"])
def test_unrouted_consumer_subjects(subject: str) -> None:
    assert api.match_route(subject.split("."), api.ROUTES + api.CONSUMER_ROUTES) is None
    assert "MSG" not in api.CONSUMER_VERBS
