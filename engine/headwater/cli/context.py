"""State shared by every command of one invocation: connection settings and output mode."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import nats.errors
import nats.js.errors
import typer
from nats.aio.client import Client

from headwater.cli import serverurl
from headwater.cli.errors import ApiError, CliError
from headwater.cli.jsapi import JetStreamApi, domain_hint
from headwater.control import api
from headwater.control.connection import ConnectionSettings

T = TypeVar("T")


@dataclass(frozen=True)
class CliContext:
    settings: ConnectionSettings
    json_output: bool

    @property
    def timeout(self) -> float:
        """Seconds to wait for the server: ``--timeout`` bounds connecting and each request."""
        return self.settings.connect_timeout

    def wants_json(self, local_flag: bool = False) -> bool:
        """``--json`` works before the command (``headwater --json stream ls``) or after it."""
        return self.json_output or local_flag

    def run(self, body: Callable[[Client], Awaitable[T]]) -> T:
        """Connect, run ``body(nc)``, and always close the connection."""

        async def main() -> T:
            nc = await self._connect()
            try:
                return await body(nc)
            except nats.js.errors.APIError as error:
                if isinstance(error, nats.js.errors.ServiceUnavailableError) and not error.code:
                    # nats-py's "no responders" (KV, pull consumers): say where nobody answered
                    prefix = api.prefix_of(nc)
                    raise CliError(
                        f"no JetStream responder on {prefix}: is JetStream enabled on the"
                        f" server?{domain_hint(prefix)}"
                    ) from None
                raise ApiError(
                    int(error.code or 0), int(error.err_code or 0), error.description or str(error)
                ) from None
            except nats.errors.Error as error:
                # nats-py's own failures (invalid key, timeout, closed connection) are the
                # user's or the network's, not the CLI's: one line, not a traceback.
                raise CliError(str(error) or type(error).__name__) from None
            finally:
                await nc.close()

        return asyncio.run(main())

    def api(self, body: Callable[[JetStreamApi], Awaitable[T]]) -> T:
        """Like :meth:`run`, for bodies that only speak the JetStream API."""
        return self.run(lambda nc: body(JetStreamApi(nc, self.timeout)))

    async def _connect(self) -> Client:
        servers = self.settings.servers
        where = ", ".join(servers)
        refused = serverurl.check_urls(servers)
        if refused:
            raise CliError(refused)
        try:
            return await self.settings.connect()
        except nats.errors.Error as error:
            raise CliError(f"cannot connect to {where}: {error}") from None
        except (TimeoutError, OSError) as error:  # ConnectionError names the servers already
            # A silent server is often an HTTP port (the monitoring one): ask it, to say so.
            http = await serverurl.http_port_error(servers, min(self.timeout, 2.0))
            reason = str(error) or f"{type(error).__name__} ({where})"
            raise CliError(http or f"cannot connect: {reason}") from None


def current(ctx: typer.Context) -> CliContext:
    """The CliContext the root callback stored (commands may be nested under a group)."""
    root = ctx.find_root()
    assert isinstance(root.obj, CliContext)
    return root.obj
