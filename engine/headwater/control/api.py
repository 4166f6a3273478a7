"""Raw JetStream API requests over nats-py.

The control plane sends and reads the server's JSON itself instead of nats-py's JetStream
manager: that manager parses configs into dataclasses that drop fields it does not know, and a
plan must see every field the server has.
"""

from __future__ import annotations

import json
from typing import Any
from weakref import WeakKeyDictionary

from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext

API_PREFIX = "$JS.API"
DEFAULT_TIMEOUT = 5.0

_prefixes: WeakKeyDictionary[Client, str] = WeakKeyDictionary()
"""Connection -> its JetStream API prefix, recorded once by whoever connected it (a
connection to a JetStream domain speaks ``$JS.<domain>.API``); unrecorded ones use
``$JS.API``. Kept beside the connection rather than passed to every call, so all the
functions that take a connection stay as they are."""

STREAM_NOT_FOUND = 10059
CONSUMER_NOT_FOUND = 10014
TEMPLATE_NOT_FOUND = 10068


def domain_prefix(domain: str | None) -> str:
    """The JetStream API prefix of ``domain`` (``$JS.API`` without one)."""
    return f"$JS.{domain}.API" if domain else API_PREFIX


def use_prefix(nc: Client, prefix: str) -> None:
    """Send this connection's JetStream API requests under ``prefix``."""
    _prefixes[nc] = prefix


def prefix_of(nc: Client) -> str:
    return _prefixes.get(nc, API_PREFIX)


def jetstream(nc: Client) -> JetStreamContext:
    """nats-py's JetStream context for ``nc``, in the connection's domain (KV and object
    store operations go through it)."""
    return nc.jetstream(prefix=prefix_of(nc))


class ApiError(Exception):
    """An error reply of the JetStream API (``{"error": {code, err_code, description}}``)."""

    def __init__(self, subject: str, code: int, err_code: int, description: str) -> None:
        super().__init__(f"{description} (code {code}, err_code {err_code})")
        self.subject = subject
        self.code = code
        self.err_code = err_code
        self.description = description


class ApiUnavailable(Exception):
    """No reply: JetStream is not enabled, or the API (e.g. templates) does not exist."""


async def request(
    nc: Client,
    api: str,
    body: dict[str, Any] | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> dict[str, Any]:
    """``$JS.API.<api>`` (under the connection's prefix) with a JSON body (None: empty
    payload); the decoded reply or raise."""
    subject = f"{prefix_of(nc)}.{api}"
    payload = b"" if body is None else json.dumps(body).encode()
    try:
        reply = await nc.request(subject, payload, timeout=timeout)
    except (NoRespondersError, NatsTimeoutError) as error:
        raise ApiUnavailable(f"no reply on {subject}: is JetStream enabled?") from error
    data = json.loads(reply.data) if reply.data else {}
    error = data.get("error")
    if error:
        raise ApiError(
            subject,
            int(error.get("code", 0)),
            int(error.get("err_code", 0)),
            str(error.get("description", "unknown error")),
        )
    return data


async def paged(nc: Client, api: str, key: str, *, timeout: float = DEFAULT_TIMEOUT) -> list[Any]:
    """All items of a paged list API (``offset``/``limit``/``total``), following the pages."""
    items: list[Any] = []
    while True:
        data = await request(nc, api, {"offset": len(items)}, timeout=timeout)
        page = data.get(key) or []
        items.extend(page)
        if not page or len(items) >= int(data.get("total", 0)):
            return items
