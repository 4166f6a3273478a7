"""KV buckets, KV entries, object buckets and the data sources, on both servers."""

from __future__ import annotations

from nats.aio.client import Client
from nats.js.api import KeyValueConfig
from nats.js.errors import KeyNotFoundError

from headwater.control import units
from headwater.testing import ServerProcess
from tests.terraform.conftest import Terraform, provider_block, run_on, server_api, stream_info

BUCKET = """
resource "headwater_kv_bucket" "config" {{
  bucket    = "config"
  history   = {history}
  ttl       = "1h"
  max_bytes = "10MiB"
}}

resource "headwater_kv_entry" "flag" {{
  bucket = headwater_kv_bucket.config.bucket
  key    = "feature.flag"
  value  = "{value}"
}}
"""


def kv_get(server: ServerProcess, bucket: str, key: str) -> str | None:
    async def body(nc: Client) -> str | None:
        kv = await nc.jetstream().key_value(bucket)
        try:
            entry = await kv.get(key)
        except KeyNotFoundError:
            return None
        return (entry.value or b"").decode()

    return run_on(server, body)


def kv_delete(server: ServerProcess, bucket: str, key: str) -> None:
    async def body(nc: Client) -> None:
        kv = await nc.jetstream().key_value(bucket)
        await kv.delete(key)

    run_on(server, body)


def test_kv_bucket_and_entry(tf: Terraform, clean: ServerProcess) -> None:
    tf.write(BUCKET.format(history=5, value="on"), provider_block(clean))
    tf.apply()
    info = stream_info(clean, "KV_config")
    assert info is not None
    config = info["config"]
    assert config["max_msgs_per_subject"] == 5
    assert config["max_age"] == units.parse_duration("1h")
    assert config["max_bytes"] == 10 * 1024 * 1024
    assert kv_get(clean, "config", "feature.flag") == "on"
    revision = tf.attributes("headwater_kv_entry.flag")["revision"]
    assert revision >= 1
    assert tf.plan().returncode == 0
    # History changes in place; a new value is a new revision.
    tf.write(BUCKET.format(history=10, value="off"), provider_block(clean))
    outcome = tf.apply()
    assert "2 changed" in outcome.output, outcome
    assert stream_info(clean, "KV_config")["config"]["max_msgs_per_subject"] == 10  # type: ignore[index]
    assert kv_get(clean, "config", "feature.flag") == "off"
    assert tf.attributes("headwater_kv_entry.flag")["revision"] > revision
    assert tf.plan().returncode == 0
    # An entry deleted behind Terraform's back is written again.
    kv_delete(clean, "config", "feature.flag")
    outcome = tf.plan()
    assert outcome.returncode == 2 and "headwater_kv_entry.flag will be created" in outcome.output
    tf.apply()
    assert kv_get(clean, "config", "feature.flag") == "off"
    # Destroying the entry deletes the key, not the bucket.
    tf.write(
        BUCKET.format(history=10, value="off").split('resource "headwater_kv_entry"')[0],
        provider_block(clean),
    )
    tf.apply()
    assert kv_get(clean, "config", "feature.flag") is None
    assert stream_info(clean, "KV_config") is not None


def test_kv_storage_change_is_refused(tf: Terraform, clean: ServerProcess) -> None:
    body = 'resource "headwater_kv_bucket" "config" {{\n  bucket = "config"\n{extra}}}\n'
    tf.write(body.format(extra=""), provider_block(clean))
    tf.apply()
    tf.write(body.format(extra='  storage = "memory"\n'), provider_block(clean))
    outcome = tf.plan()
    assert outcome.returncode == 1, outcome
    assert "Changing storage replaces KeyValue/config" in outcome.output
    # Replicas (a data-loss replace in terraform-provider-jetstream, its #164) is in place.
    tf.write(body.format(extra="  replicas = 1\n  history = 3\n"), provider_block(clean))
    outcome = tf.plan()
    assert outcome.returncode == 2 and "update in-place" in outcome.output, outcome


def test_import_buckets_and_entry(tf: Terraform, clean: ServerProcess) -> None:
    async def setup(nc: Client) -> None:
        js = nc.jetstream()
        kv = await js.create_key_value(config=KeyValueConfig(bucket="config", history=3))
        await kv.put("app/mode", b"fast")
        # nats-py drops the bucket name of a config= argument; pass it by name.
        await js.create_object_store("assets", description="blobs")

    run_on(clean, setup)
    tf.write(
        """
resource "headwater_kv_bucket" "config" {
  bucket  = "config"
  history = 3
}
resource "headwater_kv_entry" "mode" {
  bucket = "config"
  key    = "app/mode"
  value  = "fast"
}
resource "headwater_object_bucket" "assets" {
  bucket      = "assets"
  description = "blobs"
}
""",
        provider_block(clean),
    )
    tf.run("import", "-no-color", "headwater_kv_bucket.config", "config", check=True)
    tf.run("import", "-no-color", "headwater_kv_entry.mode", "config/app/mode", check=True)
    tf.run("import", "-no-color", "headwater_object_bucket.assets", "assets", check=True)
    assert tf.attributes("headwater_kv_entry.mode")["value"] == "fast"
    # Nobody managed the buckets: the first apply writes the provider's marker, nothing else.
    outcome = tf.plan()
    assert outcome.returncode == 2, outcome
    flat = " ".join(outcome.output.split())
    assert flat.count('+ managed_by = "terraform"') == 2, outcome
    assert outcome.says("Plan: 0 to add, 2 to change, 0 to destroy."), outcome
    tf.apply()
    assert tf.attributes("headwater_object_bucket.assets")["managed_by"] == "terraform"
    assert tf.attributes("headwater_kv_bucket.config")["managed_by"] == "terraform"
    assert tf.plan().returncode == 0


def test_adopting_a_nats_py_kv_bucket(tf: Terraform, clean: ServerProcess) -> None:
    """Writing the marker on a bucket nats-py made is a metadata-only update."""

    async def setup(nc: Client) -> None:
        await nc.jetstream().create_key_value(config=KeyValueConfig(bucket="config"))

    run_on(clean, setup)
    tf.write(
        'resource "headwater_kv_bucket" "config" {\n  bucket = "config"\n}\n', provider_block(clean)
    )
    tf.run("import", "-no-color", "headwater_kv_bucket.config", "config", check=True)
    tf.apply()
    assert tf.attributes("headwater_kv_bucket.config")["managed_by"] == "terraform"
    assert tf.plan().returncode == 0


def test_object_bucket_and_data_sources(tf: Terraform, clean: ServerProcess) -> None:
    tf.write(
        """
resource "headwater_object_bucket" "assets" {
  bucket      = "assets"
  description = "blobs"
  max_bytes   = "1GiB"
}
resource "headwater_stream" "orders" {
  name     = "ORDERS"
  subjects = ["ORDERS.*"]
}
resource "headwater_consumer" "new" {
  stream_name    = headwater_stream.orders.name
  durable_name   = "NEW"
  filter_subject = "ORDERS.received"
}
resource "headwater_kv_bucket" "config" {
  bucket = "config"
}
resource "headwater_kv_entry" "flag" {
  bucket = headwater_kv_bucket.config.bucket
  key    = "flag"
  value  = "on"
}
data "headwater_stream" "orders" {
  name = headwater_stream.orders.name
}
data "headwater_consumer" "new" {
  stream_name  = headwater_consumer.new.stream_name
  durable_name = headwater_consumer.new.durable_name
}
data "headwater_kv_entry" "flag" {
  bucket = headwater_kv_entry.flag.bucket
  key    = headwater_kv_entry.flag.key
}
output "subjects" { value = data.headwater_stream.orders.subjects }
output "filter" { value = data.headwater_consumer.new.filter_subject }
output "ack_wait" { value = data.headwater_consumer.new.ack_wait }
output "flag" { value = data.headwater_kv_entry.flag.value }
""",
        provider_block(clean),
    )
    tf.apply()
    info = stream_info(clean, "OBJ_assets")
    assert info is not None and info["config"]["max_bytes"] == 1024**3
    outputs = {k: v["value"] for k, v in tf.state()["outputs"].items()}
    assert outputs == {
        "subjects": ["ORDERS.*"],
        "filter": "ORDERS.received",
        "ack_wait": "30s",
        "flag": "on",
    }
    assert tf.plan().returncode == 0
    server_api(clean, "STREAM.DELETE.OBJ_assets")
    outcome = tf.plan()
    assert "headwater_object_bucket.assets will be created" in outcome.output, outcome


def test_data_source_of_a_missing_stream_fails(tf: Terraform, clean: ServerProcess) -> None:
    tf.write('data "headwater_stream" "gone" {\n  name = "GONE"\n}\n', provider_block(clean))
    outcome = tf.plan()
    assert outcome.returncode == 1 and "The server has no Stream/GONE" in outcome.output
