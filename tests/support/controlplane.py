"""Helpers for tests of the ways in (control plane, Terraform, operator) against a server.

``run_on`` runs one nats-py coroutine against a server from synchronous test code;
``empty_jetstream`` deletes every stream and template, so a module-scoped server can start
each test from nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from nats.aio.client import Client

from headwater.control import api
from headwater.control.connection import ConnectionSettings
from headwater.testing import ServerProcess

T = TypeVar("T")


def run_on(server: ServerProcess, body: Callable[[Client], Awaitable[T]]) -> T:
    """Connect to ``server``, run ``body(nc)``, close."""

    async def main() -> T:
        nc = await ConnectionSettings(servers=(server.url,)).connect()
        try:
            return await body(nc)
        finally:
            await nc.close()

    return asyncio.run(main())


async def empty_jetstream(nc: Client) -> None:
    """Delete every stream, then every template (nats-server has none and may not answer)."""
    names = await api.request(nc, "STREAM.NAMES", {})
    for name in names.get("streams") or []:
        await api.request(nc, f"STREAM.DELETE.{name}")
    try:
        templates = await api.request(nc, "STREAM.TEMPLATE.NAMES", {}, timeout=0.5)
    except (api.ApiUnavailable, api.ApiError):
        return
    for name in templates.get("streams") or templates.get("templates") or []:
        await api.request(nc, f"STREAM.TEMPLATE.DELETE.{name}")
