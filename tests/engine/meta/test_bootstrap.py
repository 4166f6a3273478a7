"""How an etcd member is named, where it listens and how it starts: pure functions."""

from __future__ import annotations

import pytest

from headwater.server.meta.bootstrap import (
    MemberAddress,
    Mode,
    cluster_token,
    initial_cluster_flag,
    member_address,
    member_of_peer_url,
    plan_bootstrap,
)

ROUTES = ["nats-route://host1:6222", "nats-route://host2:6222", "nats-route://host3:6222"]


def test_names_and_ports_derive_from_the_route_url() -> None:
    member = member_address("nats-route://ruser:secret@Host-1.Example.svc:7000")
    assert member.name == "host-1-example-svc-7000"
    assert member.client_url == "http://host-1.example.svc:7001"
    assert member.peer_url == "http://host-1.example.svc:7002"
    assert member_address("nats://[::1]:6222").name == "1-6222"
    assert member_address("nats://[::1]:6222").peer_url == "http://[::1]:6224"
    assert member_of_peer_url(member.peer_url) == member


def test_the_same_server_listed_differently_is_one_member() -> None:
    assert member_address("nats://HOST1:6222") == member_address("nats-route://u:p@host1:6222")


def test_unusable_route_urls_are_refused() -> None:
    with pytest.raises(ValueError):
        member_address("nats-route://host1")
    with pytest.raises(ValueError):
        plan_bootstrap("nats-route://host1:6222", ["not a url"], False)


def test_a_data_dir_with_a_member_restarts_as_it_is() -> None:
    for routes in ([], ROUTES, ROUTES[:1]):
        assert plan_bootstrap(ROUTES[1], routes, True).mode is Mode.RESTART


def test_no_routes_bootstraps_a_single_member() -> None:
    plan = plan_bootstrap(ROUTES[0], [], False)
    assert plan.mode is Mode.SINGLE
    assert plan.initial_cluster == (member_address(ROUTES[0]),)


def test_every_server_listing_every_server_bootstraps_statically() -> None:
    plans = [plan_bootstrap(me, list(reversed(ROUTES)) + ROUTES[:1], False) for me in ROUTES]
    assert {plan.mode for plan in plans} == {Mode.STATIC}
    # Every server computes the same initial cluster, whatever the order of its list.
    assert len({plan.initial_cluster for plan in plans}) == 1
    assert initial_cluster_flag(plans[0].initial_cluster) == (
        "host1-6222=http://host1:6224,host2-6222=http://host2:6224,host3-6222=http://host3:6224"
    )


def test_routes_without_this_server_join_through_them() -> None:
    plan = plan_bootstrap("nats-route://host4:6222", ROUTES[:2], False)
    assert plan.mode is Mode.JOIN
    assert plan.seeds == (MemberAddress("host1", 6222), MemberAddress("host2", 6222))
    assert plan.initial_cluster == ()


def test_the_token_is_the_cluster_name_s() -> None:
    assert cluster_token("demo") == cluster_token("demo") != cluster_token("other")
