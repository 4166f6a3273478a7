"""The provider's connection: ``ConnectionSettings`` plus what only Terraform configurations
carry, inline secrets.

terraform-provider-jetstream lets a configuration hand over a ``.creds`` file's content
(``credential_data``) and PEM contents (``tls { ca_file_data, cert_file_data, key_file_data
}``), typically from a secrets manager's data source, so no file has to exist on the machine
that runs Terraform. The control plane's settings model holds paths only (the CLI and the
operator read files), so the contents live here: the creds go to nats-py as
``RawCredentials``, and the PEM contents build the TLS context. ``ssl`` loads a client
certificate only from files, so those two contents are written to a private temporary
directory (mode 0700) for the load and removed right after.

``creds_problem`` checks a ``.creds`` content before nats-py sees it (the control plane's
check, which ``credentials`` paths get too): nats-py looks for the JWT by reading lines until
it finds the armour line, forever when there is none, which would spin the provider's one
event loop and hang every operation after it.
"""

from __future__ import annotations

import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from nats.aio.client import Client, RawCredentials

from headwater.control import connection
from headwater.control.connection import ConnectionSettings


def creds_problem(content: str) -> str | None:
    """Why ``content`` is not a ``.creds`` file's content, or None. Never quotes the content."""
    return connection.creds_problem(content, "credential_data")


@dataclass(frozen=True)
class Connection:
    """Hashable (the runtime keeps one client per distinct connection); secrets stay out of
    ``repr`` so a logged connection never shows them."""

    settings: ConnectionSettings
    credential_data: str | None = field(default=None, repr=False)
    ca_data: str | None = field(default=None, repr=False)
    cert_data: str | None = field(default=None, repr=False)
    key_data: str | None = field(default=None, repr=False)

    async def connect(self, name: str) -> Client:
        options: dict[str, object] = {"name": name}
        if self.credential_data is not None:
            options["user_credentials"] = RawCredentials(self.credential_data)
        context = self.ssl_context()
        if context is not None:
            options["tls"] = context  # replaces the one the settings would build from paths
        return await self.settings.connect(**options)

    def ssl_context(self) -> ssl.SSLContext | None:
        """A context from the PEM contents and paths together, or None when no content is
        set (the settings then build theirs from the paths alone)."""
        if self.ca_data is None and self.cert_data is None and self.key_data is None:
            return None
        settings = self.settings
        context = ssl.create_default_context(cafile=settings.tls_ca, cadata=self.ca_data)
        if self.cert_data is None and settings.tls_cert is None:
            return context
        with tempfile.TemporaryDirectory(prefix="headwater-tls-") as private:
            cert = _path(settings.tls_cert, self.cert_data, Path(private) / "cert.pem")
            key = _path(settings.tls_key, self.key_data, Path(private) / "key.pem")
            context.load_cert_chain(cert, key)
        return context


def _path(path: str | None, content: str | None, spare: Path) -> str | None:
    """``path``, or ``content`` written to ``spare`` (only the owner can read it)."""
    if content is None:
        return path
    spare.touch(mode=0o600)
    spare.write_text(content)
    return str(spare)
