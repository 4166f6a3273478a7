"""``headwater obj``: object store buckets (natscli's ``nats obj``), on both servers.

Objects are chunked by nats-py's object store client (128 KiB chunks), so a file larger
than one chunk checks that chunks come back in order and whole.
"""

from __future__ import annotations

import hashlib
import os

import pytest

pytestmark = pytest.mark.differential

#: Three chunks and a bit: more than nats-py's 128 KiB chunk size, not a multiple of it.
BIG = 3 * 128 * 1024 + 4321


@pytest.fixture
def big_file(tmp_path):
    path = tmp_path / "big.bin"
    path.write_bytes(os.urandom(BIG))
    return path


def test_add_info_and_ls_buckets(cli):
    info = cli.json(
        "obj",
        "add",
        "OBJADD",
        "--description",
        "files",
        "--ttl",
        "1h",
        "--max-bucket-size",
        "10MiB",
        "--storage",
        "memory",
    )
    config = info["config"]
    assert config["name"] == "OBJ_OBJADD"
    assert sorted(config["subjects"]) == ["$O.OBJADD.C.>", "$O.OBJADD.M.>"]
    assert config["max_age"] == 3600 * 10**9
    assert config["max_bytes"] == 10 * 1024 * 1024
    assert config["storage"] == "memory"
    assert config["description"] == "files"
    assert config["allow_rollup_hdrs"] is True

    text = cli.ok("obj", "info", "OBJADD").stdout
    assert "OBJ_OBJADD" in text and "1h" in text and "10.0 MiB" in text
    assert cli.json("obj", "info", "OBJADD")["config"]["name"] == "OBJ_OBJADD"

    assert "OBJADD" in cli.json("obj", "ls", "--names")
    names = [entry["config"]["name"] for entry in cli.json("obj", "ls")]
    assert "OBJ_OBJADD" in names
    assert "OBJADD" in cli.ok("obj", "ls").stdout
    cli.ok("obj", "rm", "OBJADD", "--force")


def test_put_get_round_trip_of_a_multi_chunk_file(cli, big_file, tmp_path):
    cli.ok("obj", "add", "OBJRT")
    put = cli.json("obj", "put", "OBJRT", str(big_file), "--name", "data/big.bin")
    assert put["name"] == "data/big.bin"
    assert put["size"] == BIG
    assert put["chunks"] == 4
    digest = hashlib.sha256(big_file.read_bytes()).digest()
    assert put["digest"].startswith("SHA-256=")

    out = tmp_path / "copy.bin"
    got = cli.json("obj", "get", "OBJRT", "data/big.bin", "-O", str(out))
    assert got["size"] == BIG
    assert out.read_bytes() == big_file.read_bytes()
    assert hashlib.sha256(out.read_bytes()).digest() == digest
    # An existing target is not overwritten without --force (no terminal to ask on).
    refused = cli.fails("obj", "get", "OBJRT", "data/big.bin", "-O", str(out))
    assert "--force" in refused.stderr
    cli.ok("obj", "get", "OBJRT", "data/big.bin", "-O", str(out), "--force")
    assert out.read_bytes() == big_file.read_bytes()

    info = cli.json("obj", "info", "OBJRT", "data/big.bin")
    assert (info["name"], info["size"], info["chunks"]) == ("data/big.bin", BIG, 4)
    text = cli.ok("obj", "info", "OBJRT", "data/big.bin").stdout
    assert "Object information for OBJRT > data/big.bin" in text
    assert digest.hex() in text

    # Replacing an object asks first, as natscli does.
    assert (
        "--force"
        in cli.fails("obj", "put", "OBJRT", str(big_file), "--name", "data/big.bin").stderr
    )
    cli.ok("obj", "rm", "OBJRT", "--force")


def test_put_from_stdin_needs_a_name(cli):
    cli.ok("obj", "add", "OBJIN")
    refused = cli.fails("obj", "put", "OBJIN", input="hello")
    assert "--name is required when reading from stdin" in refused.stderr
    cli.ok(
        "obj",
        "put",
        "OBJIN",
        "--name",
        "greeting",
        "--description",
        "a word",
        "-H",
        "Lang:en",
        input="hello",
    )
    info = cli.json("obj", "info", "OBJIN", "greeting")
    assert (info["size"], info["description"]) == (5, "a word")
    assert info["headers"] == {"Lang": ["en"]}
    assert "Lang: en" in cli.ok("obj", "info", "OBJIN", "greeting").stdout
    assert (
        "invalid header"
        in cli.fails("obj", "put", "OBJIN", "--name", "x", "-H", "nope", input="x").stderr
    )
    cli.ok("obj", "rm", "OBJIN", "--force")


def test_ls_and_del_objects(cli, tmp_path):
    cli.ok("obj", "add", "OBJLS")
    assert cli.json("obj", "ls", "OBJLS") == []
    assert "No entries found" in cli.ok("obj", "ls", "OBJLS").stdout
    for name in ("b.txt", "a.txt"):
        path = tmp_path / name
        path.write_bytes(name.encode() * 10)
        cli.ok("obj", "put", "OBJLS", str(path), "--name", name)
    listed = cli.json("obj", "ls", "OBJLS")
    assert [(entry["name"], entry["size"]) for entry in listed] == [("a.txt", 50), ("b.txt", 50)]
    assert cli.json("obj", "ls", "OBJLS", "--names") == ["a.txt", "b.txt"]
    table = cli.ok("obj", "ls", "OBJLS").stdout
    assert "a.txt" in table and "b.txt" in table

    # Deleting an object asks first; --force skips the question.
    assert "--force" in cli.fails("obj", "del", "OBJLS", "a.txt").stderr
    cli.ok("obj", "del", "OBJLS", "a.txt", "--force")
    assert cli.json("obj", "ls", "OBJLS", "--names") == ["b.txt"]
    gone = cli.fails("obj", "info", "OBJLS", "a.txt")
    assert "object a.txt not found in bucket OBJLS" in gone.stderr
    assert (
        "not found" in cli.fails("obj", "get", "OBJLS", "a.txt", "-O", str(tmp_path / "x")).stderr
    )
    assert "not found" in cli.fails("obj", "del", "OBJLS", "a.txt", "--force").stderr

    # del BUCKET without a name deletes the bucket, also only with --force.
    assert "--force" in cli.fails("obj", "del", "OBJLS").stderr
    cli.ok("obj", "del", "OBJLS", "--force")
    assert "OBJLS" not in cli.json("obj", "ls", "--names")


def test_seal_then_put_is_refused(cli, tmp_path):
    cli.ok("obj", "add", "OBJSEAL")
    path = tmp_path / "one.txt"
    path.write_bytes(b"one")
    cli.ok("obj", "put", "OBJSEAL", str(path), "--name", "one")
    assert "--force" in cli.fails("obj", "seal", "OBJSEAL").stderr
    sealed = cli.json("obj", "seal", "OBJSEAL", "--force")
    assert sealed["config"]["sealed"] is True
    assert "Sealed: true" in " ".join(cli.ok("obj", "info", "OBJSEAL").stdout.split())

    refused = cli.fails("obj", "put", "OBJSEAL", str(path), "--name", "two")
    assert "invalid operation on sealed stream" in refused.stderr
    assert "err_code 10109" in refused.stderr
    # What was stored before the seal is still there.
    assert cli.json("obj", "ls", "OBJSEAL", "--names") == ["one"]
    cli.ok("obj", "rm", "OBJSEAL", "--force")


def test_rm_needs_force(cli):
    cli.ok("obj", "add", "OBJRM")
    refused = cli.fails("obj", "rm", "OBJRM")
    assert "Refusing without --force" in refused.stderr
    assert "OBJRM" in cli.json("obj", "ls", "--names")
    cli.ok("obj", "rm", "OBJRM", "--force")
    assert "OBJRM" not in cli.json("obj", "ls", "--names")


def test_missing_bucket_and_bad_names(cli):
    assert "bucket NOPE not found" in cli.fails("obj", "info", "NOPE").stderr
    assert "bucket NOPE not found" in cli.fails("obj", "ls", "NOPE").stderr
    assert "invalid bucket name" in cli.fails("obj", "add", "A.B").stderr


def test_put_and_get_show_progress_on_a_terminal(cli, big_file, tmp_path, monkeypatch):
    """The progress bars are fed from nats-py's reader/writer threads; the bytes stay whole."""
    from headwater.cli import output

    monkeypatch.setattr(output, "stderr_is_tty", lambda: True)
    cli.ok("obj", "add", "OBJPROG")
    put = cli.ok("obj", "put", "OBJPROG", str(big_file), "--name", "big")
    assert "Putting big" in put.stderr
    out = tmp_path / "back.bin"
    got = cli.ok("obj", "get", "OBJPROG", "big", "-O", str(out))
    assert "Getting big" in got.stderr
    assert out.read_bytes() == big_file.read_bytes()
    cli.ok("obj", "rm", "OBJPROG", "--force")
