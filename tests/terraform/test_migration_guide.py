"""docs/MIGRATING-FROM-TERRAFORM-PROVIDER-JETSTREAM.md can not drift from the provider.

Every name the guide's tables give in the ``headwater`` column exists in the schema the real
``terraform`` binary reads from the provider (resource attributes, provider attributes and the
``tls`` block), and the guide's migration example, the ``import`` blocks and resources, takes
over assets made the way terraform-provider-jetstream makes them (its defaults included) and
then plans clean, on both servers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.js.api import KeyValueConfig

from headwater.control import api
from headwater.testing import ServerProcess
from support.controlplane import run_on
from tests.terraform.conftest import Terraform, provider_block, stream_info

GUIDE = Path(__file__).parents[2] / "docs" / "MIGRATING-FROM-TERRAFORM-PROVIDER-JETSTREAM.md"
SOURCE = "headwater.io/headwater/headwater"
SECTION = re.compile(r"^#{2,3} ")
MAPPED = re.compile(r"^### `jetstream_\w+` → `(headwater_\w+)`")
NAME = re.compile(r"`([a-z_]+(?:\.[a-z_]+)?)")
SECOND = 1_000_000_000


def guide_tables() -> dict[str, list[list[str]]]:
    """Table rows (cells) under each section: ``provider``, ``resources`` or a resource type."""
    tables: dict[str, list[list[str]]] = {}
    section = ""
    for line in GUIDE.read_text().splitlines():
        if SECTION.match(line):
            mapped = MAPPED.match(line)
            section = {"## The provider block": "provider", "## Resources": "resources"}.get(
                line, mapped.group(1) if mapped else ""
            )
            continue
        if section and line.startswith("|") and not line.startswith("|---"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if cells[0] != "jetstream":  # the header row
                tables.setdefault(section, []).append(cells)
    return tables


def provider_schema(tf: Terraform) -> dict[str, Any]:
    tf.write("", 'provider "headwater" {}\n')
    shown = tf.run("providers", "schema", "-json", check=True)
    return json.loads(shown.output)["provider_schemas"][SOURCE]


def test_tables_name_only_what_exists(tf: Terraform) -> None:
    schema = provider_schema(tf)
    tables = guide_tables()
    resources = schema["resource_schemas"]
    mapped = {"headwater_stream", "headwater_consumer", "headwater_kv_entry"}
    mapped |= {"headwater_kv_bucket", "headwater_object_bucket"}
    assert set(tables) == {"provider", "resources", *mapped}, set(tables)

    for cells in tables["resources"]:
        assert NAME.findall(cells[1])[0] in resources, cells

    provider = schema["provider"]["block"]
    for cells in tables["provider"]:
        for name in NAME.findall(cells[2]):
            block, _, inner = name.partition(".")
            if inner:
                assert inner in provider["block_types"][block]["block"]["attributes"], cells
            else:
                assert name in provider["attributes"], cells

    for resource, rows in tables.items():
        if resource in ("provider", "resources"):
            continue
        attributes = resources[resource]["block"]["attributes"]
        assert len(rows) >= 4, resource
        for cells in rows:
            names = NAME.findall(cells[2])
            assert names, cells
            for name in names:
                # `placement = { cluster = ... }`: the attribute is the object.
                assert name.split(".")[0] in attributes, (resource, cells)


def migration_example() -> str:
    blocks = re.findall(r"```hcl\n(.*?)```", GUIDE.read_text(), re.S)
    [example] = [block for block in blocks if "import {" in block]
    return example


async def made_by_jetstream_provider(nc: Client) -> None:
    """What terraform-provider-jetstream's ``old configuration`` of the guide created: its
    defaults written out, and no ownership marker."""
    await api.request(
        nc,
        "STREAM.CREATE.ORDERS",
        {
            "name": "ORDERS",
            "subjects": ["ORDERS.*"],
            "storage": "file",
            "retention": "limits",
            "max_age": 365 * 86400 * SECOND,
            "max_msgs": -1,
            "max_bytes": -1,
            "max_msg_size": -1,
            "max_msgs_per_subject": -1,
            "max_consumers": -1,
            "duplicate_window": 120 * SECOND,
            "num_replicas": 1,
            "discard": "old",
            "allow_direct": True,
        },
    )
    config = {
        "durable_name": "NEW",
        "deliver_policy": "all",
        "ack_policy": "explicit",
        "ack_wait": 30 * SECOND,
        "max_deliver": -1,
        "filter_subject": "ORDERS.received",
        "replay_policy": "instant",
        "sample_freq": "100%",
        "max_ack_pending": 20000,
        "max_waiting": 512,
    }
    await api.request(nc, "CONSUMER.CREATE.ORDERS.NEW", {"stream_name": "ORDERS", "config": config})
    js = api.jetstream(nc)
    kv = await js.create_key_value(KeyValueConfig(bucket="CFG", history=10, ttl=60))
    await kv.put("app.mode", b"blue")


def test_migration_example(tf: Terraform, clean: ServerProcess) -> None:
    run_on(clean, made_by_jetstream_provider)
    tf.write(migration_example(), provider_block(clean))
    planned = tf.plan()
    assert planned.returncode == 2, planned
    assert planned.says("Plan: 4 to import, 0 to add, 3 to change, 0 to destroy."), planned
    # Only the ownership marker changes: the example states the old provider's defaults.
    assert planned.output.count("+ managed_by") == 3, planned
    assert planned.says('+ managed_by = "terraform"'), planned
    tf.apply()
    assert tf.plan().returncode == 0
    info = stream_info(clean, "ORDERS")
    assert info is not None
    assert info["config"]["allow_direct"] is True
    assert info["config"]["metadata"]["headwater.io/managed-by"] == "terraform"
    assert tf.attributes("headwater_kv_entry.mode")["value"] == "blue"
