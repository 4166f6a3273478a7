"""``headwater context``: natscli's saved contexts (``nats context ls|show|add|select|rm``).

The files are natscli's (:mod:`headwater.cli.savedcontext`); ``--context NAME`` on the root
command, or the selected context, supplies connection settings that flags and ``$NATS_URL``
etc. override.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from headwater.cli import output, prompts, savedcontext
from headwater.cli.context import current
from headwater.cli.stream import Force, JsonOpt

app = typer.Typer(help="Manage saved contexts (natscli's context files).", no_args_is_help=True)

NameArg = Annotated[str, typer.Argument(help="Context name.")]

#: Rows of ``context show``: (label, field).
_SHOWN = (
    ("Description", "description"),
    ("Server URLs", "url"),
    ("Username", "user"),
    ("Password", "password"),
    ("Token", "token"),
    ("Credentials", "creds"),
    ("NKey", "nkey"),
    ("Certificate", "cert"),
    ("Key", "key"),
    ("CA", "ca"),
    ("TLS First", "tls_first"),
    ("JetStream Domain", "jetstream_domain"),
)


def _wants_json(ctx: typer.Context, local: bool) -> bool:
    return current(ctx).wants_json(local)


@app.command("ls")
def ls(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List saved contexts; the selected one is marked ``*``."""
    chosen = savedcontext.selected()
    rows = []
    for name in savedcontext.known():
        data = savedcontext.load(name)
        rows.append(
            {
                "name": name,
                "description": data.get("description", ""),
                "url": data.get("url", ""),
                "selected": name == chosen,
            }
        )
    if _wants_json(ctx, as_json):
        output.emit_json(rows)
    elif not rows:
        output.say("No contexts defined")
    else:
        cells = [
            (row["name"] + ("*" if row["selected"] else ""), row["description"], row["url"])
            for row in rows
        ]
        output.table("Known Contexts", ("Name", "Description", "Server URLs"), cells)


@app.command("show")
def show(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Argument(help="Context name (default: selected).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a context's settings (passwords and tokens masked; --json: the file as it is)."""
    name = name or savedcontext.selected()
    if not name:
        raise typer.BadParameter("no context is selected: pass NAME", param_hint="NAME")
    data = savedcontext.load(name)
    if _wants_json(ctx, as_json):
        output.emit_json({key: value for key, value in data.items() if key != "name"})
        return
    rows: list[tuple[str, object]] = [("Name", name)]
    for label, field in _SHOWN:
        value: Any = data.get(field)
        if not value:
            continue
        if field in savedcontext.SECRET_FIELDS:
            value = "*" * 9
        rows.append((label, value))
    rows.append(("Path", str(savedcontext.path_of(name))))
    output.panel(f"Context {name}", [("", rows)])


@app.command("add")
def add(
    name: NameArg,
    server: Annotated[str | None, typer.Option("--server", "-s", help="Server URL(s).")] = None,
    creds: str | None = typer.Option(None, "--creds", help="Credentials file."),
    user: str | None = typer.Option(None, "--user", help="User name."),
    password: str | None = typer.Option(None, "--password", help="Password."),
    token: str | None = typer.Option(None, "--token", help="Token."),
    nkey: str | None = typer.Option(None, "--nkey", help="Nkey seed file."),
    tlscert: str | None = typer.Option(None, "--tlscert", help="Client certificate file."),
    tlskey: str | None = typer.Option(None, "--tlskey", help="Client key file."),
    tlsca: str | None = typer.Option(None, "--tlsca", help="CA file."),
    tlsfirst: Annotated[
        bool | None, typer.Option("--tlsfirst/--no-tlsfirst", help="TLS before INFO.")
    ] = None,
    js_domain: str | None = typer.Option(None, "--js-domain", help="JetStream domain."),
    description: str | None = typer.Option(None, "--description", help="What this context is for."),
    select: Annotated[bool, typer.Option("--select", help="Select it as well.")] = False,
) -> None:
    """Save a context (an existing one keeps the fields not given)."""
    savedcontext.check_name(name)
    data = savedcontext.load(name) if name in savedcontext.known() else {}
    given = {
        "url": server,
        "creds": creds,
        "user": user,
        "password": password,
        "token": token,
        "nkey": nkey,
        "cert": tlscert,
        "key": tlskey,
        "ca": tlsca,
        "tls_first": tlsfirst,
        "jetstream_domain": js_domain,
        "description": description,
    }
    data.update({key: value for key, value in given.items() if value is not None})
    path = savedcontext.save(name, data)
    output.note(f"Context {name} was saved to {path}")
    if select:
        savedcontext.select(name)
        output.note(f"Context {name} was selected")


@app.command("select")
def select(name: NameArg) -> None:
    """Make a context the one used when --context is not given."""
    savedcontext.select(name)
    output.note(f"Context {name} was selected")


@app.command("rm")
def rm(name: NameArg, force: Force = False) -> None:
    """Delete a saved context (the selected one only when it is the last)."""
    savedcontext.path_of(name)
    prompts.confirm_or_force(force, f"Really delete context {name}")
    savedcontext.remove(name)
    output.note(f"Context {name} was removed")
