"""The ``headwater`` provider: its configuration block and the connection it opens.

The block fills the control plane's ``ConnectionSettings``, the same model the CLI and the
operator use, so ``servers``, ``credentials``, ``user``/``password``, ``token``, ``nkey``,
``js_domain``, the TLS files and ``tls_first`` mean the same thing everywhere; ``NATS_URL``,
``NATS_CREDS``, ``NATS_NKEY``, ``NATS_JS_DOMAIN`` (and the other ``NATS_*`` variables
``from_env`` reads) fill what the block leaves out. ``js_domain`` is recorded on the
connection, so every JetStream call (the core's ``api`` requests and ``api.jetstream(nc)`` for
KV entries) goes to that domain. ``owner`` (default ``terraform``) names this configuration in
the ``headwater.io/managed-by`` marker (see ``ownership``); it is never read from the
environment.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from nats.aio.client import Client
from pydantic import ValidationError
from tf import schema, types
from tf.utils import Diagnostics

from headwater.control.connection import ConnectionSettings
from headwater_terraform import PROVIDER_SOURCE
from headwater_terraform.assets import RESOURCES
from headwater_terraform.data_sources import DATA_SOURCES
from headwater_terraform.kv_entry import KvEntryResource
from headwater_terraform.ownership import DEFAULT_OWNER, OWNER_HELP, owner_problem
from headwater_terraform.runtime import Runtime

T = TypeVar("T")

SETTINGS = (
    ("servers", "Server URLs, comma separated. Default: `NATS_URL`, else nats://127.0.0.1:4222."),
    ("credentials", "Path to a NATS .creds file. Default: `NATS_CREDS`."),
    ("user", "User name."),
    ("password", "Password for `user`."),
    ("token", "Authentication token."),
    ("nkey", "Path to an nkey user seed file (`SU...`). Default: `NATS_NKEY`."),
    (
        "js_domain",
        "JetStream domain: API requests go to `$JS.<domain>.API`. Default: `NATS_JS_DOMAIN`.",
    ),
    ("tls_ca", "Path to a PEM file of CAs to trust."),
    ("tls_cert", "Path to a PEM client certificate."),
    ("tls_key", "Path to the client certificate's PEM key."),
)
#: Boolean settings (the others are strings).
FLAGS = (
    (
        "tls_first",
        "Start TLS before the server's INFO, for a server with `tls { handshake_first: true }`.",
    ),
)
SENSITIVE = frozenset({"password", "token"})


class NotConfigured(Exception):
    """A resource was used before ConfigureProvider (never happens with Terraform)."""


class HeadwaterProvider:
    def __init__(self) -> None:
        self.runtime = Runtime()
        self.settings: ConnectionSettings | None = None
        self.owner = DEFAULT_OWNER

    # -- the tf Provider protocol ------------------------------------------------------

    def full_name(self) -> str:
        return PROVIDER_SOURCE

    def get_model_prefix(self) -> str:
        return "headwater_"

    def get_provider_schema(self, diags: Diagnostics) -> schema.Schema:
        return schema.Schema(
            attributes=[
                schema.Attribute(
                    name,
                    types.String(),
                    description=text,
                    optional=True,
                    sensitive=name in SENSITIVE,
                )
                for name, text in SETTINGS
            ]
            + [
                schema.Attribute(name, types.Bool(), description=text, optional=True)
                for name, text in FLAGS
            ]
            + [schema.Attribute("owner", types.String(), description=OWNER_HELP, optional=True)]
        )

    def validate_config(self, diags: Diagnostics, config: dict[str, Any]) -> None:
        if config.get("password") is not None and config.get("user") is None:
            diags.add_error("password needs user", "Set user next to password.", path=["password"])
        self._check_owner(diags, config.get("owner"))

    @staticmethod
    def _check_owner(diags: Diagnostics, owner: Any) -> bool:
        # Null is the default; an unknown value (not a string) is refused at configure.
        if not isinstance(owner, str):
            return True
        problem = owner_problem(owner)
        if problem:
            diags.add_error("Invalid owner", problem, path=["owner"])
        return problem is None

    def configure_provider(self, diags: Diagnostics, config: dict[str, Any]) -> None:
        # Terraform configures the provider once per command; in reattach mode one process
        # serves many commands, so this only records settings and connects lazily.
        values = {name: config.get(name) for name, _text in (*SETTINGS, *FLAGS)}
        owner = config.get("owner")
        if owner is not None and not isinstance(owner, str):
            # Unknown until apply; every plan writes it, so it must be known now.
            diags.add_error("Invalid owner", "owner must be known at plan time", path=["owner"])
            return
        if not self._check_owner(diags, owner):
            return
        # Never HEADWATER_OWNER: that variable names the CLI, and a Terraform run that
        # inherited it would write the CLI's marker.
        self.owner = owner if owner is not None else DEFAULT_OWNER
        try:
            self.settings = ConnectionSettings.from_env(**values)
        except ValidationError as failure:
            for item in failure.errors():
                loc = [str(part) for part in item["loc"]][:1]
                diags.add_error(
                    "Invalid provider configuration",
                    str(item["msg"]).removeprefix("Value error, "),
                    path=loc or None,
                )

    def get_data_sources(self) -> list[Any]:
        return list(DATA_SOURCES)

    def get_resources(self) -> list[Any]:
        return [*RESOURCES, KvEntryResource]

    def get_functions(self) -> list[Any]:
        return []

    def new_resource(self, klass: Any) -> Any:
        return klass(self)

    def new_data_source(self, klass: Any) -> Any:
        return klass(self)

    # -- for resources ------------------------------------------------------------------

    def run(self, body: Callable[[Client], Awaitable[T]]) -> T:
        if self.settings is None:
            raise NotConfigured("the provider is not configured")
        return self.runtime.run(self.settings, body)
