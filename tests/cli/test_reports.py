"""``stream report`` and ``consumer report``: natscli's report tables, with ``--json``, on both
servers. The tables keep every name and header whole at 80 columns (the CLI's FitTable)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.differential

STREAM_HEADERS = ("Storage", "Consumers", "Messages", "Bytes", "Lost", "Deleted", "Replicas")
CONSUMER_HEADERS = (
    "Mode", "Ack Policy", "Ack Wait", "Ack Pending", "Redelivered", "Unprocessed", "Ack Floor",
    "Last Delivered", "Waiting",
)  # fmt: skip


@pytest.fixture(scope="module")
def setup(cli):
    """REPORTA: 4 messages (one deleted), a pull consumer with one unacked delivery and a push
    consumer; REPORTB: memory, empty."""
    cli.ok("stream", "add", "REPORTA", "--subjects", "reporta.*")
    cli.ok("stream", "add", "REPORTB_MEMORY_STREAM", "--subjects", "reportb", "--storage", "memory")
    cli.ok("pub", "reporta.x", "m{{Count}}", "--count", "4", "-J")
    cli.ok("stream", "rmm", "REPORTA", "4", "--force")
    cli.ok("consumer", "add", "REPORTA", "PULL_WORKER_WITH_A_LONG_NAME", "--pull", "--ack",
           "explicit", "--deliver", "all")  # fmt: skip
    cli.ok("consumer", "add", "REPORTA", "PUSHER", "--target", "nobody.listens", "--ack", "none")
    cli.ok("consumer", "next", "REPORTA", "PULL_WORKER_WITH_A_LONG_NAME", "--no-ack")
    yield
    for name in ("REPORTA", "REPORTB_MEMORY_STREAM"):
        cli.ok("stream", "rm", name, "--force")


def test_stream_report_json(cli, setup):
    rows = {row["stream"]: row for row in cli.json("stream", "report")}
    a, b = rows["REPORTA"], rows["REPORTB_MEMORY_STREAM"]
    assert (a["storage"], a["consumers"], a["messages"], a["deleted"]) == ("file", 2, 3, 1)
    assert a["bytes"] > 0 and (a["lost_messages"], a["lost_bytes"]) == (0, 0)
    assert a["replicas"] == 1
    assert (b["storage"], b["consumers"], b["messages"], b["bytes"]) == ("memory", 0, 0, 0)


def test_stream_report_table_keeps_names_and_headers_whole(cli, setup):
    text = cli.ok("stream", "report").stdout
    assert "Stream Report" in text
    assert "REPORTB_MEMORY_STREAM" in text and "REPORTA" in text
    for header in STREAM_HEADERS:
        assert header in text, header


def test_stream_report_sorts_by_name(cli, setup):
    names = [row["stream"] for row in cli.json("stream", "report", "--name")]
    assert names == sorted(names)


def test_consumer_report_json(cli, setup):
    report = cli.json("consumer", "report", "REPORTA")
    assert report["stream"] == "REPORTA"
    rows = {row["consumer"]: row for row in report["consumers"]}
    pull, push = rows["PULL_WORKER_WITH_A_LONG_NAME"], rows["PUSHER"]
    assert (pull["mode"], pull["ack_policy"], pull["ack_pending"]) == ("pull", "explicit", 1)
    assert (pull["redelivered"], pull["unprocessed"], pull["ack_floor"]) == (0, 2, 0)
    assert (pull["last_delivered"], pull["waiting"]) == (1, 0)
    assert pull["ack_wait"] == 30 * 10**9
    # nobody listens on the push consumer's subject: all three are still to deliver
    assert (push["mode"], push["ack_policy"], push["unprocessed"]) == ("push", "none", 3)


def test_consumer_report_table_keeps_names_and_headers_whole(cli, setup):
    text = cli.ok("consumer", "report", "REPORTA").stdout
    assert "Consumer report for REPORTA with 2 consumers" in text
    assert "PULL_WORKER_WITH_A_LONG_NAME" in text and "PUSHER" in text
    assert "2 / 66%" in text  # unprocessed: count and share of the stream, as natscli
    for header in CONSUMER_HEADERS:
        assert header in text, header


def test_consumer_report_of_a_missing_stream_is_the_server_error(cli):
    result = cli.fails("consumer", "report", "NOPE_REPORT")
    assert "stream not found (code 404, err_code 10059)" in result.stderr
