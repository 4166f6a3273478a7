"""Helpers shared by the differential tests that compare our config functions with nats-server."""

from __future__ import annotations

import json
from typing import Any

import nats

#: Metadata keys whose values name the server's version, so they differ between the two.
VERSION_KEYS = ("_nats.ver", "_nats.level")


def normalized_config(config: dict[str, Any]) -> dict[str, Any]:
    """A stream or consumer config with the version metadata left out."""
    config = dict(config)
    config["metadata"] = {
        k: v for k, v in config.get("metadata", {}).items() if k not in VERSION_KEYS
    }
    return config


def reference_outcome(response: dict[str, Any]) -> tuple[Any, ...]:
    """("error", err_code, description) or ("ok", normalized config) of an API response."""
    if "error" in response:
        error = response["error"]
        return ("error", error["err_code"], error["description"])
    return ("ok", normalized_config(response["config"]))


async def delete_all_streams(nc: nats.NATS) -> None:
    reply = await nc.request("$JS.API.STREAM.NAMES", b"", timeout=5)
    for name in json.loads(reply.data).get("streams") or []:
        await nc.request(f"$JS.API.STREAM.DELETE.{name}", b"", timeout=5)
