"""Fixtures for the fake API server's own tests: the example Widget CRD and an HTTP client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from support.fakekube import FakeKube
from support.fakekube.fixtures import fake_kube, fake_kube_thread

__all__ = ["fake_kube", "fake_kube_thread"]

CRDS = Path(__file__).parent / "crds"
WIDGETS = "/apis/example.headwater.io/v1/namespaces/default/widgets"


@pytest.fixture
def fakekube_crds() -> list[Path]:
    return [CRDS / "widgets.yaml"]


@pytest.fixture
async def http(fake_kube: FakeKube) -> AsyncIterator[aiohttp.ClientSession]:
    """A client session with the server's base URL and bearer token."""
    headers = {"Authorization": f"Bearer {fake_kube.token}"}
    async with aiohttp.ClientSession(fake_kube.url, headers=headers) as session:
        yield session
