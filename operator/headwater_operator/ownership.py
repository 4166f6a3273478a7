"""Who owns a server asset the operator manages: each custom resource is an owner of its own.

The owner is written in the asset's ``headwater.io/managed-by`` metadata (see
``headwater.control.plan``) and reads ``kubernetes:<namespace>/<kind>/<name>``, or
``kubernetes:<cluster>/<namespace>/<kind>/<name>`` when the operator runs with a cluster
identity (``--cluster-id``), so operators of two clusters sharing one NATS server tell their
resources apart.

Why the kind is part of it: a metadata name is unique only per kind, and one server stream can
be named by three kinds (a Stream with ``spec.name: KV_cache`` and the KeyValue ``cache`` both
mean stream ``KV_cache``). Without the kind both would be ``kubernetes:ns/cache``, agree that
the stream is theirs, and overwrite each other's config on every sync with no conflict shown.
The kind (lower case, kubectl's ``TYPE/NAME`` spelling: ``stream/orders``,
``keyvalue/cache``) also tells the reader of a Conflict which object to look at:
``kubectl get -n <namespace> stream/orders``.
"""

from __future__ import annotations

from headwater.control.models import ADOPT_ANNOTATION

PREFIX = "kubernetes:"
ADOPT_HINT = f'annotate the resource {ADOPT_ANNOTATION}: "true"'
"""How a custom resource takes over an asset another owner manages (in a Conflict's message)."""


def check_cluster_id(cluster_id: str) -> str:
    """``cluster_id`` when it can be one segment of an owner (raises ValueError otherwise)."""
    if cluster_id and ("/" in cluster_id or any(c.isspace() for c in cluster_id)):
        raise ValueError(f"cluster id {cluster_id!r} must not contain '/' or whitespace")
    return cluster_id


def owner_of(kind: str, namespace: str, name: str, cluster_id: str = "") -> str:
    """The owner a custom resource writes in ``headwater.io/managed-by``."""
    cluster = f"{cluster_id}/" if cluster_id else ""
    return f"{PREFIX}{cluster}{namespace}/{kind.lower()}/{name}"
