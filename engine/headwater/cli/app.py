"""The root ``headwater`` command: global connection and output options, then the commands.

Command groups live in their own modules and register here, one line each (pip's habit: one
module per command family).
"""

from __future__ import annotations

import typer

from headwater.cli.context import CliContext
from headwater.control.connection import ConnectionSettings

app = typer.Typer(
    name="headwater",
    help="Manage Headwater and NATS JetStream: streams, consumers, KV, and GitOps plan/apply.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def root(
    ctx: typer.Context,
    server: str | None = typer.Option(
        None, "-s", "--server", help="Server URL(s), comma-separated. Default: $NATS_URL."
    ),
    creds: str | None = typer.Option(None, "--creds", help="NATS credentials file."),
    user: str | None = typer.Option(None, "--user", help="User name."),
    password: str | None = typer.Option(None, "--password", help="Password."),
    token: str | None = typer.Option(None, "--token", help="Authentication token."),
    tlscert: str | None = typer.Option(None, "--tlscert", help="Client certificate file."),
    tlskey: str | None = typer.Option(None, "--tlskey", help="Client private key file."),
    tlsca: str | None = typer.Option(None, "--tlsca", help="CA certificate file."),
    timeout: float = typer.Option(5.0, "--timeout", help="Connect timeout in seconds."),
    json_output: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    settings = ConnectionSettings.from_env(
        servers=server,
        credentials=creds,
        user=user,
        password=password,
        token=token,
        tls_cert=tlscert,
        tls_key=tlskey,
        tls_ca=tlsca,
        connect_timeout=timeout,
    )
    ctx.obj = CliContext(settings=settings, json_output=json_output)


def main() -> None:
    app()
