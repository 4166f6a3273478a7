"""pytest fixtures for the fake API server.

Import them by name into a ``conftest.py`` and define ``fakekube_crds`` there to choose the CRD
files to serve::

    from support.fakekube.fixtures import fake_kube, fake_kube_thread

    @pytest.fixture
    def fakekube_crds() -> list[Path]:
        return sorted(Path("crds").glob("*.yaml"))
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from .server import FakeKube, FakeKubeThread


@pytest.fixture
def fakekube_crds() -> list[Path]:
    """The CRD files to serve; override this fixture in a conftest.py or a test module."""
    return []


@pytest.fixture
async def fake_kube(fakekube_crds: list[Path]) -> AsyncIterator[FakeKube]:
    """A server on the test's own event loop, for async tests that talk HTTP to it."""
    async with FakeKube(fakekube_crds, bookmark_interval=0.5) as kube:
        yield kube


@pytest.fixture
def fake_kube_thread(fakekube_crds: list[Path]) -> Iterator[FakeKubeThread]:
    """A server in a background thread, for sync tests that run kopf's KopfRunner."""
    with FakeKubeThread(fakekube_crds, bookmark_interval=0.5) as kube:
        yield kube
