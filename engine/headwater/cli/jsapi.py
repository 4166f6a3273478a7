"""The JetStream API as plain JSON requests, so ``--json`` prints exactly what the server said.

nats-py's ``JetStreamManager`` turns replies into dataclasses and drops fields it does not
know; a CLI that promises the server's JSON must not. Every admin command goes through
:class:`JetStreamApi`; error replies become :class:`~headwater.cli.errors.ApiError`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import nats.errors
from nats.aio.client import Client

from headwater.cli.errors import ApiError, CliError
from headwater.control import api

Json = dict[str, Any]

API_PREFIX = api.API_PREFIX


_FORBIDDEN = frozenset(" \t\r\n.*>/\\")


def checked(kind: str, name: str) -> str:
    """A stream or consumer name that is safe as one subject token.

    A name such as ``A.B`` would turn ``$JS.API.STREAM.INFO.A.B`` into a subject no server
    answers, and the user would wait for a timeout instead of reading why.
    """
    if not name or any(char in _FORBIDDEN for char in name):
        raise CliError(
            f"invalid {kind} name {name!r}: it must not be empty or contain spaces, "
            "'.', '*', '>', '/' or '\\'"
        )
    return name


def stream_context(stream: str) -> str:
    return f"stream {checked('stream', stream)}"


def consumer_context(stream: str, consumer: str) -> str:
    return f"consumer {checked('stream', stream)} > {checked('consumer', consumer)}"


def domain_hint(prefix: str) -> str:
    """A sentence for "nobody answered" errors when a JetStream domain is in use: the usual
    cause is a domain the server does not have."""
    if prefix == API_PREFIX:
        return ""
    domain = prefix.removeprefix("$JS.").removesuffix(".API")
    return f" Check --js-domain {domain}: the server must serve that JetStream domain."


class JetStreamApi:
    """Request/reply over ``$JS.API.*`` with the server's JSON in and out.

    The prefix is the connection's (``$JS.<domain>.API`` with ``--js-domain``) unless given."""

    def __init__(self, nc: Client, timeout: float, prefix: str | None = None) -> None:
        self.nc = nc
        self.timeout = timeout
        self.prefix = api.prefix_of(nc) if prefix is None else prefix

    async def request(
        self, verb: str, body: Mapping[str, Any] | None = None, context: str = ""
    ) -> Json:
        """Send ``body`` (or an empty payload) to ``$JS.API.<verb>``; the reply without errors."""
        subject = f"{self.prefix}.{verb}"
        payload = b"" if body is None else json.dumps(body).encode()
        try:
            msg = await self.nc.request(subject, payload, timeout=self.timeout)
        except nats.errors.NoRespondersError:
            raise CliError(
                f"no responder on {subject}: is JetStream enabled on the server"
                f" (and does the stream exist)?{domain_hint(self.prefix)}"
            ) from None
        except nats.errors.TimeoutError:
            raise CliError(
                f"no reply on {subject} within {self.timeout:g}s{domain_hint(self.prefix)}"
            ) from None
        try:
            reply: Json = json.loads(msg.data)
        except ValueError:
            raise CliError(f"the server sent a reply that is not JSON on {subject}") from None
        if isinstance(reply.get("error"), dict):
            raise ApiError.from_reply(reply["error"], context)
        return reply

    async def _paged(self, verb: str, key: str, body: Mapping[str, Any] | None = None) -> list[Any]:
        """Every item of a paged list (``{total, offset, limit, <key>: [...]}``)."""
        items: list[Any] = []
        while True:
            reply = await self.request(verb, {**(body or {}), "offset": len(items)})
            page = reply.get(key) or []
            items.extend(page)
            if not page or len(items) >= int(reply.get("total", 0)):
                return items

    # --- account -----------------------------------------------------------------------
    async def account_info(self) -> Json:
        return await self.request("INFO")

    # --- streams -----------------------------------------------------------------------
    async def stream_names(self, subject: str | None = None) -> list[str]:
        body = {"subject": subject} if subject else None
        return sorted(await self._paged("STREAM.NAMES", "streams", body))

    async def stream_list(self, subject: str | None = None) -> list[Json]:
        body = {"subject": subject} if subject else None
        infos = await self._paged("STREAM.LIST", "streams", body)
        return sorted(infos, key=lambda info: info["config"]["name"])

    async def stream_info(self, name: str) -> Json:
        return await self.request(f"STREAM.INFO.{name}", context=stream_context(name))

    async def stream_create(self, config: Mapping[str, Any]) -> Json:
        name = str(config["name"])
        return await self.request(f"STREAM.CREATE.{name}", config, stream_context(name))

    async def stream_update(self, config: Mapping[str, Any]) -> Json:
        name = str(config["name"])
        return await self.request(f"STREAM.UPDATE.{name}", config, stream_context(name))

    async def stream_delete(self, name: str) -> Json:
        return await self.request(f"STREAM.DELETE.{name}", context=stream_context(name))

    async def stream_purge(self, name: str, body: Mapping[str, Any] | None = None) -> Json:
        return await self.request(f"STREAM.PURGE.{name}", body or None, stream_context(name))

    async def msg_get(self, stream: str, body: Mapping[str, Any]) -> Json:
        return await self.request(f"STREAM.MSG.GET.{stream}", body, stream_context(stream))

    async def msg_delete(self, stream: str, seq: int, erase: bool) -> Json:
        body = {"seq": seq, "no_erase": not erase}
        return await self.request(f"STREAM.MSG.DELETE.{stream}", body, stream_context(stream))

    # --- consumers ---------------------------------------------------------------------
    async def consumer_names(self, stream: str) -> list[str]:
        await self.stream_info(stream)  # a clear "stream not found" before an empty list
        return sorted(await self._paged(f"CONSUMER.NAMES.{stream}", "consumers"))

    async def consumer_list(self, stream: str) -> list[Json]:
        await self.stream_info(stream)
        infos = await self._paged(f"CONSUMER.LIST.{stream}", "consumers")
        return sorted(infos, key=lambda info: info["name"])

    async def consumer_info(self, stream: str, name: str) -> Json:
        return await self.request(
            f"CONSUMER.INFO.{stream}.{name}", context=consumer_context(stream, name)
        )

    async def consumer_create(self, stream: str, config: Mapping[str, Any], action: str) -> Json:
        """Create (``action="create"``) or update (``"update"``) a named consumer.

        The named form ``CONSUMER.CREATE.<stream>.<name>`` (server 2.9+) with an explicit
        action makes ``add`` refuse to overwrite and ``edit`` refuse to create, as the
        reference server does with codes 10148 and 10149.
        """
        name = str(config.get("durable_name") or config.get("name"))
        body = {"stream_name": stream, "config": dict(config), "action": action}
        return await self.request(
            f"CONSUMER.CREATE.{stream}.{name}", body, consumer_context(stream, name)
        )

    async def consumer_delete(self, stream: str, name: str) -> Json:
        return await self.request(
            f"CONSUMER.DELETE.{stream}.{name}", context=consumer_context(stream, name)
        )
