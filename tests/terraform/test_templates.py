"""headwater_stream_template: managed on Headwater, refused at plan time on nats-server (which
removed templates in 2.14)."""

from __future__ import annotations

from headwater.control import units
from headwater.testing import ServerProcess
from tests.terraform.conftest import Terraform, provider_block, server_api

TEMPLATE = """
resource "headwater_stream_template" "clients" {{
  name        = "CLIENTS"
  max_streams = {max_streams}
  subjects    = ["CLIENT.*"]
  max_age     = "1d"
{extra}}}
"""


def test_template_lifecycle_on_headwater(tf: Terraform, clean_headwater: ServerProcess) -> None:
    server = clean_headwater
    tf.write(TEMPLATE.format(max_streams=10, extra=""), provider_block(server))
    tf.apply()
    info = server_api(server, "STREAM.TEMPLATE.INFO.CLIENTS")
    assert info["config"]["max_streams"] == 10
    assert info["config"]["config"]["max_age"] == units.parse_duration("1d")
    assert tf.plan().returncode == 0
    # Templates can not be updated: any change is a replacement, refused by default.
    tf.write(TEMPLATE.format(max_streams=20, extra=""), provider_block(server))
    refused = tf.plan()
    assert refused.returncode == 1, refused
    assert "replaces StreamTemplate/CLIENTS" in refused.output
    assert "a stream template can not be updated" in refused.output
    tf.write(
        TEMPLATE.format(max_streams=20, extra="  allow_replace = true\n"), provider_block(server)
    )
    outcome = tf.apply()
    assert "must be replaced" in outcome.output
    assert server_api(server, "STREAM.TEMPLATE.INFO.CLIENTS")["config"]["max_streams"] == 20
    assert tf.plan().returncode == 0
    # Import by name gives the same state (allow_replace is Terraform's own: left out here).
    tf.write(TEMPLATE.format(max_streams=20, extra=""), provider_block(server))
    tf.run("state", "rm", "headwater_stream_template.clients", check=True)
    tf.run("import", "-no-color", "headwater_stream_template.clients", "CLIENTS", check=True)
    assert tf.plan().returncode == 0
    tf.destroy()
    names = server_api(server, "STREAM.TEMPLATE.NAMES", {})
    assert not (names.get("templates") or names.get("streams"))


def test_template_is_refused_where_the_server_has_none(tf: Terraform, clean: ServerProcess) -> None:
    """nats-server 2.15 has no template API: the plan fails before anything is sent, with the
    core's reason. Headwater plans the create."""
    tf.write(TEMPLATE.format(max_streams=1, extra=""), provider_block(clean))
    outcome = tf.plan()
    if clean.kind == "nats":
        assert outcome.returncode == 1, outcome
        assert outcome.says("this server has no stream templates")
    else:
        assert outcome.returncode == 2, outcome
        assert "headwater_stream_template.clients will be created" in outcome.output
