"""headwater-server's configuration: nats-server's flags and config-file syntax -> ``Settings``.

``load(argv)`` is the entry point; see ``loader``. The pieces: ``flags`` (Go flag-package
parsing of nats-server's flag set), ``conffile`` (the config-file parser), ``units`` (sizes
and durations), ``fileopts`` (config keys -> options), ``build`` (flags over file -> Settings).
"""

from headwater.server.config.conffile import Node, parse_file, parse_text, to_plain
from headwater.server.config.errors import ConfigError, Position
from headwater.server.config.loader import LoadResult, load
from headwater.server.config.settings import (
    RANDOM_PORT,
    AuthSettings,
    ClusterSettings,
    JetStreamSettings,
    LogSettings,
    NkeyUser,
    Settings,
    TLSSettings,
    User,
)

__all__ = [
    "RANDOM_PORT",
    "AuthSettings",
    "ClusterSettings",
    "ConfigError",
    "JetStreamSettings",
    "LoadResult",
    "LogSettings",
    "NkeyUser",
    "Node",
    "Position",
    "Settings",
    "TLSSettings",
    "User",
    "load",
    "parse_file",
    "parse_text",
    "to_plain",
]
