"""Stream lifecycle advisories on ``$JS.EVENT.ADVISORY.STREAM.<CREATED|UPDATED|DELETED>.<name>``,
a replicated stream's leader advisories (``STREAM.LEADER_ELECTED.<name>``, sent by a replica
when it starts leading, and ``STREAM.QUORUM_LOST.<name>``, sent by a leader that has not heard
from a quorum of replicas for a while), and the API's ``$JS.EVENT.ADVISORY.API.LIMIT_REACHED``.

Monitoring tools (``nats event --js-advisory``, jsm.go) decode these by ``type``, so the body
carries nats-server's ``stream_action`` field names: ``type``, ``id``, ``timestamp``,
``stream``, ``action`` (create | modify | delete), then ``template`` and ``domain`` only when
set (the reference omits empty ones). Consumer advisories live in ``consumers.manager``.
"""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING, Any

from .wire import dumps, rfc3339

if TYPE_CHECKING:
    from headwater.server.connections.internal import InternalClient

__all__ = [
    "API_LIMIT_ADVISORY",
    "STREAM_ADVISORY",
    "advisory_body",
    "api_limit_reached_body",
    "publish_stream_action",
    "publish_stream_event",
    "stream_action_body",
    "stream_leader_elected_body",
    "stream_quorum_lost_body",
]

STREAM_ADVISORY = "$JS.EVENT.ADVISORY.STREAM"
API_LIMIT_ADVISORY = "$JS.EVENT.ADVISORY.API.LIMIT_REACHED"
_SUBJECT_VERB = {"create": "CREATED", "modify": "UPDATED", "delete": "DELETED"}


def advisory_body(kind: str, domain: str, **fields: Any) -> bytes:
    """An ``io.nats.jetstream.advisory.v1.<kind>`` body: type, id, timestamp, the fields in
    order, then ``domain`` when set (the reference omits an empty one)."""
    body: dict[str, Any] = {
        "type": f"io.nats.jetstream.advisory.v1.{kind}",
        "id": secrets.token_hex(11),
        "timestamp": rfc3339(time.time_ns()),
        **fields,
    }
    if domain:
        body["domain"] = domain
    return dumps(body)


def stream_action_body(stream: str, action: str, template: str = "", domain: str = "") -> bytes:
    """The JSON body of one ``io.nats.jetstream.advisory.v1.stream_action`` event."""
    extra = {"template": template} if template else {}
    return advisory_body("stream_action", domain, stream=stream, action=action, **extra)


def publish_stream_action(
    client: InternalClient | None, stream: str, action: str, template: str = "", domain: str = ""
) -> None:
    """Publish the advisory for ``action`` on ``stream``; a no-op before the service started."""
    if client is None:
        return
    subject = f"{STREAM_ADVISORY}.{_SUBJECT_VERB[action]}.{stream}"
    client.publish(subject, stream_action_body(stream, action, template, domain))


def publish_stream_event(
    client: InternalClient | None, domain: str, kind: str, stream: str, **fields: Any
) -> None:
    """``$JS.EVENT.ADVISORY.STREAM.<KIND>.<stream>`` (snapshot and restore create/complete),
    type ``io.nats.jetstream.advisory.v1.<kind in lower case>``, the stream first."""
    if client is None:
        return
    body = advisory_body(kind.lower(), domain, stream=stream, **fields)
    client.publish(f"{STREAM_ADVISORY}.{kind}.{stream}", body)


def stream_leader_elected_body(
    stream: str, leader: str, replicas: list[dict[str, Any]], domain: str = ""
) -> bytes:
    """``io.nats.jetstream.advisory.v1.stream_leader_elected``: ``leader`` now leads
    ``stream``; ``replicas`` are nats-server's ``PeerInfo``s of every replica, the leader
    included (``name``, ``current``, ``active``, ``lag`` when behind, ``peer``)."""
    return advisory_body(
        "stream_leader_elected", domain, stream=stream, leader=leader, replicas=replicas
    )


def stream_quorum_lost_body(stream: str, replicas: list[dict[str, Any]], domain: str = "") -> bytes:
    """``io.nats.jetstream.advisory.v1.stream_quorum_lost``: the stream's leader cannot reach
    a quorum of its replicas, so it stalls."""
    return advisory_body("stream_quorum_lost", domain, stream=stream, replicas=replicas)


def api_limit_reached_body(server: str, dropped: int, domain: str = "") -> bytes:
    """``io.nats.jetstream.advisory.v1.api_limit_reached``: the API queue filled and
    ``dropped`` waiting requests were thrown away unanswered."""
    return advisory_body("api_limit_reached", domain, server=server, dropped=dropped)
