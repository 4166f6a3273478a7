"""``headwater terraform install``: put the Terraform provider into a filesystem mirror, so a
plain ``required_providers`` block and ``terraform init`` work offline (docs/TERRAFORM.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(name="terraform", help="The Terraform provider.", no_args_is_help=True)


@app.command("install")
def install(
    mirror: Annotated[
        Path,
        typer.Option(
            "--mirror", help="Filesystem mirror directory (created if missing).", show_default=True
        ),
    ] = Path.home() / ".terraform.d" / "plugins",
    cli_config: Annotated[
        Path | None,
        typer.Option("--cli-config", help="Also write a Terraform CLI config file here."),
    ] = None,
) -> None:
    """Install the provider headwater.io/headwater/headwater into MIRROR."""
    # Imported here: only this command needs the provider package.
    from headwater_terraform import install as provider

    executable = provider.install_provider(mirror)
    typer.echo(f"installed {provider.PROVIDER_SOURCE} {provider.PROVIDER_VERSION}: {executable}")
    hint = provider.python_hint(sys.executable)
    if hint:
        typer.echo(hint)
    config = provider.cli_config(mirror)
    if cli_config is not None:
        cli_config.write_text(config)
        typer.echo(f"wrote {cli_config}; export TF_CLI_CONFIG_FILE={cli_config}")
    else:
        typer.echo("Add this to your Terraform CLI configuration (TF_CLI_CONFIG_FILE):\n")
        typer.echo(config, nl=False)
