"""``headwater stream``: the seeds' ORDERS walk-through and error paths, on both servers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

YEAR_NS = 365 * 24 * 3600 * 10**9
SEED_FLAGS = (
    "--subjects", "ORDERS.*", "--ack", "--max-msgs=-1", "--max-bytes=-1", "--max-age=1y",
    "--storage", "file", "--retention", "limits", "--max-msg-size=-1", "--discard=old",
)  # fmt: skip


def test_add_with_the_seed_flags_creates_the_orders_stream(cli):
    info = cli.json("stream", "add", "ORDERS", *SEED_FLAGS)
    config = info["config"]
    assert config["name"] == "ORDERS"
    assert config["subjects"] == ["ORDERS.*"]
    assert config["max_age"] == YEAR_NS
    assert (config["storage"], config["retention"], config["discard"]) == ("file", "limits", "old")
    assert (config["max_msgs"], config["max_bytes"], config["max_msg_size"]) == (-1, -1, -1)
    assert config.get("no_ack", False) is False
    assert info["state"]["messages"] == 0


def test_info_shows_config_and_state_as_a_panel_and_as_json(cli):
    cli.ok("stream", "add", "INFO1", "--subjects", "info1.>", "--max-msgs", "1K")
    text = cli.ok("stream", "info", "INFO1").stdout
    assert "INFO1" in text and "info1.>" in text and "1,000" in text
    # --json before the command counts as well as after it.
    before = json.loads(cli.ok("--json", "stream", "info", "INFO1").stdout)
    after = cli.json("stream", "info", "INFO1")
    assert before["config"] == after["config"]
    assert after["config"]["max_msgs"] == 1000
    assert "type" not in after


def test_ls_lists_streams_as_table_names_and_json(cli):
    cli.ok("stream", "add", "LS1", "--subjects", "ls1.*")
    cli.ok("stream", "add", "LS2", "--subjects", "ls2.*", "--storage", "memory")
    table = cli.ok("stream", "ls").stdout
    assert "LS1" in table and "LS2" in table and "ls2.*" in table
    listed = cli.json("stream", "ls")
    by_name = {info["config"]["name"]: info for info in listed}
    assert by_name["LS2"]["config"]["storage"] == "memory"
    names = cli.json("stream", "ls", "--names", "--subject", "ls1.x")
    assert names == ["LS1"]
    plain = cli.ok("stream", "ls", "-n").stdout.split()
    assert {"LS1", "LS2"} <= set(plain)


def test_edit_changes_only_the_given_fields_and_reports_them(cli):
    cli.ok("stream", "add", "ED1", "--subjects", "ed1.new", "--max-age", "1h")
    result = cli.ok("stream", "edit", "ED1", "--subjects", "ed1.*", "--max-msgs", "10")
    assert "subjects" in result.stderr and "max_msgs" in result.stderr
    config = cli.json("stream", "info", "ED1")["config"]
    assert config["subjects"] == ["ed1.*"]
    assert config["max_msgs"] == 10
    assert config["max_age"] == 3600 * 10**9  # untouched
    again = cli.ok("stream", "edit", "ED1", "--max-msgs", "10")
    assert "nothing changed" in again.stderr


def test_edit_reports_changes_in_human_units(cli):
    cli.ok("stream", "add", "ED3", "--subjects", "ed3.a", "--max-age", "5h")
    result = cli.ok(
        "stream", "edit", "ED3", "--subjects", "ed3.a,ed3.b", "--max-age", "1y",
        "--max-bytes", "10GiB", "--max-msgs", "1M", "--description", "orders",
        "--dupe-window", "30s", "--deny-delete",
    )  # fmt: skip
    lines = [line.strip() for line in result.stderr.splitlines()]
    for expected in (
        "max_age: 5h -> 1y",
        "max_bytes: unlimited -> 10GiB",
        "max_msgs: unlimited -> 1M",
        "duplicate_window: 2m -> 30s",
        "subjects: ed3.a -> ed3.a, ed3.b",
        "description: - -> orders",
        "deny_delete: false -> true",
    ):
        assert expected in lines, result.stderr
    assert "None" not in result.stderr and "000000000" not in result.stderr
    back = cli.ok("stream", "edit", "ED3", "--max-age", "-1", "--max-bytes", "-1")
    lines = [line.strip() for line in back.stderr.splitlines()]
    assert "max_age: 1y -> unlimited" in lines and "max_bytes: 10GiB -> unlimited" in lines


def test_edit_refuses_a_storage_change_with_the_servers_error(cli):
    cli.ok("stream", "add", "ED2", "--subjects", "ed2")
    result = cli.fails("stream", "edit", "ED2", "--storage", "memory")
    assert "stream configuration update can not change storage type" in result.stderr.lower()
    assert "10052" in result.stderr


def test_add_and_edit_from_a_config_file(cli, tmp_path: Path):
    exported = cli.json("stream", "add", "CF1", "--subjects", "cf1.*", "--max-age", "2h")
    path = tmp_path / "cf2.json"
    config = {**exported["config"], "name": "CF2", "subjects": ["cf2.*"]}
    path.write_text(json.dumps(config))
    created = cli.json("stream", "add", "--config", str(path))
    assert created["config"]["name"] == "CF2"
    assert created["config"]["max_age"] == 2 * 3600 * 10**9
    # A whole saved info (with its "config" key) works too, and flags override the file.
    saved = tmp_path / "info.json"
    saved.write_text(json.dumps(created))
    edited = cli.json("stream", "edit", "CF2", "--config", str(saved), "--max-msgs", "5")
    assert edited["config"]["max_msgs"] == 5
    assert edited["config"]["subjects"] == ["cf2.*"]
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"description": "from a file"}))
    edited = cli.json("stream", "edit", "CF2", "--config", str(partial))
    assert edited["config"]["description"] == "from a file"
    assert edited["config"]["max_msgs"] == 5


def test_bad_config_files_are_errors(cli, tmp_path: Path):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert "not valid JSON" in cli.fails("stream", "add", "X", "--config", str(broken)).stderr
    missing = tmp_path / "missing.json"
    assert "cannot read" in cli.fails("stream", "add", "X", "--config", str(missing)).stderr


def test_cp_copies_the_configuration_with_overrides(cli):
    cli.ok("stream", "add", "CPSRC", "--subjects", "cpsrc.*", "--max-age", "1y", "--max-msgs", "7")
    copy = cli.json("stream", "cp", "CPSRC", "CPDST", "--subjects", "cpdst.*", "--max-age", "2y")
    assert copy["config"]["name"] == "CPDST"
    assert copy["config"]["subjects"] == ["cpdst.*"]
    assert copy["config"]["max_age"] == 2 * YEAR_NS
    assert copy["config"]["max_msgs"] == 7
    overlap = cli.fails("stream", "cp", "CPSRC", "CPDST2")
    assert "subjects overlap" in overlap.stderr and "10065" in overlap.stderr


def test_purge_rmm_and_get(cli):
    cli.ok("stream", "add", "PG1", "--subjects", "pg1.*")
    cli.ok("pub", "pg1.a", "a{{Count}}", "--count", "3")
    cli.ok("pub", "pg1.b", "b{{Count}}", "--count", "2")
    assert cli.json("stream", "info", "PG1")["state"]["messages"] == 5

    message = cli.json("stream", "get", "PG1", "2")
    assert message["subject"] == "pg1.a" and message["seq"] == 2
    text = cli.ok("stream", "get", "PG1", "2").stdout
    assert "a2" in text and "pg1.a" in text
    last = cli.json("stream", "get", "PG1", "--last-for", "pg1.a")
    assert last["seq"] == 3

    assert cli.json("stream", "rmm", "PG1", "1", "--force") == {"success": True}
    gone = cli.fails("stream", "get", "PG1", "1")
    assert "no message found" in gone.stderr and "10037" in gone.stderr
    assert cli.json("stream", "info", "PG1")["state"]["messages"] == 4

    reply = cli.json("stream", "purge", "PG1", "--force", "--subject", "pg1.b")
    assert reply == {"success": True, "purged": 2}
    result = cli.ok("stream", "purge", "PG1", "--force")
    assert "Purged 2 messages" in result.stderr
    assert cli.json("stream", "info", "PG1")["state"]["messages"] == 0


def test_destructive_commands_need_force_without_a_terminal(cli):
    cli.ok("stream", "add", "RM1", "--subjects", "rm1")
    assert "--force" in cli.fails("stream", "rm", "RM1").stderr
    assert "--force" in cli.fails("stream", "purge", "RM1").stderr
    cli.ok("stream", "info", "RM1")
    assert cli.json("stream", "rm", "RM1", "--force") == {"success": True}
    assert "stream not found" in cli.fails("stream", "info", "RM1").stderr


@pytest.mark.parametrize(
    "args",
    [
        ("stream", "info", "NOPE"),
        ("stream", "rm", "NOPE", "--force"),
        ("stream", "purge", "NOPE", "--force"),
        ("stream", "rmm", "NOPE", "1", "--force"),
        ("stream", "get", "NOPE", "1"),
        ("stream", "edit", "NOPE", "--max-msgs", "1"),
        ("stream", "cp", "NOPE", "NOPE2"),
        ("consumer", "ls", "NOPE"),
    ],
)
def test_a_missing_stream_is_a_clear_error(cli, args):
    result = cli.fails(*args)
    assert "stream NOPE: stream not found (code 404, err_code 10059)" in result.stderr


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (("--storage", "disk"), "'disk' is not one of"),
        (("--retention", "forever"), "'forever' is not one of"),
        (("--max-age", "1q"), "invalid value for --max-age"),
        (("--max-bytes", "ten"), "invalid value for --max-bytes"),
        (("--max-msgs", "-5"), "invalid value for --max-msgs"),
        (("--dupe-window", "-1"), "invalid value for --dupe-window"),
    ],
)
def test_invalid_flag_values_exit_1(cli, args, text):
    result = cli.fails("stream", "add", "BAD", "--subjects", "bad", *args)
    assert text in result.output
    assert "BAD" not in cli.ok("stream", "ls", "-n").stdout.split()


def test_server_side_validation_errors_carry_the_servers_text(cli):
    cli.ok("stream", "add", "DUP", "--subjects", "dup")
    result = cli.fails("stream", "add", "DUP", "--subjects", "dup", "--max-msgs", "3")
    assert "stream name already in use with a different configuration" in result.stderr
    assert "10058" in result.stderr
    long_description = cli.fails("stream", "add", "LONG", "--description", "x" * 5000)
    assert "err_code 10052" in long_description.stderr


def test_names_that_cannot_be_a_subject_token_are_refused_before_sending(cli):
    assert "invalid stream name 'A.B'" in cli.fails("stream", "add", "A.B").stderr
    assert "invalid stream name 'A*'" in cli.fails("stream", "info", "A*").stderr


def test_missing_name_without_a_terminal_is_an_error(cli):
    assert "Stream name is required" in cli.fails("stream", "add").stderr
    assert "Stream is required" in cli.fails("stream", "info").stderr


def test_retention_work_means_workqueue(cli):
    info = cli.json("stream", "add", "WQ1", "--subjects", "wq1", "--retention", "work")
    assert info["config"]["retention"] == "workqueue"


def test_cp_with_data_copies_every_message_then_detaches(cli):
    cli.ok("stream", "add", "DSRC", "--subjects", "dsrc.*")
    cli.ok("pub", "dsrc.a", "m{{Count}}", "--count", "25")
    copy = cli.json("stream", "cp", "DSRC", "DCOPY", "--data")
    assert copy["state"]["messages"] == 25
    assert "sources" not in copy["config"]
    # Without subjects of its own a detached copy gets the server's default: its name.
    assert copy["config"]["subjects"] == ["DCOPY"]
    first = cli.json("stream", "get", "DCOPY", "1")
    assert first["subject"] == "dsrc.a"
    cli.ok("pub", "dsrc.a", "late")
    assert cli.json("stream", "info", "DCOPY")["state"]["messages"] == 25


def test_cp_with_data_and_follow_keeps_sourcing(cli):
    cli.ok("stream", "add", "FSRC", "--subjects", "fsrc.*")
    cli.ok("pub", "fsrc.a", "m{{Count}}", "--count", "3")
    text = cli.ok("stream", "cp", "FSRC", "FCOPY", "--data", "--follow", "--subjects", "fcopy.*")
    assert "with 3 messages" in text.stderr
    config = cli.json("stream", "info", "FCOPY")["config"]
    assert [source["name"] for source in config["sources"]] == ["FSRC"]
    assert config["subjects"] == ["fcopy.*"]
    assert "--follow needs --data" in cli.fails("stream", "cp", "FSRC", "X", "--follow").stderr
