"""The official JavaScript client (nats.js v3: @nats-io/transport-node, jetstream, kv and obj,
pinned in tests/interop/js/package-lock.json) against Headwater and nats-server: each scenario
of tests/interop/js/scenario.mjs runs once against each server, and what the client saw
(sequences, payloads, headers, error classes, texts and codes, consumer and KV state, object
digests) must be identical. A few facts are also checked on their own so that two empty or
equally broken runs cannot pass.

The ``test_cluster_*`` tests do the same with js/cluster.mjs on a 3-server Headwater cluster
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
def observed(run_natsjs: Run, js_server_pair: tuple[ServerProcess, ServerProcess]) -> Iterator[Any]:
    with both_servers(run_natsjs, js_server_pair) as run:
        yield run


def assert_same(scenario: str, ours: Observed, theirs: Observed) -> None:
    same("nats.js", scenario, ours, theirs)


def api_error(obs: Any) -> tuple[str, int, int]:
    """(error class, status, JetStream API error code) of an observed failure."""
    err = obs["error"]
    return err["name"], err.get("status"), err.get("code")


def test_streams(observed: Any) -> None:
    ours, theirs = observed("streams")
    for o in (ours, theirs):
        acks = o["pub_acks"]
        assert [a["seq"] for a in acks] == [1, 1, 2, 3, 4, 5]
        assert [a["duplicate"] for a in acks] == [False, True, False, False, False, False]
        assert api_error(o["add_different"]) == ("JetStreamApiError", 400, 10058)
        assert api_error(o["pub_wrong_last_seq"]) == ("JetStreamApiError", 400, 10071)
        assert o["pub_wrong_last_seq"]["error"]["message"] == "wrong last sequence: 5"
        assert o["pub_right_last_seq"]["seq"] == 6
        assert api_error(o["pub_wrong_last_subject_seq"])[2] == 10071
        assert o["pub_no_stream"]["error"]["cause"]["cause"]["name"] == "NoRespondersError"
        assert o["info_state"]["msgs"] == 6 and o["info_state"]["last_seq"] == 6
        assert o["info_subjects"] == {"iop.st.a": 2, "iop.st.b": 2, "iop.st.c": 2}
        assert o["update_config"]["subjects"] == ["iop.st.>", "iop.st2.*"]
        assert o["update_config"]["max_msgs"] == 100 and o["update_config"]["allow_direct"]
        assert api_error(o["update_storage_change"])[2] == 10052
        assert o["pub_after_update"]["seq"] == 7
        assert o["stream_names"] == ["IOP_STREAMS"] and o["find_stream"] == "IOP_STREAMS"
        assert o["stream_names_by_subject"] == ["IOP_STREAMS"]
        assert o["get_3"]["data"] == "three" and o["get_3"]["header"]["X-Test"] == ["v3"]
        assert o["get_1"]["header"] == {"Nats-Msg-Id": ["id-1"]}
        assert o["get_last_b"]["seq"] == 4 and o["get_next_c"]["seq"] == 5
        assert o["get_missing"] == {"not_found": True} == o["get_last_none"]
        direct = o["direct_get_3"]
        assert direct["data"] == "three" and direct["header"]["Nats-Sequence"] == ["3"]
        assert direct["header"]["Nats-Stream"] == ["IOP_STREAMS"]
        assert o["direct_get_last_b"]["seq"] == 4 and o["direct_get_next_c"]["seq"] == 5
        assert o["direct_get_missing"] == {"not_found": True} == o["direct_get_last_none"]
        assert o["delete_2"] is True and o["delete_3_no_erase"] is True
        assert api_error(o["delete_2_again"])[2] == 10043
        assert o["get_deleted_2"] == {"not_found": True}
        assert o["after_delete_state"]["num_deleted"] == 2
        assert o["purge_b"]["purged"] == 1 and o["after_purge_state"]["msgs"] == 4
        assert o["purge_keep_1"]["purged"] == 3 and o["after_keep_purge_state"]["msgs"] == 1
        assert api_error(o["info_missing"]) == ("StreamNotFoundError", 404, 10059)
        assert o["add_dotted_name"]["error"]["name"] == "InvalidNameError"
        assert api_error(o["add_overlapping_subjects"]) == ("JetStreamApiError", 400, 10065)
        assert api_error(o["get_missing_stream"])[2] == 10059
        assert o["delete_stream"] is True
        assert api_error(o["delete_stream_again"]) == ("StreamNotFoundError", 404, 10059)
    assert_same("streams", ours, theirs)


def test_consumers(observed: Any) -> None:
    ours, theirs = observed("consumers")
    for o in (ours, theirs):
        assert o["pull_is_pull"] and o["push_is_push"]
        assert [m["data"] for m in o["fetch_1"]] == ["p-1", "p-2", "p-3"]
        assert [m["pending"] for m in o["fetch_1"]] == [9, 8, 7]
        assert o["info_after_acks"]["ack_floor_stream"] == 3
        assert (o["ack_ack"], o["ack_ack_twice"]) == (True, False)
        (again,) = o["fetch_redelivered"]
        assert (again["data"], again["delivered"], again["stream_seq"]) == ("p-4", 2, 4)
        assert again["redelivered"] is True
        assert o["info_after_term"]["num_ack_pending"] == 0
        assert o["next_one"]["data"] == "p-6"
        assert [m["data"] for m in o["fetch_rest"]] == ["p-7", "p-8", "p-9", "p-10"]
        assert o["info_unacked"]["num_ack_pending"] == 4
        assert o["info_unacked"]["num_pending"] == 0
        assert o["next_empty"] is None
        assert o["consumer_names"] == ["pull1"]
        assert o["consume"] == {"received": 25, "in_order": True, "last": "c-25"}
        assert o["consume_info"]["ack_floor_consumer"] == 25
        assert [m["data"] for m in o["push_msgs"]] == [f"u-{i}" for i in range(1, 21)]
        assert o["push_bound_while_consuming"] is True
        assert o["push_info"]["num_ack_pending"] == 0
        assert o["ordered"] == {
            "received": 1000,
            "in_order": True,
            "first": "o-1",
            "last": "o-1000",
        }
        assert o["ordered_fetch"] == [["o-998", 1], ["o-999", 2], ["o-1000", 3]]
        assert [m["delivered"] for m in o["max_deliver_nexts"]] == [1, 2]
        assert o["max_deliver_exhausted"] is None
        assert api_error(o["info_missing_consumer"]) == ("ConsumerNotFoundError", 404, 10014)
        assert api_error(o["get_missing_consumer"])[2] == 10014
        assert api_error(o["info_consumer_missing_stream"])[2] == 10059
        assert o["update_consumer"] == ["updated", 3]
        assert o["delete_consumer"] is True
        assert api_error(o["delete_consumer_again"])[2] == 10014
    assert_same("consumers", ours, theirs)


def test_kv(observed: Any) -> None:
    ours, theirs = observed("kv")
    for o in (ours, theirs):
        assert o["keys_empty"] == []
        assert o["status_empty"]["history"] == 5 and o["status_empty"]["ttl"] == 3_600_000
        assert o["stream_config"]["max_msgs_per_subject"] == 5
        assert o["stream_config"]["max_age"] == 3600 * 10**9
        assert (o["put_a"], o["put_b"], o["create_c"]) == (1, 2, 3)
        assert o["get_a"]["value"] == "1" and o["get_missing"] is None
        assert api_error(o["create_a_exists"])[2] == 10071
        assert api_error(o["update_a_wrong_rev"])[2] == 10071
        assert o["update_a_right_rev"] == 4
        assert o["get_a_rev_1_gone"] is None and o["get_a_rev_8"]["value"] == "a-3"
        assert [e["value"] for e in o["history_a"]] == [f"a-{i}" for i in range(5)]
        assert o["get_b_deleted"]["op"] == "DEL" and o["create_b_after_delete"] == 11
        assert [e["op"] for e in o["history_c"]] == ["PURGE"]
        assert o["keys"] == ["a", "b"] and o["keys_filtered"] == ["a"]
        assert o["status"]["values"] == 9
        assert [e["key"] for e in o["watch_initial"]] == ["a", "b", "c"]
        assert o["watch_initial_extra"] == "timeout"
        assert [(e["key"], e["op"], e["is_update"]) for e in o["watch_updates"]] == [
            ("d", "PUT", True),
            ("d", "DEL", True),
            ("a", "PUT", True),
        ]
        assert o["watch_history"][-1] == ["a", 15, "PUT", True]
        assert o["watch_key_a_first"]["value"] == "a-last"
        assert o["watch_updates_only_before"] == "timeout"
        assert o["watch_updates_only_after"]["key"] == "e"
        assert o["kvm_list"] == ["iop_kv"] and o["destroy"] is True
        assert api_error(o["open_missing"])[2] == 10059
        assert api_error(o["open_deleted"])[2] == 10059
    assert_same("kv", ours, theirs)


def test_objects(observed: Any) -> None:
    ours, theirs = observed("objects")
    for o in (ours, theirs):
        digest = bytes.fromhex(o["local_sha256"])
        want = "SHA-256=" + base64.urlsafe_b64encode(digest).decode()
        big = o["info_big"]
        assert (big["size"], big["chunks"], big["digest"]) == (5 * 1024 * 1024, 40, want)
        assert o["get_big"] == {"read": 5 * 1024 * 1024, "sha256": o["local_sha256"], "error": None}
        assert o["get_small"] == "hello object"
        assert o["info_missing"] is None and o["get_missing"] is None
        assert [i["name"] for i in o["list"]] == ["big", "small"]
        assert o["info_old_name"] is None and o["info_new_name"]["description"] == "renamed"
        assert o["get_renamed"] == o["local_sha256"]
        assert o["add_link"]["link"] == {"bucket": "iop_obj", "name": "big2"}
        assert o["get_via_link"] == {"size": 5 * 1024 * 1024, "sha256": o["local_sha256"]}
        assert "error" in o["rename_onto_existing"]
        assert o["info_deleted"]["deleted"] and o["get_deleted"] is None
        assert [i["name"] for i in o["list_after_delete"]] == ["big2", "lnk"]
        assert {i["name"] for i in o["watch"]} >= {"big", "small", "big2", "lnk"}
        assert o["status"]["backing"] == "JetStream" and not o["status"]["sealed"]
        assert (o["seal"], o["sealed"]) == (True, True)
        assert api_error(o["put_after_seal"])[2] == 10109
        assert o["destroy"] is True and "error" in o["open_deleted"]
    assert_same("objects", ours, theirs)


def test_extras(observed: Any) -> None:
    ours, theirs = observed("extras")
    for o in (ours, theirs):
        assert api_error(o["pub_expect_stream_wrong"])[2] == 10060
        assert api_error(o["pub_expect_last_msg_id_wrong"])[2] == 10070
        assert o["pub_expect_subject_seq_wildcard"]["seq"] == 7
        assert [m[1] for m in o["direct_batch"]] == [2, 3, 4]
        assert [m[1] for m in o["direct_batch_subject"]] == [1, 3, 6]
        assert o["direct_batch_past_end"]["error"]["code"] == 404
        assert o["direct_last_for"] == [["iop.ex.a", 6, "a3"], ["iop.ex.b", 5, "b2"]]
        assert [m[1] for m in o["direct_last_for_up_to"]] == [3, 2, 4]
        assert (o["purge_seq"]["purged"], o["purge_filter_keep"]["purged"]) == (2, 1)
        assert o["info_deleted_details"]["deleted"] == [5]
        assert [m[1] for m in o["multi_filter"]["msgs"]] == [6, 7]
        (hdrs,) = o["headers_only"]
        assert hdrs["data_length"] == 0 and hdrs["headers"]["Nats-Msg-Size"] == ["2"]
        assert o["fetch_max_bytes"]["seqs"] == [4, 6]
        assert o["fetch_max_bytes"]["error"]["code"] == 409
        assert o["fetch_max_bytes_rest"] == {"seqs": [7], "error": None}
        assert (o["pause"], o["resume"]) == (True, False)
        assert o["paused_info"] == {"paused": True, "has_pause_until": True}
        # nats-server keeps the past time nats.js resumes with (the Unix epoch) in the config.
        assert o["resumed_info"] == {"paused": False, "has_pause_until": True}
        assert api_error(o["ttl_not_allowed"])[2] == 10166
        assert o["ttl_get"]["header"] == {"Nats-TTL": ["1s"]}
        assert o["ttl_after"]["msgs"] == 0
        assert o["kv_marker_status"] == 1000
        assert o["kv_ttl_get"]["value"] == "v"
        assert o["kv_ttl_get_after"] is None and o["kv_ttl_k_after"] is None
    assert_same("extras", ours, theirs)


def test_more(observed: Any) -> None:
    """Mirrors and sources, stream config features, more consumer options, KV watch options
    and key filters, object store links, and direct get variants."""
    ours, theirs = observed("more")
    for o in (ours, theirs):
        # Mirror with a filter and a start sequence; a stream sourcing two with transforms.
        assert o["mirror_add"]["mirror"] == {
            "name": "IOP_ORIGIN",
            "filter_subject": "iop.mo.odd",
            "opt_start_seq": 3,
        }
        assert [m[1:3] for m in o["mirror_msgs"]] == [[3, "o-3"], [5, "o-5"], [7, "o-7"]]
        assert o["mirror_msgs"][0][3] == {"X-Origin": ["yes"]}
        assert o["mirror_state"]["msgs"] == 3
        assert o["sourced_info"] == ["IOP_ORIGIN", "IOP_SRC2"]
        assert api_error(o["mirror_publish"])[2] == 10060
        assert api_error(o["mirror_update"])[2] == 10055
        assert api_error(o["mirror_update_subjects"])[2] == 10034
        assert api_error(o["mirror_with_subjects"])[2] == 10034
        assert o["sourced_state"]["msgs"] == 7
        assert o["sourced_order_even"] == ["o-2", "o-4", "o-6", "o-8"]
        assert o["sourced_order_two"] == ["s-1", "s-2", "s-3"]
        source = "IOP_SRC2 2 iop.s2.* agg.two.{{wildcard(1)}} iop.s2.k2 <hash>"
        assert ["agg.two.k2", "s-2", {"Nats-Stream-Source": [source]}] in o["sourced_msgs"]
        assert [m[2] for m in o["source_added_msgs"]] == ["s-1", "s-2", "s-3", "o-5", "o-7"]
        # A mirror keeps what its origin deletes or purges, and its own deletes and purges.
        assert o["edge_mirror_data"] == ["v1", "v2", "v3", "v4", "v5", "v6", "late"]
        assert o["edge_origin_subjects"] == {"iop.eo.1": 2, "iop.eo.2": 1, "iop.eo.9": 1}
        assert o["edge_mirror_delete"] is True and o["edge_mirror_purge"] == 6
        after = o["edge_mirror_state_after"]
        assert (after["msgs"], after["first_seq"], after["last_seq"]) == (1, 8, 8)
        assert o["edge_source_time"]["msgs"] == 5
        assert api_error(o["edge_mirror_and_sources"])[2] == 10031
        assert o["edge_mirror_self"]["error"]["message"] == "detected cycle"
        assert [m[0] for m in o["edge_transform_update"][1]] == ["iop.et.t.a", "iop.et.u.b"]
        assert api_error(o["edge_transform_invalid"])[2] == 10156
        assert api_error(o["edge_republish_cycle"])[2] == 10052
        # Subject transform and republish.
        moved = ["iop.xf.moved.a", "iop.xf.moved.b", "iop.xf.moved.a"]
        assert [m[0] for m in o["transform_msgs"]] == moved
        subject, data, hdrs = o["republished"][2]
        assert (subject, data) == ("iop.rp.a", "x3")
        assert hdrs["Nats-Stream"] == ["IOP_XFORM"] and hdrs["Nats-Sequence"] == ["3"]
        assert hdrs["Nats-Last-Sequence"] == ["1"]
        assert o["republished_headers_only"][0][1] == 0
        assert o["republished_headers_only"][0][2]["Nats-Msg-Size"] == ["5"]
        # Rollups, deny delete/purge, discard new, first_seq, sealing, max_age.
        assert [m[2] for m in o["rollup_sub_msgs"]] == ["b1", "b2", "a3"]
        assert o["rollup_all_state"]["msgs"] == 1 and o["rollup_all_state"]["first_seq"] == 6
        assert api_error(o["rollup_bad"])[2] == 10111
        assert o["rollup_not_allowed"]["error"]["message"] == "rollup not permitted"
        assert [a.get("seq") for a in o["discard_new"][:3]] == [100, 101, 102]
        assert api_error(o["discard_new"][3])[2] == 10077
        assert api_error(o["deny_delete"])[2] == 10057
        assert api_error(o["deny_purge"])[2] == 10110
        assert o["seal"] is True
        for key in ("sealed_publish", "sealed_delete", "sealed_purge"):
            assert api_error(o[key])[2] == 10109
        assert api_error(o["sealed_unseal"])[2] == 10052
        assert o["dnps"][0]["seq"] == 1 and api_error(o["dnps"][1])[2] == 10077
        assert o["age_before"]["msgs"] == 1 and o["age_after"]["msgs"] == 0
        # Consumers: backoff, inactive threshold, filters, start time, replay, metadata, lists.
        backoff = [[1, 1, "a1"], [4, 1, "a2"], [1, 2, "a1"], [1, 3, "a1"], None]
        assert o["backoff_deliveries"] == backoff
        assert o["backoff_gaps_ok"] is True
        assert api_error(o["backoff_bad"])[2] == 10116
        assert api_error(o["ephemeral_gone"]) == ("ConsumerNotFoundError", 404, 10014)
        assert [m[1] for m in o["filters"]["msgs"]] == [1, 3, 4, 6]
        assert o["filters"]["metadata"] == {"team": "iop", "purpose": "filters"}
        assert api_error(o["overlapping_filters"])[2] == 10138
        assert [m[2] for m in o["start_time"]["msgs"]] == ["a2", "b2", "c2"]
        assert api_error(o["start_time_missing"])[2] == 10094
        assert o["replay_original"]["msgs"] == [1, 2, 3, 4, 5, 6]
        assert o["metadata_update"] == {"team": "iop2"}
        assert o["filters_update"][0] == ["iop.mc.b", "iop.mc.c"]
        assert o["consumer_list_count"] == 265 and o["consumer_list_many"] == 0
        assert o["consumer_names_page"]["count"] == 15
        assert o["consumer_list_page_0"]["count"] == 256 and o["consumer_list_page_256"] == 9
        # KV and object store.
        assert o["kv_keys_filters"] == ["a.1", "c.1"] and o["kv_keys_one"] == ["b.1"]
        assert "DEL" not in {e[2] for e in o["kv_watch_ignore_deletes"]}
        assert o["kv_watch_ignore_deletes"][-1] == ["d.1", 7, "PUT", "new"]
        assert [e[1] for e in o["kv_watch_resume"]] == [3, 4, 5, 6, 7]
        assert [e[1] for e in o["kv_watch_resume_keys"]] == [2, 5, 7]
        assert o["kv_watch_resume_future"] == []
        assert [e[3] for e in o["kv_watch_headers_only"]] == ["", "", ""]
        assert o["link_store"]["link"] == {"bucket": "iop_obj_src"}
        assert o["link_object"]["data"] == "linked"
        assert o["get_missing"] is None and o["get_blob_missing"] is None
        assert o["get_link_to_store"]["error"]["message"] == "link is a bucket"
        # Direct get by start time, with max_bytes, and multi_last with limits.
        assert [m[1] for m in o["direct_batch_start_time"]] == [4, 5, 6]
        assert o["direct_get_start_time"]["seq"] == 4
        assert o["direct_last_for_batch"] == 2
        assert o["direct_last_for_up_to_time"] == [["iop.md.a", 3, "a2"], ["iop.md.b", 2, "b1"]]
        assert o["direct_last_for_none"] == []
    assert_same("more", ours, theirs)


# ---------------------------------------------------------------------------------------
# Clusters: tests/interop/js/cluster.mjs against three Headwater servers and three
# nats-server servers, each connection given one server's URL only.


@pytest.fixture
def cluster_observed(
    run_natsjs_cluster: ClusterRun, cluster_pair: tuple[Cluster, Cluster]
) -> Iterator[Any]:
    with both_clusters(run_natsjs_cluster, cluster_pair) as run:
        yield run


def test_cluster_core(cluster_observed: Any) -> None:
    ours, theirs = cluster_observed("cluster-core")
    for o in (ours, theirs):
        assert o["connected_to"] == ["s1", "s2", "s3"]
        assert o["discovered"] == [["s2", "s3"], ["s1", "s3"], ["s1", "s2"]]
        assert o["connect_urls_s1"] == ["s1", "s2", "s3"]
        assert o["servers_s1"] == ["s1", "s2", "s3"]
        assert o["core_received"] == [f"m-{i}" for i in range(1, 11)]
        assert o["core_extra"] == []
        assert o["queue"] == {"received": 20, "distinct": 20}
        assert o["replies"] == [f"re:r-{i}@s3" for i in range(1, 6)]
        assert o["request_nobody"]["error"]["cause"]["name"] == "NoRespondersError"
    assert_same("cluster-core", ours, theirs)


def test_cluster_jetstream(cluster_observed: Any) -> None:
    ours, theirs = cluster_observed("cluster-jetstream")
    for o in (ours, theirs):
        check_cluster_jetstream(o, None)
        assert o["fetch_s3_empty"] == 0
        assert api_error(o["kv_update_s2_stale"]) == ("JetStreamApiError", 400, 10071)
        history = o["kv_history_s1"]
        assert isinstance(history, list), f"KV history through s1 failed: {history}"
        assert [(e["key"], e["value"]) for e in history] == [("k", "v1"), ("k", "v2")]
        assert api_error(o["kv_info_deleted_s1"]) == ("StreamNotFoundError", 404, 10059)
        assert api_error(o["info_deleted_s1"]) == ("StreamNotFoundError", 404, 10059)
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
