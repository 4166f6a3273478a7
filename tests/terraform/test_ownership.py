"""Ownership (issue 16 items 1-2): the provider writes its ``owner`` into
``headwater.io/managed-by``, refuses assets another owner manages (another Terraform
configuration, the CLI, the operator) with an error naming that owner, and ``terraform import``
is the explicit adoption: the next apply writes this provider's marker.

Each scenario runs against Headwater and nats-server (``clean`` is both).
"""

from __future__ import annotations

import json
from typing import Any

from headwater.control import units
from headwater.testing import ServerProcess
from tests.terraform.conftest import (
    Terraform,
    base_env,
    consumer_info,
    server_api,
    stream_info,
)

MANAGED_BY = "headwater.io/managed-by"

STREAM = """
resource "headwater_stream" "orders" {{
  name     = "ORDERS"
  subjects = ["ORDERS.*"]
  max_age  = "{max_age}"
}}
"""


def provider(server: ServerProcess, owner: str | None = None) -> str:
    line = f'  owner   = "{owner}"\n' if owner is not None else ""
    return f'provider "headwater" {{\n  servers = "{server.url}"\n{line}}}\n'


def marker(info: dict[str, Any] | None) -> str | None:
    assert info is not None
    return (info["config"].get("metadata") or {}).get(MANAGED_BY)


def other_directory(tf: Terraform, name: str) -> Terraform:
    """A second working directory attached to the same provider process."""
    workdir = tf.workdir / name
    workdir.mkdir()
    env = base_env(workdir)
    env["TF_REATTACH_PROVIDERS"] = tf.env["TF_REATTACH_PROVIDERS"]
    return Terraform(workdir, env)


def set_marker(server: ServerProcess, stream: str, owner: str) -> None:
    """Another way in (the CLI, the operator) writes its marker on a stream."""
    info = stream_info(server, stream)
    assert info is not None
    config = dict(info["config"])
    config["metadata"] = dict(config.get("metadata") or {}, **{MANAGED_BY: owner})
    server_api(server, f"STREAM.UPDATE.{stream}", config)


def test_default_owner_is_terraform(tf: Terraform, clean: ServerProcess) -> None:
    consumer = """
resource "headwater_consumer" "new" {
  stream_name  = headwater_stream.orders.name
  durable_name = "NEW"
}
"""
    tf.write(STREAM.format(max_age="1h") + consumer, provider(clean))
    tf.apply()
    assert marker(stream_info(clean, "ORDERS")) == "terraform"
    assert marker(consumer_info(clean, "ORDERS", "NEW")) == "terraform"
    assert tf.attributes("headwater_stream.orders")["managed_by"] == "terraform"
    assert tf.plan().returncode == 0


def test_configured_owner_is_written(tf: Terraform, clean: ServerProcess) -> None:
    tf.write(
        STREAM.format(max_age="1h") + 'resource "headwater_kv_bucket" "c" {\n  bucket = "c"\n}\n',
        provider(clean, "terraform:prod"),
    )
    tf.apply()
    assert marker(stream_info(clean, "ORDERS")) == "terraform:prod"
    assert marker(stream_info(clean, "KV_c")) == "terraform:prod"
    assert tf.plan().returncode == 0


def test_invalid_owner_is_refused(tf: Terraform, clean: ServerProcess) -> None:
    for owner, text in (
        ("", "owner must not be empty"),
        ("headwater", 'the legacy marker "headwater"'),
    ):
        tf.write(STREAM.format(max_age="1h"), provider(clean, owner))
        outcome = tf.plan()
        assert outcome.returncode == 1, outcome
        assert outcome.says("Invalid owner"), outcome
        assert outcome.says(text), outcome
    assert stream_info(clean, "ORDERS") is None


def test_two_configurations_do_not_fight(tf: Terraform, clean: ServerProcess) -> None:
    first, second = tf, other_directory(tf, "second")
    first.write(STREAM.format(max_age="1h"), provider(clean, "terraform:a"))
    first.apply()
    second.write(STREAM.format(max_age="2h"), provider(clean, "terraform:b"))
    refused = second.apply(check=False)
    assert refused.returncode == 1, refused
    assert refused.says("Stream/ORDERS already exists"), refused
    assert refused.says("managed by owner 'terraform:a'"), refused
    assert refused.says("terraform import headwater_stream.<name> ORDERS"), refused
    info = stream_info(clean, "ORDERS")
    assert info is not None and info["config"]["max_age"] == units.parse_duration("1h")
    assert marker(info) == "terraform:a"
    assert first.plan().returncode == 0

    # The second configuration adopts it explicitly; then the first one is the outsider.
    second.run("import", "-no-color", "headwater_stream.orders", "ORDERS", check=True)
    assert marker(stream_info(clean, "ORDERS")) == "terraform:a"  # import changes nothing
    second.apply()
    info = stream_info(clean, "ORDERS")
    assert info is not None and info["config"]["max_age"] == units.parse_duration("2h")
    assert marker(info) == "terraform:b"
    assert second.plan().returncode == 0
    conflict = first.plan()
    assert conflict.returncode == 1, conflict
    assert conflict.says("managed by owner 'terraform:b', not by 'terraform:a'"), conflict
    assert conflict.says("terraform import headwater_stream.<name> ORDERS"), conflict
    destroy = first.run("destroy", "-auto-approve", "-no-color", "-input=false")
    assert destroy.returncode == 1, destroy
    assert destroy.says("managed by owner 'terraform:b'"), destroy
    info = stream_info(clean, "ORDERS")
    assert info is not None and info["config"]["max_age"] == units.parse_duration("2h")


def test_other_owner_taking_over_is_an_error(tf: Terraform, clean: ServerProcess) -> None:
    tf.write(STREAM.format(max_age="1h"), provider(clean))
    tf.apply()
    set_marker(clean, "ORDERS", "cli")
    tf.write(STREAM.format(max_age="2h"), provider(clean))
    outcome = tf.apply(check=False)
    assert outcome.returncode == 1, outcome
    assert outcome.says("managed by owner 'cli', not by 'terraform'"), outcome
    info = stream_info(clean, "ORDERS")
    assert info is not None and info["config"]["max_age"] == units.parse_duration("1h")
    assert marker(info) == "cli"
    # Removed from the configuration: Terraform would delete it, and refuses.
    tf.write("", provider(clean))
    outcome = tf.apply(check=False)
    assert outcome.returncode == 1, outcome
    assert outcome.says("Deleting Stream/ORDERS refused"), outcome
    assert outcome.says("managed by owner 'cli', not by 'terraform'"), outcome
    assert stream_info(clean, "ORDERS") is not None


def test_import_adopts(tf: Terraform, clean: ServerProcess) -> None:
    owned = {MANAGED_BY: "cli", "team": "orders"}
    server_api(
        clean,
        "STREAM.CREATE.ORDERS",
        {"name": "ORDERS", "subjects": ["ORDERS.*"], "max_age": 3600 * 10**9, "metadata": owned},
    )
    server_api(
        clean,
        "CONSUMER.CREATE.ORDERS.NEW",
        {
            "stream_name": "ORDERS",
            "config": {"durable_name": "NEW", "ack_policy": "explicit", "metadata": owned},
        },
    )
    consumer = """
resource "headwater_consumer" "new" {
  stream_name  = headwater_stream.orders.name
  durable_name = "NEW"
  metadata     = { team = "orders" }
}
"""
    stream = """
resource "headwater_stream" "orders" {
  name     = "ORDERS"
  subjects = ["ORDERS.*"]
  max_age  = "1h"
  metadata = { team = "orders" }
}
"""
    tf.write(stream + consumer, provider(clean))
    tf.run("import", "-no-color", "headwater_stream.orders", "ORDERS", check=True)
    tf.run("import", "-no-color", "headwater_consumer.new", "ORDERS/NEW", check=True)
    assert marker(stream_info(clean, "ORDERS")) == "cli"
    plan = tf.plan()
    assert plan.returncode == 2, plan
    assert plan.says('~ managed_by = "cli" -> "terraform"'), plan
    assert "must be replaced" not in plan.output
    tf.apply()
    stream_now = stream_info(clean, "ORDERS")
    consumer_now = consumer_info(clean, "ORDERS", "NEW")
    assert marker(stream_now) == "terraform" and marker(consumer_now) == "terraform"
    assert stream_now is not None and stream_now["config"]["metadata"]["team"] == "orders"
    assert tf.plan().returncode == 0


def test_state_from_before_owners_takes_over_the_legacy_marker(
    tf: Terraform, clean: ServerProcess
) -> None:
    """Earlier provider versions wrote the legacy ``headwater`` marker and recorded no
    ``managed_by``: the resource is this configuration's, so the next apply writes its owner."""
    tf.write(STREAM.format(max_age="1h"), provider(clean))
    tf.apply()
    set_marker(clean, "ORDERS", "headwater")
    path = tf.workdir / "terraform.tfstate"
    state = json.loads(path.read_text())
    instance = state["resources"][0]["instances"][0]
    instance["schema_version"] = 1
    del instance["attributes"]["managed_by"]
    path.write_text(json.dumps(state))
    plan = tf.plan()
    assert plan.returncode == 2, plan
    assert plan.says('~ managed_by = "headwater" -> "terraform"'), plan
    tf.apply()
    assert marker(stream_info(clean, "ORDERS")) == "terraform"
    assert tf.plan().returncode == 0


def test_legacy_marker_is_not_taken_by_a_new_configuration(
    tf: Terraform, clean: ServerProcess
) -> None:
    """A stream in this state whose marker becomes the legacy value (an old operator wrote
    it) is refused like any other owner's."""
    tf.write(STREAM.format(max_age="1h"), provider(clean))
    tf.apply()
    set_marker(clean, "ORDERS", "headwater")
    outcome = tf.plan()
    assert outcome.returncode == 1, outcome
    assert outcome.says("managed by owner 'headwater'"), outcome


def test_import_block_adopts_at_apply_not_at_plan(tf: Terraform, clean: ServerProcess) -> None:
    """With an ``import {}`` block the import happens during plan, which must not write."""
    server_api(
        clean,
        "STREAM.CREATE.ORDERS",
        {"name": "ORDERS", "subjects": ["ORDERS.*"], "metadata": {MANAGED_BY: "cli"}},
    )
    block = 'import {\n  to = headwater_stream.orders\n  id = "ORDERS"\n}\n'
    tf.write(block + STREAM.format(max_age="1h"), provider(clean))
    plan = tf.plan()
    assert plan.returncode == 2, plan
    assert plan.says('~ managed_by = "cli" -> "terraform"'), plan
    assert marker(stream_info(clean, "ORDERS")) == "cli"
    tf.apply()
    info = stream_info(clean, "ORDERS")
    assert marker(info) == "terraform"
    assert info is not None and info["config"]["max_age"] == units.parse_duration("1h")
    assert tf.plan().returncode == 0


def test_destroy_right_after_import_deletes(tf: Terraform, clean: ServerProcess) -> None:
    """Importing adopted it: destroying it before any apply deletes it."""
    server_api(
        clean,
        "STREAM.CREATE.ORDERS",
        {"name": "ORDERS", "subjects": ["ORDERS.*"], "metadata": {MANAGED_BY: "cli"}},
    )
    tf.write(STREAM.format(max_age="0s"), provider(clean))
    tf.run("import", "-no-color", "headwater_stream.orders", "ORDERS", check=True)
    tf.destroy()
    assert stream_info(clean, "ORDERS") is None
