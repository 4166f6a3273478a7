"""The official Go client (nats.go 1.22.1, legacy JetStream API) against Headwater and
nats-server: each scenario of tests/interop/gojs/main.go runs once against each server, and
what the client saw (sequences, payloads, headers, error texts and codes, consumer and KV
state, object digests) must be identical. A few facts are also checked on their own so that
two empty or equally broken runs cannot pass.

The ``test_cluster_*`` tests do the same with gojs/cluster.go on a 3-server Headwater cluster
and a 3-server nats-server cluster: core routing, JetStream across servers, and failover to
a server the client learned from the cluster. After creating a stream, consumer or bucket the
JetStream scenario waits (bounded) until the host's new interest has reached every server
before publishing or fetching through another: both kinds propagate interest over the routes
asynchronously, and a create's answer can overtake it.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from interop.differential import (
    ClusterRun,
    Observed,
    Run,
    both_clusters,
    both_servers,
    check_cluster_jetstream,
)
from interop.differential import assert_same as same

from headwater.testing import Cluster, ServerProcess

pytestmark = pytest.mark.differential


@pytest.fixture(scope="module")
def observed(run_gojs: Run, js_server_pair: tuple[ServerProcess, ServerProcess]) -> Iterator[Any]:
    with both_servers(run_gojs, js_server_pair) as run:
        yield run


def assert_same(scenario: str, ours: Observed, theirs: Observed) -> None:
    same("nats.go", scenario, ours, theirs)


def api_error(obs: Any) -> tuple[int, int, str]:
    err = obs.get("error", obs)
    return err["code"], err["err_code"], err["text"]


def test_streams(observed: Any) -> None:
    ours, theirs = observed("streams")
    for o in (ours, theirs):
        acks = o["pub_acks"]
        assert [a["seq"] for a in acks] == [1, 1, 2, 3, 4, 5]
        assert [a["duplicate"] for a in acks] == [False, True, False, False, False, False]
        assert o["info_state"]["msgs"] == 6 and o["info_state"]["last_seq"] == 6
        assert o["info_subjects"] == {"iop.st.a": 2, "iop.st.b": 2, "iop.st.c": 2}
        assert o["update_config"]["subjects"] == ["iop.st.>", "iop.st2.*"]
        assert o["update_config"]["max_msgs"] == 100
        assert o["pub_after_update"]["seq"] == 7
        assert o["get_3"]["data"] == "three" and o["get_3"]["header"]["X-Test"] == ["v3"]
        assert o["get_last_b"]["seq"] == 4
        assert o["direct_get_next_c"]["seq"] == 5
        assert o["get_missing"]["not_found"] and o["get_deleted_2"]["not_found"]
        assert o["after_delete_state"]["num_deleted"] == 1
        assert o["after_purge_state"]["msgs"] == 4
        assert api_error(o["pub_wrong_last_seq"]) == (400, 10071, "nats: wrong last sequence: 5")
        assert o["info_missing"]["is"] and api_error(o["info_missing"])[:2] == (404, 10059)
        assert o["add_dotted_name"]["is"]
        assert api_error(o["add_overlapping_subjects"])[1] == 10065
        assert o["add_different"]["is"] and o["delete_stream_again"]["is"]
    assert_same("streams", ours, theirs)


def test_consumers(observed: Any) -> None:
    ours, theirs = observed("consumers")
    for o in (ours, theirs):
        assert [m["data"] for m in o["fetch_1"]] == ["p-1", "p-2", "p-3"]
        assert [m["pending"] for m in o["fetch_1"]] == [9, 8, 7]
        (again,) = o["fetch_redelivered"]
        assert (again["data"], again["delivered"], again["stream_seq"]) == ("p-4", 2, 4)
        assert o["ack_sync_twice"]["is"]
        assert [m["data"] for m in o["fetch_rest"]] == ["p-6", "p-7", "p-8", "p-9", "p-10"]
        assert o["info_unacked"]["num_ack_pending"] == 5
        assert o["info_unacked"]["num_pending"] == 0
        assert o["info_after_term"]["num_ack_pending"] == 0
        assert o["fetch_empty"]["is"]
        assert o["consumer_names"] == ["pull1"]
        queue = o["queue"]
        assert queue == {
            "received": 40,
            "distinct": 40,
            "duplicates": 0,
            "both_members_got_some": True,
        }
        assert o["queue_info"]["deliver_group"] == "workers"
        ordered = {"received": 1000, "in_order": True, "first": "o-1", "last": "o-1000"}
        assert o["ordered"] == ordered
        assert [m["delivered"] for m in o["max_deliver_fetches"]] == [1, 2]
        assert o["max_deliver_exhausted"]["is"]
        assert o["info_missing_consumer"]["is"]
        assert api_error(o["info_missing_consumer"])[:2] == (404, 10014)
    assert_same("consumers", ours, theirs)


def test_kv(observed: Any) -> None:
    ours, theirs = observed("kv")
    for o in (ours, theirs):
        assert o["keys_empty"]["no_keys"]
        assert (o["put_a"], o["put_b"]) == (1, 2)
        assert o["create_a_exists"]["key_exists"]
        assert api_error(o["update_a_wrong_rev"])[1] == 10071
        assert o["update_a_right_rev"] == 4
        assert [e["value"] for e in o["history_a"]] == [f"a-{i}" for i in range(5)]
        assert o["get_b_deleted"]["key_not_found"] and o["get_c_purged"]["key_not_found"]
        assert o["history_c"]["entries"][0]["op"] == "KeyValuePurgeOp"
        assert o["keys"]["keys"] == ["a", "b"]
        assert o["watch_marker"] is True
        assert [e["key"] for e in o["watch_initial"]] == ["a", "b", "c"]
        assert [(e["key"], e["op"]) for e in o["watch_updates"]] == [
            ("d", "KeyValuePutOp"),
            ("d", "KeyValueDeleteOp"),
            ("a", "KeyValuePutOp"),
        ]
        status = o["status"]
        assert (status["bucket"], status["history"], status["ttl"]) == ("iop_kv", 5, "1h0m0s")
        assert status["values"] == 9
        assert o["bind_deleted"]["bucket_not_found"]
    assert_same("kv", ours, theirs)


def test_objects(observed: Any) -> None:
    ours, theirs = observed("objects")
    for o in (ours, theirs):
        digest = bytes.fromhex(o["local_sha256"])
        want = "SHA-256=" + base64.urlsafe_b64encode(digest).decode()
        big = o["get_info_big"]
        assert (big["size"], big["chunks"], big["digest"]) == (5 * 1024 * 1024, 40, want)
        assert o["get_big"] == {"read": 5 * 1024 * 1024, "error": None, "sha256": o["local_sha256"]}
        assert o["get_renamed"]["sha256"] == o["local_sha256"]
        assert o["get_via_link"]["sha256"] == o["local_sha256"]
        assert [i["name"] for i in o["list"]] == ["big", "small"]
        assert o["get_info_old_name"]["not_found"]
        assert o["get_info_new_name"]["description"] == "renamed"
        assert o["add_link"]["link"] == {"bucket": "iop_obj", "name": "big2"}
        assert o["get_info_deleted"]["not_found"] and o["get_info_deleted_shown"]["deleted"]
        assert [i["name"] for i in o["list_after_delete"]] == ["big2", "lnk"]
        assert o["watch"][0] is None  # the empty store's end-of-initial-values marker
        assert {i["name"] for i in o["watch"][1:]} >= {"big", "small", "big2", "lnk"}
        assert o["sealed"] is True
        assert api_error(o["put_after_seal"])[1] == 10109
    assert_same("objects", ours, theirs)


def test_policies(observed: Any) -> None:
    ours, theirs = observed("policies")

    def data(fetched: Observed) -> list[str]:
        return [m["data"] for m in fetched["msgs"]]

    for o in (ours, theirs):
        assert api_error(o["wq_overlapping_consumer"])[1] == 10100
        assert o["wq_state_after_acks"]["msgs"] == 3
        assert o["int_state_no_consumers"]["msgs"] == 0
        assert o["int_state_c1_acked"]["msgs"] == 3
        assert o["int_state_all_acked"]["msgs"] == 0
        assert [a.get("seq") for a in o["lim_per_subject"]] == [1, 2, None]
        assert api_error(o["lim_per_subject"][2])[1] == 10077
        assert api_error(o["lim_too_big"][0])[1] == 10054
        assert api_error(o["lim_second_consumer"])[1] == 10026
        assert o["old_state"]["first_seq"] == 3 and o["old_get_1"]["not_found"]
        assert o["aw_again"]["msgs"][0]["delivered"] == 2
        assert data(o["dp_last_per_subject"]) == ["y2", "x3"]
        assert data(o["dp_start_seq"]) == ["x2", "x3"]
        assert data(o["dp_last"]) == ["x3"]
        assert data(o["dp_new_before"]) == [] and data(o["dp_new_after"]) == ["y3"]
        assert api_error(o["cc_start_seq_with_all"])[1] == 10094
        assert o["cc_update"]["ack_wait"] == "10s"
        assert api_error(o["cc_update_deliver_policy"])[1] == 10012
    assert_same("policies", ours, theirs)


# ---------------------------------------------------------------------------------------
# Clusters: tests/interop/gojs/cluster.go against three Headwater servers and three
# nats-server servers, each connection given one server's URL only.


@pytest.fixture
def cluster_observed(
    run_gojs_cluster: ClusterRun, cluster_pair: tuple[Cluster, Cluster]
) -> Iterator[Any]:
    with both_clusters(run_gojs_cluster, cluster_pair) as run:
        yield run


def test_cluster_core(cluster_observed: Any) -> None:
    ours, theirs = cluster_observed("cluster-core")
    for o in (ours, theirs):
        assert o["connected_to"] == ["s1", "s2", "s3"]
        assert o["discovered"] == [["s2", "s3"], ["s1", "s3"], ["s1", "s2"]]
        assert o["servers_s1"] == ["s1", "s2", "s3"]
        assert o["core_received"] == [f"m-{i}" for i in range(1, 11)]
        assert o["core_extra"] == []
        assert o["queue"] == {"received": 20, "distinct": 20}
        assert o["replies"] == [f"re:r-{i}@s3" for i in range(1, 6)]
        assert o["request_nobody"]["is"]
    assert_same("cluster-core", ours, theirs)


def test_cluster_jetstream(cluster_observed: Any) -> None:
    ours, theirs = cluster_observed("cluster-jetstream")
    for o in (ours, theirs):
        check_cluster_jetstream(o, "")
        assert o["fetch_s3_empty"]["is"]
        assert o["kv_update_s2_stale"]["error"]["err_code"] == 10071
        assert [(e["key"], e["value"]) for e in o["kv_history_s1"]] == [("k", "v1"), ("k", "v2")]
        assert o["kv_bind_deleted_s1"]["is"] and o["info_deleted_s1"]["is"]
    assert_same("cluster-jetstream", ours, theirs)


def test_cluster_failover(cluster_observed: Any) -> None:
    ours, theirs = cluster_observed("cluster-failover")
    for o in (ours, theirs):
        assert o["connected_before"] == "s1" and o["discovered_before"] == ["s2", "s3"]
        assert o["received_before"] == ["before-1", "before-2", "before-3"]
        assert not o["reconnected_to_killed"] and o["reconnected_to_discovered"]
        assert o["connected_name_matches"]
        assert o["received_after"] == ["after-1", "after-2", "after-3"]
        assert o["extra_after"] == [] and o["sub_valid"] and o["reconnects"] == 1
    assert_same("cluster-failover", ours, theirs)
