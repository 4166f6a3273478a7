"""natscli's saved contexts: named connection settings in ``~/.config/nats/context/NAME.json``.

The files are natscli's own (jsm.go's ``natscontext``), so a context made with ``nats context
add`` works here and one saved here works there:

* the directory is ``$XDG_CONFIG_HOME/nats/context``, else ``~/.config/nats/context``;
* ``NAME.json`` holds one JSON object (``url``, ``creds``, ``user``, ``password``, ``token``,
  ``nkey``, ``cert``, ``key``, ``ca``, ``jetstream_domain``, ``tls_first``, ``description``
  and natscli's other fields), written 0600 in a 0700 directory;
* ``../nats/context.txt`` holds the selected context's name; it applies when ``--context``
  is not given.

Fields this CLI cannot honour (a SOCKS proxy, an nsc lookup, a custom API or inbox prefix, a
user JWT) are refused by name when the context is used, never silently dropped: ignoring an
API prefix would send every request somewhere else.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from headwater.cli.errors import CliError

#: Context fields that become connection settings: field -> the environment variable
#: ConnectionSettings.from_env reads for it (None: a TLS setting without one).
CONNECTION_FIELDS: dict[str, str | None] = {
    "url": "NATS_URL",
    "creds": "NATS_CREDS",
    "user": "NATS_USER",
    "password": "NATS_PASSWORD",
    "token": "NATS_TOKEN",
    "nkey": "NATS_NKEY",
    "jetstream_domain": "NATS_JS_DOMAIN",
    "cert": None,
    "key": None,
    "ca": None,
    "tls_first": None,
}
#: Fields that are file paths: natscli expands ``~`` in them.
PATH_FIELDS = ("creds", "nkey", "cert", "key", "ca")
#: Fields that change nothing about the connection.
DESCRIPTIVE_FIELDS = ("name", "description", "color_scheme")
#: Fields natscli writes for every context: the file keeps them (empty) for natscli's sake.
NATSCLI_FIELDS = (
    "description", "url", "socks_proxy", "token", "user", "password", "creds", "nkey", "cert",
    "key", "ca", "nsc", "jetstream_domain", "jetstream_api_prefix", "jetstream_event_prefix",
    "inbox_prefix", "user_jwt", "color_scheme", "tls_first",
)  # fmt: skip
#: Fields whose values are secrets: ``context show`` masks them.
SECRET_FIELDS = ("password", "token")


def config_root(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    parent = env.get("XDG_CONFIG_HOME")
    return Path(parent) / "nats" if parent else Path.home() / ".config" / "nats"


def context_dir() -> Path:
    return config_root() / "context"


def selected_file() -> Path:
    return config_root() / "context.txt"


def quoted(name: str) -> str:
    """A name as natscli's errors show it (Go's %q)."""
    return json.dumps(name)


def check_name(name: str) -> str:
    """natscli's rule: not empty, no ``..``, no path separator."""
    if not name or ".." in name or os.sep in name or "/" in name:
        raise CliError(f"invalid context name {quoted(name)}")
    return name


def path_of(name: str) -> Path:
    return context_dir() / f"{check_name(name)}.json"


def known() -> list[str]:
    """Saved contexts, sorted; empty files do not count (natscli skips them too)."""
    folder = context_dir()
    if not folder.is_dir():
        return []
    return sorted(
        entry.stem
        for entry in folder.iterdir()
        if entry.suffix == ".json" and entry.is_file() and entry.stat().st_size > 0
    )


def selected() -> str | None:
    try:
        name = selected_file().read_text().strip()
    except OSError:
        return None
    return name or None


def load(name: str) -> dict[str, Any]:
    path = path_of(name)
    if not path.is_file():
        raise CliError(f"unknown context {quoted(name)}")
    try:
        data = json.loads(path.read_text())
    except OSError as error:
        raise CliError(f"cannot read context {quoted(name)}: {error.strerror or error}") from None
    except ValueError as error:
        raise CliError(f"context {quoted(name)} ({path}) is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise CliError(f"context {quoted(name)} ({path}) must hold a JSON object")
    return data


def save(name: str, data: Mapping[str, Any]) -> Path:
    """Write atomically, 0600 in a 0700 directory, with natscli's fields all present."""
    path = path_of(name)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    record: dict[str, Any] = {field: "" for field in NATSCLI_FIELDS}
    record["tls_first"] = False
    record.update({key: value for key, value in data.items() if key != "name"})
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(record, indent=2) + "\n")
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def select(name: str) -> None:
    if not path_of(name).is_file():
        raise CliError(f"unknown context {quoted(name)}")
    root = config_root()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    selected_file().write_text(name)
    os.chmod(selected_file(), 0o600)


def remove(name: str) -> None:
    """natscli's rule: the selected context goes only when it is the last one (and with it
    the selection)."""
    path = path_of(name)
    if not path.is_file():
        raise CliError(f"unknown context {quoted(name)}")
    is_selected = selected() == name
    if is_selected and len(known()) > 1:
        raise CliError("cannot remove the current active context")
    path.unlink()
    if is_selected:
        selected_file().unlink(missing_ok=True)


def connection_values(name: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """The context's connection fields that are set, paths with ``~`` expanded; an error
    naming any set field this CLI cannot honour."""
    unsupported = [
        field
        for field, value in data.items()
        if value and field not in CONNECTION_FIELDS and field not in DESCRIPTIVE_FIELDS
    ]
    if unsupported:
        fields = ", ".join(sorted(unsupported))
        raise CliError(f"context {quoted(name)} sets {fields}, which headwater does not support")
    values = {field: data[field] for field in CONNECTION_FIELDS if data.get(field)}
    for field in PATH_FIELDS:
        if field in values:
            values[field] = os.path.expanduser(str(values[field]))
    return values
