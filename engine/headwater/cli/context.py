"""State shared by every command of one invocation: connection settings and output mode."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import typer
from nats.aio.client import Client

from headwater.control.connection import ConnectionSettings

T = TypeVar("T")


@dataclass(frozen=True)
class CliContext:
    settings: ConnectionSettings
    json_output: bool

    def run(self, body: Callable[[Client], Awaitable[T]]) -> T:
        """Connect, run ``body(nc)``, and always close the connection."""

        async def main() -> T:
            nc = await self.settings.connect()
            try:
                return await body(nc)
            finally:
                await nc.close()

        return asyncio.run(main())


def current(ctx: typer.Context) -> CliContext:
    """The CliContext the root callback stored (commands may be nested under a group)."""
    root = ctx.find_root()
    assert isinstance(root.obj, CliContext)
    return root.obj
