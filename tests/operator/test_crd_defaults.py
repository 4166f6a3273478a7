"""The CRD defaults are the server's: what a minimal resource becomes on a real server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from headwater.control import api
from headwater.control.models import KINDS
from headwater.control.reconcile import apply_resources
from headwater.testing import ServerProcess
from headwater_operator.crdschema import spec_schema
from headwater_operator.resources import parse_body
from headwater_operator.spellings import spellings
from support.fakekube import FakeKubeThread
from tests.operator.conftest import run_on

CRDS = Path(__file__).resolve().parents[2] / "crds"
ABSENT_MEANS = (False, 0, "", "default", "none")
"""What the server leaves out of its JSON (Go omitempty) equals these."""

MINIMAL = {
    "Stream": {"name": "DEFAULTS", "subjects": ["defaults.>"]},
    "Consumer": {"streamName": "DEFAULTS", "durableName": "D"},
}


@pytest.fixture
def kube() -> Iterator[FakeKubeThread]:
    with FakeKubeThread(sorted(CRDS.glob("*.yaml"))) as kube:
        yield kube


def defaulted_fields(kind: str) -> dict[str, Any]:
    """Server field -> the CRD default (control fields, which the server never sees, left out)."""
    properties = spec_schema(kind)["properties"]
    model = KINDS[kind]
    out = {}
    for field, names in spellings(model).items():
        if field in model.CONTROL_FIELDS or "default" not in properties[names[0]]:
            continue
        out[field] = properties[names[0]]["default"]
    return out


def test_defaults_equal_what_the_server_holds(
    kube: FakeKubeThread, clean_server: ServerProcess
) -> None:
    resources = []
    for kind, spec in MINIMAL.items():
        stored = kube.api.create(
            {
                "apiVersion": "headwater.io/v1",
                "kind": kind,
                "metadata": {"name": kind.lower(), "namespace": "default"},
                "spec": spec,
            }
        )
        parsed = parse_body(stored)
        assert parsed.resource is not None, parsed.message
        resources.append(parsed.resource)

    async def create_and_read(nc: Client) -> tuple[dict[str, Any], dict[str, Any]]:
        _plan, report = await apply_resources(nc, resources, owner="kubernetes:test")
        assert report.ok, report.to_dict()
        stream = await api.request(nc, "STREAM.INFO.DEFAULTS")
        consumer = await api.request(nc, "CONSUMER.INFO.DEFAULTS.D")
        return stream["config"], consumer["config"]

    stream, consumer = run_on(clean_server, create_and_read)
    for kind, live in (("Stream", stream), ("Consumer", consumer)):
        for field, default in defaulted_fields(kind).items():
            if field in live:
                assert live[field] == default, f"{kind}.{field}"
            else:
                assert default in ABSENT_MEANS, f"{kind}.{field}: server omits it, CRD {default!r}"
