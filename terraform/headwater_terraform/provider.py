"""The ``headwater`` provider: its configuration block and the connection it opens.

The block fills the control plane's ``ConnectionSettings``, the same model the CLI and the
operator use, so ``servers``, ``credentials``, ``user``/``password``, ``token``, ``nkey``,
``js_domain``, the TLS files and ``tls_first`` mean the same thing everywhere; ``NATS_URL``,
``NATS_CREDS``, ``NATS_NKEY``, ``NATS_JS_DOMAIN`` (and the other ``NATS_*`` variables
``from_env`` reads) fill what the block leaves out. terraform-provider-jetstream's names are
accepted too (see ``connection``): ``credential_data``, a ``.creds`` file's content, in place
of the ``credentials`` path, and a ``tls { ca_file, cert_file, key_file }`` block (each also
as ``*_data``, the PEM content) next to the flat ``tls_*`` paths; setting one thing both ways
is an error, never a silent pick. ``js_domain`` is recorded on the
connection, so every JetStream call (the core's ``api`` requests and ``api.jetstream(nc)`` for
KV entries) goes to that domain. ``owner`` (default ``terraform``) names this configuration in
the ``headwater.io/managed-by`` marker (see ``ownership``); it is never read from the
environment.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from nats.aio.client import Client
from pydantic import ValidationError
from tf import schema, types
from tf.blocks import SetNestedBlock
from tf.utils import Diagnostics

from headwater.control.connection import ConnectionSettings
from headwater_terraform import PROVIDER_SOURCE
from headwater_terraform.assets import RESOURCES
from headwater_terraform.connection import Connection, creds_problem
from headwater_terraform.data_sources import DATA_SOURCES
from headwater_terraform.kv_entry import KvEntryResource
from headwater_terraform.ownership import DEFAULT_OWNER, OWNER_HELP, owner_problem
from headwater_terraform.runtime import Runtime

T = TypeVar("T")

SETTINGS = (
    ("servers", "Server URLs, comma separated. Default: `NATS_URL`, else nats://127.0.0.1:4222."),
    ("credentials", "Path to a NATS .creds file. Default: `NATS_CREDS`."),
    (
        "credential_data",
        "The content of a NATS .creds file (terraform-provider-jetstream's name), instead of"
        " `credentials`.",
    ),
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
SENSITIVE = frozenset({"password", "token", "credential_data"})
#: Only the Terraform configuration has these; ConnectionSettings holds paths.
INLINE = ("credential_data",)
#: terraform-provider-jetstream's ``tls`` block: (its name, our flat path attribute, help).
TLS_FILES = (
    ("ca_file", "tls_ca", "PEM file of CAs to trust"),
    ("cert_file", "tls_cert", "PEM client certificate"),
    ("key_file", "tls_key", "the client certificate's PEM key"),
)
TLS_HELP = (
    "TLS files as terraform-provider-jetstream names them, each a path or (`*_data`) the PEM"
    " content; the same as `tls_ca`, `tls_cert`, `tls_key`."
)
#: Diagnostic summaries, worded as Terraform's SDK words them.
CONFLICT = "Conflicting configuration arguments"
MISSING = "Missing required argument"


def _tls_block() -> SetNestedBlock:
    attributes = []
    for name, _flat, text in TLS_FILES:
        attributes.append(
            schema.Attribute(
                name, types.String(), description=f"Path to the {text}.", optional=True
            )
        )
        attributes.append(
            schema.Attribute(
                f"{name}_data",
                types.String(),
                description=f"Content of the {text}.",
                optional=True,
                sensitive=name == "key_file",
            )
        )
    block = SetNestedBlock("tls", schema.Block(attributes=attributes, description=TLS_HELP))
    block.max_items = 1  # SetNestedBlock has no parameter for it
    return block


def _given(value: Any) -> bool:
    # Unset, as Terraform's SDK reads it: null or the empty string.
    return value is not None and value != ""


def _tls_of(config: dict[str, Any]) -> dict[str, Any]:
    blocks = config.get("tls") or []
    return blocks[0] if blocks and isinstance(blocks[0], dict) else {}


def connection_problems(config: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(attribute, summary, detail) for each connection option set twice, set without its pair, or
    (``credential_data``) not what it names."""
    problems = []
    inline = config.get("credential_data")
    if _given(config.get("credentials")) and _given(inline):
        problems.append(
            ("credential_data", CONFLICT, '"credential_data": conflicts with credentials')
        )
    problem = creds_problem(inline) if isinstance(inline, str) and inline else None
    if problem:
        problems.append(("credential_data", "Invalid credential_data", problem))
    tls = _tls_of(config)
    for name, flat, _text in TLS_FILES:
        data = f"{name}_data"
        if _given(tls.get(name)) and _given(tls.get(data)):
            problems.append(("tls", CONFLICT, f'"tls.0.{data}": conflicts with tls.0.{name}'))
        for given in (name, data):
            if _given(tls.get(given)) and _given(config.get(flat)):
                problems.append(("tls", CONFLICT, f'"tls.0.{given}": conflicts with {flat}'))
    # A key alone would be dropped: ssl loads a key only with its certificate.
    if any(_given(tls.get(n)) for n in ("key_file", "key_file_data")) and not any(
        _given(v) for v in (tls.get("cert_file"), tls.get("cert_file_data"), config.get("tls_cert"))
    ):
        problems.append(("tls", MISSING, "tls key_file needs cert_file (or tls_cert)"))
    elif _given(config.get("tls_key")) and not any(
        _given(v) for v in (tls.get("cert_file"), tls.get("cert_file_data"), config.get("tls_cert"))
    ):
        problems.append(("tls_key", MISSING, "tls_key needs tls_cert"))
    return problems


class NotConfigured(Exception):
    """A resource was used before ConfigureProvider (never happens with Terraform)."""


class HeadwaterProvider:
    def __init__(self) -> None:
        self.runtime = Runtime()
        self.connection: Connection | None = None
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
            + [schema.Attribute("owner", types.String(), description=OWNER_HELP, optional=True)],
            block_types=[_tls_block()],
        )

    def validate_config(self, diags: Diagnostics, config: dict[str, Any]) -> None:
        if config.get("password") is not None and config.get("user") is None:
            diags.add_error("password needs user", "Set user next to password.", path=["password"])
        for attribute, summary, detail in connection_problems(config):
            diags.add_error(summary, detail, path=[attribute])
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
        values = {
            name: config.get(name) for name, _text in (*SETTINGS, *FLAGS) if name not in INLINE
        }
        tls = _tls_of(config)
        for name, flat, _text in TLS_FILES:
            if _given(tls.get(name)):
                values[flat] = tls[name]
        for attribute, summary, detail in connection_problems(config):
            diags.add_error(summary, detail, path=[attribute])
        if diags.has_errors():
            return
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
        inline = config.get("credential_data")
        env = dict(os.environ)
        if _given(inline):
            # Inline credentials are the block's credentials: NATS_CREDS must not add a file.
            env.pop("NATS_CREDS", None)
        try:
            settings = ConnectionSettings.from_env(env, **values)
        except ValidationError as failure:
            for item in failure.errors():
                loc = [str(part) for part in item["loc"]][:1]
                diags.add_error(
                    "Invalid provider configuration",
                    str(item["msg"]).removeprefix("Value error, "),
                    path=loc or None,
                )
            return
        self.connection = Connection(
            settings,
            credential_data=inline if _given(inline) else None,
            ca_data=tls.get("ca_file_data") or None,
            cert_data=tls.get("cert_file_data") or None,
            key_data=tls.get("key_file_data") or None,
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

    @property
    def settings(self) -> ConnectionSettings | None:
        return self.connection.settings if self.connection is not None else None

    def run(self, body: Callable[[Client], Awaitable[T]]) -> T:
        if self.connection is None:
            raise NotConfigured("the provider is not configured")
        return self.runtime.run(self.connection, body)
