"""A tiny kopf operator for the end-to-end test of the fake API server.

kopf loads this file itself (``kopf run ... widget_operator.py``), so it must not import the
test modules. It finds the fake server through FAKEKUBE_URL and FAKEKUBE_TOKEN, read by a login
handler at start-up: unlike a kubeconfig read by the ``kubernetes`` package, this does not
depend on import order.
"""

from __future__ import annotations

import os
from typing import Any

import kopf

WIDGETS = ("example.headwater.io", "v1", "widgets")
FINALIZER = "example.headwater.io/finalizer"


@kopf.on.login()
def login(**_: Any) -> kopf.ConnectionInfo:
    return kopf.ConnectionInfo(
        server=os.environ["FAKEKUBE_URL"],
        token=os.environ["FAKEKUBE_TOKEN"],
        default_namespace="default",
    )


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.finalizer = FINALIZER
    # Short server-side watch timeouts make kopf reconnect with its last resourceVersion.
    settings.watching.server_timeout = 3
    settings.watching.reconnect_backoff = 0.1
    settings.networking.error_backoffs = [0.1, 0.2, 0.5]


@kopf.on.create(*WIDGETS)
def created(body: kopf.Body, spec: kopf.Spec, patch: kopf.Patch, **_: Any) -> None:
    kopf.info(body, reason="Created", message=f"widget {body.metadata.name} is {spec['color']}")
    patch.status["phase"] = "Created"
    patch.status["color"] = spec["color"]


@kopf.on.update(*WIDGETS, field="spec")
def updated(spec: kopf.Spec, meta: kopf.Meta, patch: kopf.Patch, **_: Any) -> None:
    patch.status["phase"] = "Updated"
    patch.status["color"] = spec["color"]
    patch.status["observedGeneration"] = meta["generation"]


@kopf.on.delete(*WIDGETS)
def deleted(body: kopf.Body, **_: Any) -> None:
    kopf.info(body, reason="Deleting", message=f"widget {body.metadata.name} is going away")


@kopf.timer(*WIDGETS, interval=0.5)
def tick(status: kopf.Status, patch: kopf.Patch, **_: Any) -> None:
    patch.status["ticks"] = (status.get("ticks") or 0) + 1
