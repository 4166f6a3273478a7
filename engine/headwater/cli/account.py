"""``headwater account info``: the account's JetStream usage and limits."""

from __future__ import annotations

from typing import Annotated

import typer

from headwater.cli import output, views
from headwater.cli.context import current

app = typer.Typer(help="Account information.", no_args_is_help=True)


@app.command("info")
def info(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", "-j", help="Print the server's JSON.")] = False,
) -> None:
    """Show JetStream usage and limits of the connected account."""
    cli = current(ctx)
    reply = cli.api(lambda api: api.account_info())
    if cli.wants_json(as_json):
        output.emit_json(reply)
    else:
        views.account_info(reply)
