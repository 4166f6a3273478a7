"""JetStream servers of both kinds for the control-plane tests, and helpers to use them.

One server of each kind per module (``js_server``), emptied before every test by
``clean_server``, keeps the suite fast while each test starts from nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest
import typer
from nats.aio.client import Client
from typer.testing import CliRunner, Result

from headwater.cli import gitops
from headwater.cli.app import root
from headwater.control import api
from headwater.control.connection import ConnectionSettings
from headwater.testing import ServerProcess

T = TypeVar("T")


async def _empty(nc: Client) -> None:
    names = await api.request(nc, "STREAM.NAMES", {})
    for name in names.get("streams") or []:
        await api.request(nc, f"STREAM.DELETE.{name}")
    try:
        templates = await api.request(nc, "STREAM.TEMPLATE.NAMES", {}, timeout=0.5)
    except (api.ApiUnavailable, api.ApiError):
        return
    for name in templates.get("streams") or templates.get("templates") or []:
        await api.request(nc, f"STREAM.TEMPLATE.DELETE.{name}")


def run_on(server: ServerProcess, body: Callable[[Client], Awaitable[T]]) -> T:
    """Connect to ``server``, run ``body(nc)``, close."""

    async def main() -> T:
        nc = await ConnectionSettings(servers=(server.url,)).connect()
        try:
            return await body(nc)
        finally:
            await nc.close()

    return asyncio.run(main())


@pytest.fixture
def clean_server(js_server: ServerProcess) -> ServerProcess:
    """``js_server`` with no streams and no templates."""
    run_on(js_server, _empty)
    return js_server


def cli_app() -> typer.Typer:
    """The root command with only the GitOps commands, as app.py wires them."""
    app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)
    app.callback()(root)
    gitops.register(app)
    return app


def invoke(server: ServerProcess | None, *args: str) -> Result:
    runner = CliRunner()
    prefix = ["-s", server.url] if server is not None else []
    return runner.invoke(cli_app(), [*prefix, *args], catch_exceptions=False)
