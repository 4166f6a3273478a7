"""Bad input: invalid values and combinations fail at plan time on the attribute, server errors
come back with the server's text and leave the state alone, old state upgrades."""

from __future__ import annotations

import json

from headwater.testing import ServerProcess
from tests.terraform.conftest import Terraform, provider_block, server_api, stream_info


def test_invalid_values_fail_at_plan_time(tf: Terraform, clean: ServerProcess) -> None:
    tf.write(
        """
resource "headwater_stream" "bad" {
  name      = "BAD"
  max_age   = "1 year"
  max_bytes = "ten gigs"
  retention = "forever"
}
""",
        provider_block(clean),
    )
    outcome = tf.run("validate", "-no-color")
    assert outcome.returncode == 1, outcome
    assert "Error: Invalid max_age" in outcome.output
    assert 'max_age   = "1 year"' in outcome.output  # the source line of the attribute
    assert "invalid duration '1 year'" in outcome.output
    assert "Error: Invalid max_bytes" in outcome.output
    assert "Error: Invalid retention" in outcome.output
    assert tf.plan().returncode == 1
    assert stream_info(clean, "BAD") is None


def test_invalid_combination_points_at_an_attribute(tf: Terraform, clean: ServerProcess) -> None:
    tf.write(
        """
resource "headwater_stream" "orders" {
  name = "ORDERS"
}
resource "headwater_consumer" "both" {
  stream_name     = headwater_stream.orders.name
  durable_name    = "BOTH"
  filter_subject  = "ORDERS.a"
  filter_subjects = ["ORDERS.b"]
}
resource "headwater_consumer" "pull" {
  stream_name    = headwater_stream.orders.name
  durable_name   = "PULL"
  idle_heartbeat = "5s"
}
""",
        provider_block(clean),
    )
    outcome = tf.plan()
    assert outcome.returncode == 1, outcome
    assert "filter_subject and filter_subjects are mutually exclusive" in outcome.output
    assert 'filter_subject  = "ORDERS.a"' in outcome.output
    assert "idle_heartbeat is for push consumers" in outcome.output
    assert 'idle_heartbeat = "5s"' in outcome.output
    assert stream_info(clean, "ORDERS") is None


def test_server_error_keeps_the_state(tf: Terraform, clean: ServerProcess) -> None:
    server_api(clean, "STREAM.CREATE.OTHER", {"name": "OTHER", "subjects": ["ORDERS.*"]})
    tf.write(
        'resource "headwater_stream" "orders" {\n  name = "ORDERS"\n  subjects = ["ORDERS.*"]\n}\n',
        provider_block(clean),
    )
    outcome = tf.apply(check=False)
    assert outcome.returncode == 1, outcome
    assert "subjects overlap with an existing stream" in outcome.output
    assert tf.state().get("resources") == []
    # An update the server refuses leaves the previous state in place.
    tf.write(
        'resource "headwater_stream" "orders" {\n  name = "ORDERS"\n}\n', provider_block(clean)
    )
    tf.apply()
    before = tf.attributes("headwater_stream.orders")
    tf.write(
        'resource "headwater_stream" "orders" {\n  name = "ORDERS"\n  subjects = ["ORDERS.x"]\n}\n',
        provider_block(clean),
    )
    outcome = tf.apply(check=False)
    assert outcome.returncode == 1, outcome
    assert "overlap" in outcome.output
    assert tf.attributes("headwater_stream.orders") == before


def test_existing_resource_is_not_adopted_silently(tf: Terraform, clean: ServerProcess) -> None:
    server_api(clean, "STREAM.CREATE.ORDERS", {"name": "ORDERS", "subjects": ["ORDERS.*"]})
    tf.write(
        'resource "headwater_stream" "orders" {\n  name = "ORDERS"\n}\n', provider_block(clean)
    )
    outcome = tf.apply(check=False)
    assert outcome.returncode == 1, outcome
    assert "Stream/ORDERS already exists" in outcome.output
    assert outcome.says("terraform import headwater_stream.<name> ORDERS")
    assert outcome.says("managed by nobody"), outcome


def test_unreachable_server_is_a_diagnostic(tf: Terraform, clean: ServerProcess) -> None:
    tf.write(
        'resource "headwater_stream" "orders" {\n  name = "ORDERS"\n}\n',
        'provider "headwater" {\n  servers = "nats://127.0.0.1:1"\n}\n',
    )
    outcome = tf.plan()
    assert outcome.returncode == 1, outcome
    assert "can not connect" in outcome.output
    assert "nats://127.0.0.1:1" in outcome.output


def test_older_state_is_upgraded(tf: Terraform, clean: ServerProcess) -> None:
    """State from schema version 0, before some attributes existed, plans clean."""
    tf.write(
        'resource "headwater_stream" "orders" {\n  name = "ORDERS"\n  max_age = "1h"\n}\n',
        provider_block(clean),
    )
    tf.apply()
    path = tf.workdir / "terraform.tfstate"
    state = json.loads(path.read_text())
    resource = state["resources"][0]
    resource["instances"][0]["schema_version"] = 0
    for name in ("persist_mode", "allow_batched", "created", "consumer_limits"):
        del resource["instances"][0]["attributes"][name]
    resource["instances"][0]["attributes"]["retired_attribute"] = "x"
    path.write_text(json.dumps(state))
    outcome = tf.plan()
    assert outcome.returncode == 0, outcome
    tf.apply("-refresh-only")
    attributes = tf.attributes("headwater_stream.orders")
    assert attributes["persist_mode"] == "default"
    assert attributes["allow_batched"] is False
    assert attributes["created"]
    assert "retired_attribute" not in attributes


def test_validate_checks_known_values_next_to_references(
    tf: Terraform, clean: ServerProcess
) -> None:
    """``stream_name`` refers to the stream, so it is unknown during validate; the
    consumer's own values are checked anyway, and valid references pass."""
    body = """
resource "headwater_stream" "orders" {{
  name = "ORDERS"
}}
resource "headwater_consumer" "new" {{
  stream_name    = headwater_stream.orders.name
  durable_name   = "NEW"
  ack_wait       = "{ack_wait}"
  deliver_policy = "by_start_sequence"
  opt_start_seq  = headwater_stream.orders.first_seq + 1
}}
"""
    tf.write(body.format(ack_wait="5 sec"), provider_block(clean))
    outcome = tf.run("validate", "-no-color")
    assert outcome.returncode == 1, outcome
    assert "Error: Invalid ack_wait" in outcome.output
    assert outcome.output.count("Error:") == 1
    tf.write(body.format(ack_wait="5s"), provider_block(clean))
    outcome = tf.run("validate", "-no-color")
    assert outcome.returncode == 0, outcome
