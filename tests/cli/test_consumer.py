"""``headwater consumer``: the seeds' NEW, DISPATCH and MONITOR consumers, reading, editing."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import nats
import pytest

NEW = ("--filter", "ORDERS.received", "--ack", "explicit", "--pull", "--deliver", "all",
       "--max-deliver=-1", "--sample", "100")  # fmt: skip
DISPATCH = ("--filter", "ORDERS.processed", "--ack", "explicit", "--pull", "--deliver", "all",
            "--max-deliver=-1", "--sample", "100")  # fmt: skip
MONITOR = ("--filter", "", "--ack", "none", "--target", "monitor.ORDERS", "--deliver", "last",
           "--replay", "instant")  # fmt: skip


@pytest.fixture(scope="module")
def orders(cli) -> str:
    cli.ok("stream", "add", "ORDERS", "--subjects", "ORDERS.*", "--max-age=1y")
    return "ORDERS"


def test_the_seed_consumers_are_created_with_the_seed_flags(cli, orders):
    new = cli.json("consumer", "add", orders, "NEW", *NEW)
    assert new["name"] == "NEW" and new["stream_name"] == "ORDERS"
    config = new["config"]
    assert config["durable_name"] == "NEW"
    assert config["filter_subject"] == "ORDERS.received"
    assert (config["ack_policy"], config["deliver_policy"]) == ("explicit", "all")
    assert config["max_deliver"] == -1
    assert config["sample_freq"] == "100%"
    assert "deliver_subject" not in config

    cli.ok("consumer", "add", orders, "DISPATCH", *DISPATCH)
    monitor = cli.json("consumer", "add", orders, "MONITOR", *MONITOR)["config"]
    assert monitor["deliver_subject"] == "monitor.ORDERS"
    assert (monitor["ack_policy"], monitor["deliver_policy"]) == ("none", "last")
    assert monitor["replay_policy"] == "instant"
    assert "filter_subject" not in monitor

    assert cli.json("consumer", "ls", orders, "--names") == ["DISPATCH", "MONITOR", "NEW"]
    table = cli.ok("consumer", "ls", orders).stdout
    assert "DISPATCH" in table and "push" in table and "ORDERS.processed" in table
    listed = cli.json("consumer", "ls", orders)
    assert [info["name"] for info in listed] == ["DISPATCH", "MONITOR", "NEW"]


def test_info_as_panel_and_json(cli, orders):
    cli.ok("consumer", "add", orders, "INFO1", "--filter", "ORDERS.info", "--wait", "45s")
    text = cli.ok("consumer", "info", orders, "INFO1").stdout
    assert "ORDERS > INFO1" in text and "ORDERS.info" in text and "45s" in text
    info = cli.json("consumer", "info", orders, "INFO1")
    assert info["config"]["ack_wait"] == 45 * 10**9
    assert info["config"]["ack_policy"] == "explicit"  # the CLI's default, as nats CLI's


def test_add_refuses_to_overwrite_a_different_consumer(cli, orders):
    cli.ok("consumer", "add", orders, "ONCE", "--filter", "ORDERS.once")
    result = cli.fails("consumer", "add", orders, "ONCE", "--filter", "ORDERS.other")
    assert "consumer already exists" in result.stderr and "10148" in result.stderr


def test_add_from_a_config_file(cli, orders, tmp_path: Path):
    path = tmp_path / "monitor.json"
    path.write_text(
        json.dumps(
            {
                "durable_name": "FROMFILE",
                "deliver_subject": "fromfile.ORDERS",
                "ack_policy": "none",
                "deliver_policy": "last",
            }
        )
    )
    info = cli.json("consumer", "add", orders, "--config", str(path))
    assert info["name"] == "FROMFILE"
    assert info["config"]["deliver_subject"] == "fromfile.ORDERS"
    assert info["config"]["ack_policy"] == "none"


def test_next_fetches_and_acknowledges(cli, orders):
    cli.ok("consumer", "add", orders, "WORK", "--filter", "ORDERS.work", "--pull")
    cli.ok("pub", "ORDERS.work", "order {{Count}}", "--count", "3")
    first = cli.ok("consumer", "next", orders, "WORK").stdout
    assert "order 1" in first and "ORDERS.work" in first
    batch = cli.json_lines("consumer", "next", orders, "WORK", "--count", "2")
    assert [msg["data"] for msg in batch] == ["order 2", "order 3"]
    assert [msg["stream_seq"] for msg in batch] == [
        batch[0]["stream_seq"],
        batch[0]["stream_seq"] + 1,
    ]
    info = cli.json("consumer", "info", orders, "WORK")
    assert info["num_ack_pending"] == 0 and info["num_pending"] == 0
    assert info["ack_floor"]["consumer_seq"] == 3
    empty = cli.fails("consumer", "next", orders, "WORK", "--wait", "300ms")
    assert "received 0 of 1" in empty.stderr


def test_next_with_no_ack_leaves_the_message_pending(cli, orders):
    cli.ok("consumer", "add", orders, "NOACK", "--filter", "ORDERS.noack", "--wait", "30s")
    cli.ok("pub", "ORDERS.noack", "keep me")
    got = cli.json_lines("consumer", "next", orders, "NOACK", "--no-ack")
    assert got[0]["data"] == "keep me"
    assert cli.json("consumer", "info", orders, "NOACK")["num_ack_pending"] == 1


def test_next_refuses_a_push_consumer(cli, orders):
    cli.ok("consumer", "add", orders, "PUSHY", "--target", "pushy.ORDERS", "--ack", "none")
    assert "push-based" in cli.fails("consumer", "next", orders, "PUSHY").stderr


def _publish_until(url: str, subject: str, done: threading.Event) -> None:
    """Publish until ``done``: a push consumer only delivers once the CLI has subscribed."""

    async def main() -> None:
        nc = await nats.connect(url)
        try:
            number = 0
            while not done.is_set():
                number += 1
                await nc.request(subject, f"live {number}".encode(), timeout=5)
                await asyncio.sleep(0.05)
        finally:
            await nc.close()

    asyncio.run(main())


def test_sub_reads_a_push_consumer(cli, orders, js_server):
    cli.ok("consumer", "add", orders, "LIVE", "--target", "live.ORDERS", "--ack", "explicit",
           "--deliver", "new", "--filter", "ORDERS.live")  # fmt: skip
    done = threading.Event()
    publisher = threading.Thread(target=_publish_until, args=(js_server.url, "ORDERS.live", done))
    publisher.start()
    try:
        got = cli.json_lines("consumer", "sub", orders, "LIVE", "--count", "3", "--wait", "10s")
    finally:
        done.set()
        publisher.join()
    assert len(got) == 3
    assert all(msg["subject"] == "ORDERS.live" for msg in got)
    assert [msg["consumer_seq"] for msg in got] == [1, 2, 3]
    deadline = time.monotonic() + 5
    while cli.json("consumer", "info", orders, "LIVE")["ack_floor"]["consumer_seq"] < 3:
        assert time.monotonic() < deadline, "the CLI's acks never reached the server"
        time.sleep(0.05)


def test_sub_reads_a_pull_consumer_too(cli, orders):
    cli.ok("consumer", "add", orders, "PULLSUB", "--filter", "ORDERS.pullsub")
    cli.ok("pub", "ORDERS.pullsub", "p{{Count}}", "--count", "2")
    got = cli.json_lines("consumer", "sub", orders, "PULLSUB", "--count", "2", "--wait", "5s")
    assert [msg["data"] for msg in got] == ["p1", "p2"]


def test_edit_changes_updatable_fields_and_refuses_others(cli, orders):
    cli.ok("consumer", "add", orders, "EDIT1", "--filter", "ORDERS.edit", "--max-deliver", "5")
    info = cli.json("consumer", "edit", orders, "EDIT1", "--max-deliver", "20",
                    "--description", "edited")  # fmt: skip
    assert info["config"]["max_deliver"] == 20
    assert info["config"]["description"] == "edited"
    assert info["config"]["filter_subject"] == "ORDERS.edit"
    both = cli.json("consumer", "edit", orders, "EDIT1", "--filter", "ORDERS.a,ORDERS.b")
    assert both["config"]["filter_subjects"] == ["ORDERS.a", "ORDERS.b"]
    assert "filter_subject" not in both["config"]
    refused = cli.fails("consumer", "edit", orders, "EDIT1", "--deliver", "last")
    assert "deliver policy can not be updated" in refused.stderr.lower()
    assert "10012" in refused.stderr
    missing = cli.fails("consumer", "edit", orders, "GHOST", "--max-deliver", "2")
    assert "consumer not found" in missing.stderr and "10014" in missing.stderr


def test_rm_needs_force_and_deletes(cli, orders):
    cli.ok("consumer", "add", orders, "GONE", "--filter", "ORDERS.gone")
    assert "--force" in cli.fails("consumer", "rm", orders, "GONE").stderr
    assert cli.json("consumer", "rm", orders, "GONE", "--force") == {"success": True}
    result = cli.fails("consumer", "info", orders, "GONE")
    assert "consumer ORDERS > GONE: consumer not found (code 404, err_code 10014)" in (
        result.stderr
    )


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (("--ack", "sometimes"), "'sometimes' is not one of"),
        (("--deliver", "yesterday"), "invalid value for --deliver"),
        (("--wait", "soon"), "invalid value for --wait"),
        (("--pull", "--target", "x.y"), "--pull and --target cannot be combined"),
        (("--sample", "101"), "invalid value for --sample"),
    ],
)
def test_invalid_consumer_flags_exit_1(cli, orders, args, text):
    assert text in cli.fails("consumer", "add", orders, "BADC", *args).output


def test_consumer_on_a_missing_stream(cli, orders):
    result = cli.fails("consumer", "add", "NOSTREAM", "C1", "--pull")
    assert "stream NOSTREAM: stream not found" in result.stderr
    assert "Consumer name is required" in cli.fails("consumer", "add", orders).stderr


def test_deliver_by_sequence_and_by_age(cli, orders):
    by_seq = cli.json("consumer", "add", orders, "SEQ", "--deliver", "2")["config"]
    assert (by_seq["deliver_policy"], by_seq["opt_start_seq"]) == ("by_start_sequence", 2)
    by_age = cli.json("consumer", "add", orders, "AGE", "--deliver", "1h")["config"]
    assert by_age["deliver_policy"] == "by_start_time"
    assert by_age["opt_start_time"].startswith(("20", "19"))
