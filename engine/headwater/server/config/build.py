"""Command-line flags laid over config-file options, then checked and frozen into ``Settings``.

Precedence is nats-server's: a flag that was given overrides the file. As in nats-server's
``MergeOptions``, a string flag given as ``""`` and a numeric flag given as ``0`` count as not
given (``-p 0`` leaves the file's port), except where nats-server gives the empty value a
meaning: ``--routes ""`` drops the routes and ``--cluster ""`` turns clustering off.

Zero values then fall back to the defaults, as nats-server's ``setBaselineOptions`` does:
``port: 0`` is 4222, ``max_payload: 0`` is 1 MiB, and so on.
"""

from __future__ import annotations

import urllib.parse
from collections import defaultdict
from typing import Any

from headwater.server.config.errors import ConfigError
from headwater.server.config.fileopts import check_port, parse_url, unreadable
from headwater.server.config.flags import ParsedArgs, go_quote
from headwater.server.config.settings import (
    AuthSettings,
    ClusterSettings,
    JetStreamSettings,
    LogSettings,
    Settings,
    TLSSettings,
)

#: Options where 0 means "use the default" (nats-server's baseline rules).
_ZERO_IS_DEFAULT = (
    "port",
    "max_payload",
    "max_control_line",
    "max_pending",
    "max_connections",
    "ping_interval",
    "max_pings_out",
    "write_deadline",
    "lame_duck_duration",
    "lame_duck_grace_period",
    "tls.timeout",
    "auth.timeout",
)

_TLS_FLAGS = ("tls", "tlscert", "tlskey", "tlscacert", "tlsverify")


def _flag_error(args: ParsedArgs, dest: str, message: str) -> ConfigError:
    value = args.values[dest]
    name = args.spelled.get(dest, dest)
    return ConfigError(f"invalid value {go_quote(str(value))} for flag -{name}: {message}")


def apply_flags(opts: dict[str, Any], args: ParsedArgs) -> None:
    """Override ``opts`` (from the config file) with the flags in ``args``."""
    given = args.values

    def text(dest: str, option: str) -> None:
        if given.get(dest):
            opts[option] = given[dest]

    def port(dest: str, option: str) -> None:
        if given.get(dest):
            try:
                opts[option] = check_port(int(given[dest]), "port")
            except ValueError as exc:
                raise _flag_error(args, dest, str(exc)) from None

    def flag(dest: str, *options: str) -> None:
        if dest in given:
            for option in options:
                opts[option] = bool(given[dest])

    text("host", "host")
    port("port", "port")
    text("server_name", "server_name")
    text("client_advertise", "client_advertise")
    if " " in str(given.get("server_name", "")):
        raise _flag_error(args, "server_name", "server name cannot contain spaces")
    text("pid_file", "pid_file")
    port("http_port", "http_port")
    text("log_file", "log.log_file")
    flag("logtime", "log.log_time")
    flag("debug", "log.debug")
    flag("trace", "log.trace")
    flag("trace_verbose", "log.trace")  # -VV: verbose tracing is plain tracing here
    flag("debug_trace", "log.debug", "log.trace")
    flag("debug_trace_verbose", "log.debug", "log.trace")
    flag("jetstream", "jetstream.enabled")
    text("store_dir", "jetstream.store_dir")
    text("user", "auth.user")
    text("password", "auth.password")
    text("token", "auth.token")
    _apply_tls_flags(opts, args)
    _apply_cluster_flags(opts, args)


def _apply_tls_flags(opts: dict[str, Any], args: ParsedArgs) -> None:
    given = args.values
    if given.get("tls") is False:
        # -tls=false turns TLS off whatever the file and the other TLS flags say.
        for key in [key for key in opts if key.startswith("tls.")]:
            del opts[key]
        return
    if not any(name in given for name in _TLS_FLAGS):
        return
    cert, key = given.get("tlscert"), given.get("tlskey")
    if not cert or not key:
        raise ConfigError("TLS from flags needs both --tlscert and --tlskey")
    for dest in ("tlscert", "tlskey", "tlscacert"):
        if given.get(dest) and (problem := unreadable(str(given[dest]))):
            raise _flag_error(args, dest, problem)
    opts["tls.cert_file"] = cert
    opts["tls.key_file"] = key
    opts["tls.ca_file"] = given.get("tlscacert") or None
    opts["tls.verify"] = bool(given.get("tlsverify", False))


def _apply_cluster_flags(opts: dict[str, Any], args: ParsedArgs) -> None:
    given = args.values
    if "cluster" in given:
        url = str(given["cluster"])
        if url == "":
            opts["cluster.port"] = 0  # nats-server: an empty --cluster turns clustering off
        else:
            opts["cluster.host"], opts["cluster.port"] = _cluster_listen(args, url)
    if given.get("cluster_name"):
        if " " in str(given["cluster_name"]):
            raise _flag_error(args, "cluster_name", "cluster name cannot contain spaces")
        opts["cluster.name"] = given["cluster_name"]
    if "routes" in given:
        routes = [part.strip() for part in str(given["routes"]).split(",") if part.strip()]
        for route in routes:
            try:
                parse_url(route, "route")
            except ValueError as exc:
                raise _flag_error(args, "routes", str(exc)) from None
        opts["cluster.routes"] = tuple(routes)
        if routes and not opts.get("cluster.host") and not opts.get("cluster.port"):
            raise ConfigError("solicited routes require cluster capabilities, e.g. --cluster")
    if given.get("cluster_advertise"):
        opts["cluster.advertise"] = str(given["cluster_advertise"])
    if "no_advertise" in given:
        opts["cluster.no_advertise"] = bool(given["no_advertise"])
    if given.get("connect_retries"):
        retries = int(given["connect_retries"])
        if retries < 0:
            raise _flag_error(args, "connect_retries", "must not be negative")
        opts["cluster.connect_retries"] = retries


def _cluster_listen(args: ParsedArgs, url: str) -> tuple[str, int]:
    """Host and port of ``nats://host:port`` from --cluster; port -1 picks a free one."""
    wants_random = url.endswith(":-1")
    try:
        parts = urllib.parse.urlsplit(url[:-3] + ":0" if wants_random else url)
        port = parts.port
    except ValueError as exc:
        raise _flag_error(args, "cluster", str(exc)) from None
    if not parts.scheme or port is None:
        raise _flag_error(args, "cluster", "expected a URL such as nats://0.0.0.0:6222")
    return parts.hostname or "", -1 if wants_random else port


def make_settings(opts: dict[str, Any]) -> Settings:
    """Check the merged options against each other and build ``Settings``."""
    options = {key: value for key, value in opts.items() if value is not None}
    for key in _ZERO_IS_DEFAULT:
        if options.get(key) == 0:
            del options[key]
    defaults = Settings()
    _check_auth(options)
    payload = options.get("max_payload", defaults.max_payload)
    pending = options.get("max_pending", defaults.max_pending)
    if payload > pending:
        raise ConfigError(f"max_payload ({payload}) cannot be higher than max_pending ({pending})")
    options.setdefault("http_host", options.get("host", defaults.http_host))
    if "auth.timeout" not in options and "tls.cert_file" in options:
        # nats-server gives clients the TLS handshake time plus a second to authenticate.
        options["auth.timeout"] = options.get("tls.timeout", TLSSettings().timeout) + 1.0
    groups: dict[str, dict[str, Any]] = defaultdict(dict)
    top: dict[str, Any] = {}
    for key, value in options.items():
        group, _, name = key.rpartition(".")
        (groups[group] if group else top)[name] = value
    return Settings(
        **top,
        auth=AuthSettings(**groups["auth"]),
        tls=TLSSettings(**groups["tls"]),
        jetstream=JetStreamSettings(**groups["jetstream"]),
        log=LogSettings(**groups["log"]),
        cluster=ClusterSettings(**groups["cluster"], tls=TLSSettings(**groups["cluster.tls"])),
    )


def _check_auth(options: dict[str, Any]) -> None:
    user, password = options.get("auth.user"), options.get("auth.password")
    token = options.get("auth.token")
    users = options.get("auth.users") or options.get("auth.nkeys")
    if (user or password) and token:
        raise ConfigError("cannot have both a user/password and a token")
    if users and (user or password):
        raise ConfigError("cannot have both a single user and a users array")
    if users and token:
        raise ConfigError("cannot have both a token and a users array")
    if password and not user:
        # nats-server would quietly run without authentication; refuse instead.
        raise ConfigError("a password was set without a user")
