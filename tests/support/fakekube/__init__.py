"""A fake Kubernetes API server for testing the kopf operator (see README.md)."""

from .errors import ApiError
from .inspector import Inspector
from .resources import ResourceType
from .server import DEFAULT_TOKEN, FakeKube, FakeKubeThread, read_crds, write_kubeconfig

__all__ = [
    "DEFAULT_TOKEN",
    "ApiError",
    "FakeKube",
    "FakeKubeThread",
    "Inspector",
    "ResourceType",
    "read_crds",
    "write_kubeconfig",
]
