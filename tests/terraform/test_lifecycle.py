"""The core Terraform flow against Headwater and nats-server: init-free plan/apply (reattach),
the seeds' ORDERS example, in-place change, refused then allowed replacement, import, drift,
destroy. Each scenario runs against both servers; the plan after every apply must be empty on
both, which shows the provider normalizes each server's defaults.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from nats.aio.client import Client

from headwater.control import units
from headwater.testing import ServerProcess
from tests.terraform.conftest import (
    Terraform,
    consumer_info,
    provider_block,
    run_on,
    server_api,
    stream_info,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "terraform" / "main.tf"

STREAM = """
resource "headwater_stream" "orders" {{
  name     = "ORDERS"
  subjects = ["ORDERS.*"]
  storage  = "{storage}"
  max_age  = "{max_age}"
{extra}}}
"""


def stream_tf(storage: str = "file", max_age: str = "1y", extra: str = "") -> str:
    return STREAM.format(storage=storage, max_age=max_age, extra=extra)


def publish(server: ServerProcess, subject: str, count: int) -> None:
    async def body(nc: Client) -> None:
        js = nc.jetstream()
        for index in range(count):
            await js.publish(subject, f"order {index}".encode())

    run_on(server, body)


def test_orders_example_applies_and_then_plans_clean(tf: Terraform, clean: ServerProcess) -> None:
    shutil.copy(EXAMPLE, tf.workdir / "main.tf")
    tf.apply(f"-var=servers={clean.url}")
    stream = stream_info(clean, "ORDERS")
    assert stream is not None
    config = stream["config"]
    assert config["subjects"] == ["ORDERS.*"]
    assert config["max_age"] == units.parse_duration("1y")
    assert (config["storage"], config["retention"], config["discard"]) == ("file", "limits", "old")
    new = consumer_info(clean, "ORDERS", "NEW")
    dispatch = consumer_info(clean, "ORDERS", "DISPATCH")
    monitor = consumer_info(clean, "ORDERS", "MONITOR")
    assert new is not None and dispatch is not None and monitor is not None
    assert new["config"]["filter_subject"] == "ORDERS.received"
    assert new["config"]["ack_policy"] == "explicit"
    assert new["config"]["max_deliver"] == 20
    assert dispatch["config"]["filter_subject"] == "ORDERS.processed"
    assert monitor["config"]["deliver_subject"] == "monitor.ORDERS"
    assert monitor["config"]["ack_policy"] == "none"
    assert monitor["config"]["deliver_policy"] == "last"
    outcome = tf.plan(f"-var=servers={clean.url}")
    assert outcome.returncode == 0, outcome


def test_in_place_change_keeps_messages(tf: Terraform, clean: ServerProcess) -> None:
    tf.write(stream_tf(), provider_block(clean))
    tf.apply()
    publish(clean, "ORDERS.received", 3)
    # A different spelling of the same value is no change at all.
    tf.write(stream_tf(max_age="365d"), provider_block(clean))
    assert tf.plan().returncode == 0
    tf.write(stream_tf(max_age="30d", extra='  description = "orders"\n'), provider_block(clean))
    outcome = tf.plan()
    assert outcome.returncode == 2, outcome
    assert "update in-place" in outcome.output
    assert "~ max_age" in outcome.output and '"1y" -> "30d"' in outcome.output
    assert "forces replacement" not in outcome.output
    tf.apply()
    info = stream_info(clean, "ORDERS")
    assert info is not None
    assert info["config"]["max_age"] == units.parse_duration("30d")
    assert info["config"]["description"] == "orders"
    assert info["state"]["messages"] == 3
    assert tf.plan().returncode == 0
    # Removing an attribute from the configuration resets it to the server default.
    tf.write(stream_tf(max_age="30d"), provider_block(clean))
    outcome = tf.plan()
    assert outcome.returncode == 2 and "description" in outcome.output, outcome
    tf.apply()
    info = stream_info(clean, "ORDERS")
    assert info is not None and not info["config"].get("description")
    assert tf.plan().returncode == 0


def test_replacement_is_refused_then_allowed(tf: Terraform, clean: ServerProcess) -> None:
    consumer = """
resource "headwater_consumer" "new" {
  stream_name    = headwater_stream.orders.name
  durable_name   = "NEW"
  filter_subject = "ORDERS.received"
  lifecycle {
    replace_triggered_by = [headwater_stream.orders.created]
  }
}
"""
    tf.write(stream_tf() + consumer, provider_block(clean))
    tf.apply()
    publish(clean, "ORDERS.received", 2)
    tf.write(stream_tf(storage="memory") + consumer, provider_block(clean))
    refused = tf.plan()
    assert refused.returncode == 1, refused
    assert "Changing storage replaces Stream/ORDERS" in refused.output
    assert "allow_replace = true" in refused.output
    assert 'storage  = "memory"' in refused.output  # Terraform points at the attribute
    info = stream_info(clean, "ORDERS")
    assert info is not None
    assert info["config"]["storage"] == "file" and info["state"]["messages"] == 2
    allowed = stream_tf(storage="memory", extra="  allow_replace = true\n")
    tf.write(allowed + consumer, provider_block(clean))
    outcome = tf.apply()
    assert "must be replaced" in outcome.output
    assert "forces replacement" in outcome.output
    info = stream_info(clean, "ORDERS")
    assert info is not None
    assert info["config"]["storage"] == "memory" and info["state"]["messages"] == 0
    # The consumer went with the old stream and came back with the new one.
    assert consumer_info(clean, "ORDERS", "NEW") is not None
    assert tf.plan().returncode == 0


def test_consumer_replacement_is_refused(tf: Terraform, clean: ServerProcess) -> None:
    body = """
resource "headwater_consumer" "new" {{
  stream_name    = headwater_stream.orders.name
  durable_name   = "NEW"
  deliver_policy = "{policy}"
}}
"""
    tf.write(stream_tf() + body.format(policy="all"), provider_block(clean))
    tf.apply()
    tf.write(stream_tf() + body.format(policy="new"), provider_block(clean))
    refused = tf.plan()
    assert refused.returncode == 1, refused
    assert "Changing deliver_policy replaces Consumer/ORDERS/NEW" in refused.output
    assert "deliver policy can not be updated" in refused.output


def test_import_then_plan_is_clean(tf: Terraform, clean: ServerProcess) -> None:
    server_api(
        clean,
        "STREAM.CREATE.ORDERS",
        {"name": "ORDERS", "subjects": ["ORDERS.*"], "max_age": units.parse_duration("1y")},
    )
    server_api(
        clean,
        "CONSUMER.CREATE.ORDERS.NEW",
        {
            "stream_name": "ORDERS",
            "config": {
                "durable_name": "NEW",
                "filter_subject": "ORDERS.received",
                "ack_policy": "explicit",
                "max_deliver": 20,
            },
        },
    )
    consumer = """
resource "headwater_consumer" "new" {
  stream_name    = headwater_stream.orders.name
  durable_name   = "NEW"
  filter_subject = "ORDERS.received"
  max_deliver    = 20
}
"""
    tf.write(stream_tf() + consumer, provider_block(clean))
    tf.run("import", "-no-color", "headwater_stream.orders", "ORDERS", check=True)
    tf.run("import", "-no-color", "headwater_consumer.new", "ORDERS/NEW", check=True)
    assert tf.attributes("headwater_stream.orders")["max_age"] == "1y"
    assert tf.attributes("headwater_consumer.new")["id"] == "ORDERS/NEW"
    # Nobody managed them: the first apply writes the provider's marker, nothing else.
    outcome = tf.plan()
    assert outcome.returncode == 2, outcome
    flat = " ".join(outcome.output.split())
    assert flat.count('+ managed_by = "terraform"') == 2, outcome
    assert outcome.says("Plan: 0 to add, 2 to change, 0 to destroy."), outcome
    tf.apply()
    assert tf.plan().returncode == 0
    other = 'resource "headwater_stream" "other" {\n  name = "NOPE"\n}\n'
    tf.write(stream_tf() + consumer + other, provider_block(clean))
    missing = tf.run("import", "-no-color", "headwater_stream.other", "NOPE")
    assert missing.returncode == 1 and "The server has no Stream/NOPE" in missing.output


def test_drift_is_detected(tf: Terraform, clean: ServerProcess) -> None:
    tf.write(stream_tf(), provider_block(clean))
    tf.apply()
    # Changed behind Terraform's back: the plan puts it back.
    live = stream_info(clean, "ORDERS")
    assert live is not None
    changed = dict(live["config"], max_age=units.parse_duration("1h"))
    server_api(clean, "STREAM.UPDATE.ORDERS", changed)
    outcome = tf.plan()
    assert outcome.returncode == 2, outcome
    assert '"1h" -> "1y"' in outcome.output
    # Deleted behind Terraform's back: the plan creates it.
    server_api(clean, "STREAM.DELETE.ORDERS")
    outcome = tf.plan()
    assert outcome.returncode == 2, outcome
    assert "headwater_stream.orders will be created" in outcome.output
    tf.apply()
    assert stream_info(clean, "ORDERS") is not None
    assert tf.plan().returncode == 0


def test_destroy_removes_everything(tf: Terraform, clean: ServerProcess) -> None:
    tf.write(
        stream_tf()
        + """
resource "headwater_consumer" "new" {
  stream_name  = headwater_stream.orders.name
  durable_name = "NEW"
}
resource "headwater_kv_bucket" "config" {
  bucket = "config"
}
""",
        provider_block(clean),
    )
    tf.apply()
    assert consumer_info(clean, "ORDERS", "NEW") is not None
    assert stream_info(clean, "KV_config") is not None
    tf.destroy()
    assert stream_info(clean, "ORDERS") is None
    assert stream_info(clean, "KV_config") is None
    assert tf.state().get("resources") == []


def test_parallel_apply_of_many_streams(tf: Terraform, clean: ServerProcess) -> None:
    tf.write(
        """
resource "headwater_stream" "many" {
  count    = 20
  name     = "S${count.index}"
  subjects = ["s.${count.index}.>"]
  max_age  = "1h"
}
""",
        provider_block(clean),
    )
    tf.apply("-parallelism=10")
    names = server_api(clean, "STREAM.NAMES", {})["streams"]
    assert sorted(names) == sorted(f"S{i}" for i in range(20))
    assert tf.plan().returncode == 0
    tf.destroy()
    assert not server_api(clean, "STREAM.NAMES", {}).get("streams")


def test_rename_is_a_refused_replacement(tf: Terraform, clean: ServerProcess) -> None:
    tf.write('resource "headwater_stream" "s" {\n  name = "OLD"\n}\n', provider_block(clean))
    tf.apply()
    tf.write('resource "headwater_stream" "s" {\n  name = "NEW"\n}\n', provider_block(clean))
    refused = tf.plan()
    assert refused.returncode == 1, refused
    assert refused.says("Changing name replaces Stream/OLD")
    tf.write(
        'resource "headwater_stream" "s" {\n  name = "NEW"\n  allow_replace = true\n}\n',
        provider_block(clean),
    )
    tf.apply()
    assert stream_info(clean, "OLD") is None
    assert stream_info(clean, "NEW") is not None
    assert tf.plan().returncode == 0


def test_prevent_delete_metadata_blocks_replacement(tf: Terraform, clean: ServerProcess) -> None:
    """A stream the CLI or operator marked preventDelete is never replaced from Terraform."""
    metadata = {"headwater.io/managed-by": "cli", "headwater.io/prevent-delete": "true"}
    server_api(
        clean,
        "STREAM.CREATE.ORDERS",
        {"name": "ORDERS", "subjects": ["ORDERS.*"], "metadata": metadata},
    )
    tf.write(stream_tf(max_age="0s"), provider_block(clean))
    tf.run("import", "-no-color", "headwater_stream.orders", "ORDERS", check=True)
    tf.write(
        stream_tf(storage="memory", max_age="0s", extra="  allow_replace = true\n"),
        provider_block(clean),
    )
    refused = tf.plan()
    assert refused.returncode == 1, refused
    assert refused.says("replace deletes the resource, and preventDelete is set")
    info = stream_info(clean, "ORDERS")
    assert info is not None and info["config"]["storage"] == "file"
