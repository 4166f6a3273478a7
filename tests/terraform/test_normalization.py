"""No perpetual diffs: every kind of attribute (units, lists, maps, nested objects) plans clean
right after apply on both servers, and changes to nested objects plan as in-place updates."""

from __future__ import annotations

from headwater.control import units
from headwater.testing import ServerProcess
from tests.terraform.conftest import Terraform, consumer_info, provider_block, stream_info

RICH = """
resource "headwater_stream" "origin" {{
  name     = "ORIGIN"
  subjects = ["origin.>"]
}}

resource "headwater_stream" "rich" {{
  name                 = "RICH"
  description          = "every kind of attribute"
  subjects             = ["rich.*", "more.>"]
  retention            = "limits"
  max_msgs             = "1M"
  max_bytes            = "1GiB"
  max_age              = "72h"
  max_msgs_per_subject = 10
  max_msg_size         = "1MiB"
  duplicate_window     = "{window}"
  allow_rollup_hdrs    = true
  deny_delete          = true
  compression          = "s2"
  metadata             = {{ team = "orders", tier = "{tier}" }}
  consumer_limits      = {{ max_ack_pending = 500 }}
  subject_transform    = {{ src = "rich.*", dest = "rich.t.{{{{wildcard(1)}}}}" }}
  republish            = {{ src = "rich.>", dest = "copy.rich.>" }}
  sources = [
    {{ name = headwater_stream.origin.name, filter_subject = "origin.a" }},
  ]
}}

resource "headwater_consumer" "push" {{
  stream_name     = headwater_stream.rich.name
  durable_name    = "PUSH"
  deliver_subject = "deliver.push"
  deliver_group   = "workers"
  ack_policy      = "explicit"
  backoff         = ["1s", "5s", "{backoff}"]
  max_deliver     = 5
  filter_subjects = ["rich.a", "rich.b"]
  idle_heartbeat  = "10s"
  flow_control    = true
  metadata        = {{ owner = "ops" }}
}}

resource "headwater_consumer" "pull" {{
  stream_name        = headwater_stream.rich.name
  durable_name       = "PULL"
  max_batch          = 100
  max_expires        = "30s"
  inactive_threshold = "1h"
  max_waiting        = 64
}}
"""


def rich(window: str = "1m", tier: str = "gold", backoff: str = "30s") -> str:
    return RICH.format(window=window, tier=tier, backoff=backoff)


def test_rich_configs_plan_clean_and_update_in_place(tf: Terraform, clean: ServerProcess) -> None:
    tf.write(rich(), provider_block(clean))
    tf.apply()
    outcome = tf.plan()
    assert outcome.returncode == 0, outcome
    info = stream_info(clean, "RICH")
    assert info is not None
    config = info["config"]
    assert config["max_msgs"] == 1_000_000
    assert config["max_bytes"] == 1024**3
    assert config["duplicate_window"] == units.parse_duration("1m")
    assert config["consumer_limits"]["max_ack_pending"] == 500
    assert config["metadata"]["tier"] == "gold"
    assert config["sources"][0]["filter_subject"] == "origin.a"
    push = consumer_info(clean, "RICH", "PUSH")
    assert push is not None
    assert push["config"]["backoff"][2] == units.parse_duration("30s")
    # The pull consumer inherits max_ack_pending from the stream's consumer_limits.
    pull = consumer_info(clean, "RICH", "PULL")
    assert pull is not None and pull["config"]["max_ack_pending"] == 500
    assert tf.attributes("headwater_consumer.pull")["max_ack_pending"] == 500

    tf.write(rich(window="2m", tier="silver", backoff="1m"), provider_block(clean))
    outcome = tf.plan()
    assert outcome.returncode == 2, outcome
    assert "forces replacement" not in outcome.output
    assert "2 to change" in outcome.output
    tf.apply()
    assert tf.plan().returncode == 0
    info = stream_info(clean, "RICH")
    assert info is not None
    assert info["config"]["metadata"]["tier"] == "silver"
    assert info["config"]["duplicate_window"] == units.parse_duration("2m")
