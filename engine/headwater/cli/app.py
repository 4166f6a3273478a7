"""The root ``headwater`` command: global connection and output options, then the commands.

Command groups live in their own modules and register here, one line each (pip's habit: one
module per command family). Errors are reported in one place, :class:`RootGroup`.
"""

from __future__ import annotations

import os
from typing import Any, NoReturn

import typer
from pydantic import ValidationError
from typer.core import TyperGroup

from headwater import __version__
from headwater.cli import (
    account,
    backup,
    consumer,
    contextcmd,
    exitcodes,
    gitops,
    kv,
    messaging,
    objstore,
    output,
    savedcontext,
    stream,
    terraform,
    verify,
)
from headwater.cli.context import CliContext
from headwater.cli.errors import CliError
from headwater.control import units
from headwater.control.connection import ConnectionSettings

try:  # typer >= 0.29 vendors its own copy of click; older releases use the click package
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as click_errors  # type: ignore[no-redef]


class RootGroup(TyperGroup):
    """Turns known failures into one ``Error: ...`` line on stderr and exit code 1.

    Usage errors (an unknown flag, a bad value) included: Click exits 2 on those and typer
    draws a box around them, but 2 means "changes present" to a pipeline running ``plan``,
    and a CI log wants one line; every error here exits 1 (docs/CLI.md).
    """

    def make_context(self, *args: Any, **kwargs: Any) -> typer.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click_errors.UsageError as error:
            _usage_error(error)

    def invoke(self, ctx: typer.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click_errors.UsageError as error:
            _usage_error(error)
        except CliError as error:
            output.error_console().print(f"Error: {error}", markup=False)
            raise typer.Exit(exitcodes.ERROR) from None


def _usage_error(error: click_errors.UsageError) -> NoReturn:
    if isinstance(error, click_errors.NoArgsIsHelpError):
        raise error  # no arguments: the help, as before
    message = error.format_message()
    if _force_meant(error):
        message = f"{message} (-f means --file; to skip the confirmation use --force)"
    output.error_console().print(f"Error: {message}", markup=False)
    raise typer.Exit(exitcodes.ERROR) from None


def _force_meant(error: click_errors.UsageError) -> bool:
    """``-f`` on a command with ``--force``: the nats CLI's habit (``nats stream rm -f``); here
    -f is --file in every command (docs/CLI.md), so say what to type instead."""
    if not isinstance(error, click_errors.NoSuchOption) or error.option_name != "-f":
        return False
    params = error.ctx.command.params if error.ctx is not None else []
    return any(param.name == "force" for param in params)


app = typer.Typer(
    name="headwater",
    cls=RootGroup,
    help=(
        "Manage Headwater and NATS JetStream: streams, consumers, KV, object stores, and"
        " GitOps plan/apply."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

#: Command groups: (name, module). A module exposes ``app``; others (backup) extend those apps.
GROUPS = (
    ("stream", stream),
    ("consumer", consumer),
    ("kv", kv),
    ("obj", objstore),
    ("account", account),
    ("context", contextcmd),
    ("terraform", terraform),
)
#: Modules that add commands to those groups' apps when imported (``stream backup`` ...).
EXTENSIONS = (backup,)
for _name, _module in GROUPS:
    app.add_typer(_module.app, name=_name)
messaging.register(app)  # pub, sub, req
gitops.register(app)  # validate, plan, diff, apply, export
verify.register(app)  # verify backups offline (Spark)


def _print_version(value: bool) -> None:
    """``--version``: eager, so it answers before anything else is checked or connected."""
    if value:
        typer.echo(f"headwater {__version__}")
        raise typer.Exit()


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
    nkey: str | None = typer.Option(
        None, "--nkey", help="Nkey user seed file (SU...). Default: $NATS_NKEY."
    ),
    tlscert: str | None = typer.Option(None, "--tlscert", help="Client certificate file."),
    tlskey: str | None = typer.Option(None, "--tlskey", help="Client private key file."),
    tlsca: str | None = typer.Option(None, "--tlsca", help="CA certificate file."),
    tlsfirst: bool = typer.Option(
        False,
        "--tlsfirst",
        help="Start TLS before the server's INFO (a server with tls handshake_first).",
    ),
    js_domain: str | None = typer.Option(
        None,
        "--js-domain",
        help="JetStream domain: the API is $JS.<domain>.API. Default: $NATS_JS_DOMAIN.",
    ),
    context: str | None = typer.Option(
        None,
        "--context",
        envvar="NATS_CONTEXT",
        help="Saved context (natscli's) to connect with. Default: the selected one.",
    ),
    timeout: str = typer.Option(
        "5s", "--timeout", help="How long to wait for the server: 2s, 500ms, or seconds."
    ),
    json_output: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the version and exit.",
    ),
) -> None:
    seconds = _seconds(timeout)
    # ``context`` commands manage the files: a broken selected context must not stop them.
    if ctx.invoked_subcommand == "context":
        if context and ctx.get_parameter_source("context").name == "COMMANDLINE":
            raise typer.BadParameter(
                "the context commands take the context's name as an argument",
                param_hint="--context",
            )
        saved: dict[str, object] = {}
    else:
        saved = _saved_context(context)
    env, tls = _context_env(saved)
    try:
        settings = ConnectionSettings.from_env(
            env,
            servers=server,
            credentials=creds,
            user=user,
            password=password,
            token=token,
            nkey=nkey,
            js_domain=js_domain,
            tls_cert=tlscert or tls.get("cert"),
            tls_key=tlskey or tls.get("key"),
            tls_ca=tlsca or tls.get("ca"),
            tls_first=tlsfirst or bool(tls.get("tls_first")),
            connect_timeout=seconds,
        )
    except ValidationError as error:
        raise _bad_parameter(error) from None
    ctx.obj = CliContext(settings=settings, json_output=json_output)


def _saved_context(name: str | None) -> dict[str, object]:
    """The connection fields of ``--context NAME`` (or ``$NATS_CONTEXT``), else of the
    selected context, else none. Errors are the one ``Error:`` line, as any other."""
    name = name or savedcontext.selected()
    if not name:
        return {}
    try:
        return savedcontext.connection_values(name, savedcontext.load(name))
    except CliError as error:
        output.error_console().print(f"Error: {error}", markup=False)
        raise typer.Exit(exitcodes.ERROR) from None


def _context_env(saved: dict[str, object]) -> tuple[dict[str, str], dict[str, object]]:
    """The environment with the context's values under the variables they stand for, where
    the variable is not set: flags beat variables beat the context (natscli's order, whose
    variables are flag defaults). TLS fields, which have no variable, come back apart."""
    env = dict(os.environ)
    tls: dict[str, object] = {}
    for field, value in saved.items():
        variable = savedcontext.CONNECTION_FIELDS[field]
        if variable is None:
            tls[field] = value
        elif not env.get(variable):
            env[variable] = str(value)
    return env, tls


#: The flag (and variable) behind each connection setting, to name it in an error.
_FLAGS = {
    "servers": "--server / $NATS_URL",
    "credentials": "--creds / $NATS_CREDS",
    "nkey": "--nkey / $NATS_NKEY",
    "js_domain": "--js-domain / $NATS_JS_DOMAIN",
}


def _bad_parameter(error: ValidationError) -> typer.BadParameter:
    """A settings validation error as click's usage error (one line, exit code 1)."""
    first = error.errors()[0]
    field = str(first["loc"][0]) if first["loc"] else ""
    message = str(first["msg"]).removeprefix("Value error, ")
    return typer.BadParameter(message, param_hint=_FLAGS.get(field, f"--{field}"))


def _seconds(value: str) -> float:
    """``--timeout`` as the nats CLI writes it (``2s``), or a plain number of seconds."""
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = units.parse_duration(value) / 1e9
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint="--timeout") from None
    if seconds <= 0:
        raise typer.BadParameter("must be more than zero", param_hint="--timeout")
    return seconds


def main() -> None:
    app()
