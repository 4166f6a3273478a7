"""Tables and panels in an 80-column CI log keep every identifier whole, on both servers.

Without a terminal rich assumes 80 columns (``COLUMNS=80`` here): stream and consumer names,
subjects, KV buckets and keys must never come out as ``ORDERS-FROM-THE-EU…``.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner, Result

from headwater.cli.app import app

from .conftest import Cli, describe

STREAM = "ORDERS-FROM-THE-EUROPEAN-WAREHOUSES-2024"
SUBJECT = "orders.europe.warehouse.incoming.priority.express"
OTHER_SUBJECT = "orders.europe.warehouse.incoming.priority.standard"
CONSUMER = "DISPATCH-TO-THE-NORTHERN-COURIERS-PRIORITY"
BUCKET = "CUSTOMER-PREFERENCES-FOR-THE-EUROPEAN-REGION"
KEY = "customers.europe.germany.berlin.warehouse-17.priority"


def narrow(cli: Cli, *args: str, columns: int = 80) -> Result:
    """Run ``headwater`` as a CI job would: no terminal, COLUMNS=80."""
    result = CliRunner().invoke(
        app, ["-s", cli.url, *args], env={"NATS_URL": None, "COLUMNS": str(columns)}
    )
    assert result.exit_code == 0, describe(result)
    return result


def assert_whole(text: str, *identifiers: str) -> None:
    for identifier in identifiers:
        assert identifier in text, f"{identifier!r} was cut:\n{text}"
    assert "…" not in text, text


@pytest.fixture(scope="module")
def long_names(cli: Cli) -> None:
    cli.ok("stream", "add", STREAM, "--subjects", f"{SUBJECT},{OTHER_SUBJECT}")
    cli.ok("consumer", "add", STREAM, CONSUMER, "--filter", SUBJECT, "--pull", "--ack", "all")


def test_stream_ls_and_info_keep_names_and_subjects_whole(cli, long_names):
    assert_whole(narrow(cli, "stream", "ls").stdout, STREAM, SUBJECT, OTHER_SUBJECT)
    assert_whole(narrow(cli, "stream", "info", STREAM).stdout, STREAM, SUBJECT, OTHER_SUBJECT)


def test_consumer_ls_and_info_keep_names_and_filters_whole(cli, long_names):
    assert_whole(narrow(cli, "consumer", "ls", STREAM).stdout, STREAM, CONSUMER, SUBJECT)
    info = narrow(cli, "consumer", "info", STREAM, CONSUMER).stdout
    assert_whole(info, STREAM, CONSUMER, SUBJECT)


def test_kv_history_keeps_bucket_and_key_whole(cli):
    cli.ok("kv", "add", BUCKET, "--history", "5")
    cli.ok("kv", "put", BUCKET, KEY, "one")
    cli.ok("kv", "put", BUCKET, KEY, "two")
    assert_whole(narrow(cli, "kv", "history", BUCKET, KEY).stdout, BUCKET, KEY)


def test_short_names_stay_a_table_at_80_columns(cli):
    cli.ok("stream", "add", "NARROW1", "--subjects", "narrow1.*")
    text = narrow(cli, "stream", "ls", "--subject", "narrow1.x").stdout
    assert "┃ Name" in text and "NARROW1" in text and "narrow1.*" in text
    assert "╭─ Stream NARROW1 created" in narrow(cli, "stream", "info", "NARROW1").stdout
