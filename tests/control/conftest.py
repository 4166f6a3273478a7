"""JetStream servers of both kinds for the control-plane tests, and helpers to use them.

One server of each kind per module (``js_server``), emptied before every test by
``clean_server``, keeps the suite fast while each test starts from nothing.
"""

from __future__ import annotations

from typing import TypeVar

import pytest
import typer
from typer.testing import CliRunner, Result

from headwater.cli import gitops
from headwater.cli.app import root
from headwater.testing import ServerProcess
from support.controlplane import empty_jetstream, run_on

T = TypeVar("T")


@pytest.fixture
def clean_server(js_server: ServerProcess) -> ServerProcess:
    """``js_server`` with no streams and no templates."""
    run_on(js_server, empty_jetstream)
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
