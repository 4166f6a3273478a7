"""Config-file keys -> option values, with nats-server's names, types and checks.

The result is a flat dict keyed by ``Settings`` field paths (``"port"``, ``"auth.token"``,
``"jetstream.store_dir"`` ...); ``build`` lays command-line flags over it and makes the
frozen ``Settings``.

Keys are matched case-insensitively, as nats-server does. Every key nats-server 2.15 knows
falls in one of three groups (the key lists were checked against ``nats-server -t``):

* handled here;
* known but without effect in headwater-server (websocket, leafnodes, syslog, ...): accepted,
  and a notice says it does nothing, so nats-server configs still load;
* known, but ignoring it would let in clients the operator meant to keep out, send messages
  elsewhere or store data unencrypted (accounts, permissions, operator/JWT mode, subject
  mappings, encryption at rest, ...): refused with an error naming the key.

Any other key is an error (``unknown field``), as in nats-server, unless some ``$KEY``
refers to it: then it is a variable definition.

Values of the wrong type are errors naming the key's position. A few old forms give
nats-server's warnings (an integer ``ping_interval``, an empty file); warnings do not stop
the server, but they fail ``-t``, as in nats-server.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import urllib.parse
from collections.abc import Callable
from typing import Any

from headwater.server.config.conffile import Node
from headwater.server.config.errors import ConfigError, Position, error_at
from headwater.server.config.keysets import (
    AUTH_REFUSED,
    CLUSTER_IGNORED,
    CLUSTER_REFUSED,
    JS_IGNORED,
    JS_REFUSED,
    TLS_IGNORED,
    TLS_REFUSED,
    TOP_IGNORED,
    TOP_REFUSED,
    USER_REFUSED,
)
from headwater.server.config.nkey import is_public_user_key
from headwater.server.config.settings import SNAPSHOT_FORMATS, NkeyUser, User
from headwater.server.config.units import parse_duration, parse_storage_size

INT32_MAX = 2**31 - 1

Handler = Callable[[str, Node], None]


def describe(value: Any) -> str:
    """How a value reads in a type error: ``string 'abc'``, ``integer 5``, ``a block``."""
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"float {value}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, dict):
        return "a block"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dt.datetime):
        return "a datetime"
    return type(value).__name__


def split_host_port(text: str) -> tuple[str, str]:
    """Go's ``net.SplitHostPort``: ``host:port``, ``[v6]:port``, ``:port``."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or text[end + 1 : end + 2] != ":":
            raise ValueError(f"could not parse address string {text!r}")
        return text[1:end], text[end + 2 :]
    if text.count(":") != 1:
        raise ValueError(f"could not parse address string {text!r}")
    host, port = text.split(":")
    return host, port


def check_port(value: int, what: str) -> int:
    if not -1 <= value <= 65535:
        raise ValueError(f"{what} {value} is out of range (-1 to 65535; -1 picks a free port)")
    return value


def parse_url(text: str, what: str) -> str:
    """A URL with a scheme and host, as routes and cluster listen need."""
    try:
        parts = urllib.parse.urlsplit(text)
        _ = parts.port  # raises for a non-numeric port
    except ValueError as exc:
        raise ValueError(f"invalid {what} URL {text!r}: {exc}") from None
    if not parts.scheme or not parts.hostname:
        raise ValueError(f"invalid {what} URL {text!r}: expected scheme://host:port")
    return text


class FileReader:
    """Reads a parsed config tree into ``opts``, ``warnings`` and ``notices``."""

    def __init__(self) -> None:
        self.opts: dict[str, Any] = {}
        self.warnings: list[str] = []
        """nats-server's warnings: printed at start, fatal for ``-t``."""
        self.notices: list[str] = []
        """Keys accepted without effect here."""
        self._store_dir_pos: Position | None = None
        self._top: dict[str, Handler] = {
            "listen": self._listen,
            "port": lambda k, n: self._set("port", self._checked_port(k, n, self._int(k, n))),
            "server_name": self._server_name,
            "client_advertise": lambda k, n: self._set("client_advertise", self._str(k, n)),
            "server_tags": self._server_tags,
            "host": lambda k, n: self._set("host", self._str(k, n)),
            "net": lambda k, n: self._set("host", self._str(k, n)),
            "debug": lambda k, n: self._set("log.debug", self._bool(k, n)),
            "trace": lambda k, n: self._set("log.trace", self._bool(k, n)),
            "trace_verbose": lambda k, n: self._set("log.trace", self._bool(k, n)),
            "logtime": lambda k, n: self._set("log.log_time", self._bool(k, n)),
            "logfile": lambda k, n: self._set("log.log_file", self._str(k, n)),
            "log_file": lambda k, n: self._set("log.log_file", self._str(k, n)),
            "pidfile": lambda k, n: self._set("pid_file", self._str(k, n)),
            "pid_file": lambda k, n: self._set("pid_file", self._str(k, n)),
            "http": self._http,
            "http_port": self._http_port,
            "monitor_port": self._http_port,
            "max_control_line": lambda k, n: self._set("max_control_line", self._int32(k, n)),
            "max_payload": lambda k, n: self._set("max_payload", self._int32(k, n)),
            "max_pending": lambda k, n: self._set("max_pending", self._count(k, n)),
            "max_connections": lambda k, n: self._set("max_connections", self._count(k, n)),
            "max_conn": lambda k, n: self._set("max_connections", self._count(k, n)),
            "ping_interval": lambda k, n: self._set("ping_interval", self._interval(k, n)),
            "ping_max": lambda k, n: self._set("max_pings_out", self._count(k, n)),
            "write_deadline": lambda k, n: self._set("write_deadline", self._interval(k, n)),
            "lame_duck_duration": self._lame_duck_duration,
            "lame_duck_grace_period": self._lame_duck_grace_period,
            "store_dir": self._store_dir,
            "storedir": self._store_dir,
            "authorization": self._authorization,
            "tls": self._tls,
            "jetstream": self._jetstream,
            "cluster": self._cluster,
        }

    def read(self, root: dict[str, Node], path: str) -> None:
        if not root:
            self.warnings.append(f"{path}: config has no values or is empty")
        self._dispatch(root, "", self._top, TOP_IGNORED, TOP_REFUSED)

    # -- plumbing ------------------------------------------------------------------------

    def _set(self, name: str, value: Any) -> None:
        self.opts[name] = value

    def _dispatch(
        self,
        block: dict[str, Node],
        prefix: str,
        handlers: dict[str, Handler],
        ignored: frozenset[str],
        refused: dict[str, str],
    ) -> None:
        for key, node in block.items():
            name = key.lower()
            where = node.key_pos or node.pos
            if name in handlers:
                handlers[name](prefix + key, node)
            elif name in refused:
                raise error_at(
                    where,
                    f"'{prefix}{key}' ({refused[name]}) is not supported by headwater-server",
                )
            elif name in ignored:
                self.notices.append(
                    f"{where}: '{prefix}{key}' has no effect in headwater-server "
                    "(accepted for nats-server compatibility)"
                )
            elif not node.used_as_variable:
                raise error_at(where, f'unknown field "{prefix}{key}"')

    def _type_error(self, key: str, node: Node, expected: str) -> ConfigError:
        return error_at(node.pos, f"{key}: expected {expected}, got {describe(node.value)}")

    def _value_error(self, key: str, node: Node, message: str) -> ConfigError:
        return error_at(node.pos, f"{key}: {message}")

    def _int(self, key: str, node: Node) -> int:
        if isinstance(node.value, bool) or not isinstance(node.value, int):
            raise self._type_error(key, node, "an integer")
        return node.value

    def _count(self, key: str, node: Node) -> int:
        value = self._int(key, node)
        if value < 0:
            raise self._value_error(key, node, f"must not be negative, got {value}")
        return value

    def _int32(self, key: str, node: Node) -> int:
        value = self._count(key, node)
        if value > INT32_MAX:
            raise self._value_error(key, node, f"value {value} is too big (at most {INT32_MAX})")
        return value

    def _str(self, key: str, node: Node) -> str:
        if not isinstance(node.value, str):
            raise self._type_error(key, node, "a string")
        return node.value

    def _bool(self, key: str, node: Node) -> bool:
        if not isinstance(node.value, bool):
            raise self._type_error(key, node, "a boolean (true/false, yes/no, on/off)")
        return node.value

    def _block(self, key: str, node: Node) -> dict[str, Node]:
        if not isinstance(node.value, dict):
            raise self._type_error(key, node, "a block { ... }")
        return node.value

    def _duration(self, key: str, node: Node) -> float:
        """A Go duration string, in seconds."""
        try:
            return parse_duration(self._str(key, node))
        except ValueError as exc:
            raise self._value_error(key, node, str(exc)) from None

    def _interval(self, key: str, node: Node) -> float:
        """A positive duration; a bare integer counts seconds, with nats-server's warning."""
        if isinstance(node.value, int) and not isinstance(node.value, bool):
            self.warnings.append(f'{node.pos}: {key} should be a duration such as "30s"')
            seconds = float(node.value)
        elif isinstance(node.value, str):
            seconds = self._duration(key, node)
        else:
            raise self._type_error(key, node, 'a duration such as "30s"')
        if seconds < 0:
            raise self._value_error(key, node, "must not be negative")
        return seconds

    def _seconds(self, key: str, node: Node) -> float:
        """Seconds as a number, or a duration string (timeouts)."""
        if isinstance(node.value, int | float) and not isinstance(node.value, bool):
            seconds = float(node.value)
        elif isinstance(node.value, str):
            seconds = self._duration(key, node)
        else:
            raise self._type_error(key, node, 'seconds or a duration such as "2s"')
        if seconds < 0:
            raise self._value_error(key, node, "must not be negative")
        return seconds

    def _host_port(self, key: str, node: Node) -> tuple[str, int]:
        """``listen``-style value: a port, or ``host:port``; host ``""`` means unchanged."""
        if isinstance(node.value, int) and not isinstance(node.value, bool):
            return "", node.value
        if not isinstance(node.value, str):
            raise self._type_error(key, node, "a port or host:port")
        try:
            host, port = split_host_port(node.value)
        except ValueError as exc:
            raise self._value_error(key, node, str(exc)) from None
        if not re.fullmatch(r"[+-]?[0-9]+", port):
            raise self._value_error(key, node, f"could not parse port {port!r}")
        return host, int(port)

    # -- top-level keys ------------------------------------------------------------------

    def _listen(self, key: str, node: Node) -> None:
        host, port = self._host_port(key, node)
        if host:
            self.opts["host"] = host
        self.opts["port"] = self._checked_port(key, node, port)

    def _checked_port(self, key: str, node: Node, port: int) -> int:
        try:
            return check_port(port, "port")
        except ValueError as exc:
            raise self._value_error(key, node, str(exc)) from None

    def _server_name(self, key: str, node: Node) -> None:
        name = self._str(key, node)
        if " " in name:
            raise self._value_error(key, node, "server name cannot contain spaces")
        self.opts["server_name"] = name

    def _http(self, key: str, node: Node) -> None:
        host, port = self._host_port(key, node)
        if host:
            self.opts["http_host"] = host
        self.opts["http_port"] = self._checked_port(key, node, port)

    def _http_port(self, key: str, node: Node) -> None:
        self.opts["http_port"] = self._checked_port(key, node, self._int(key, node))

    def _lame_duck_duration(self, key: str, node: Node) -> None:
        seconds = self._duration(key, node)
        if seconds < 30:
            raise self._value_error(key, node, "must be at least 30 seconds")
        self.opts["lame_duck_duration"] = seconds

    def _lame_duck_grace_period(self, key: str, node: Node) -> None:
        seconds = self._duration(key, node)
        if seconds < 0:
            raise self._value_error(key, node, "must not be negative")
        self.opts["lame_duck_grace_period"] = seconds

    def _store_dir(self, key: str, node: Node) -> None:
        if self._store_dir_pos is not None:
            raise error_at(
                node.key_pos or node.pos,
                f"duplicate 'store_dir' configuration (first at {self._store_dir_pos})",
            )
        self._store_dir_pos = node.key_pos or node.pos
        self.opts["jetstream.store_dir"] = self._str(key, node)

    # -- blocks --------------------------------------------------------------------------

    def _authorization(self, key: str, node: Node) -> None:
        block = self._block(key, node)
        handlers: dict[str, Handler] = {
            "user": lambda k, n: self._set("auth.user", self._str(k, n)),
            "username": lambda k, n: self._set("auth.user", self._str(k, n)),
            "pass": lambda k, n: self._set("auth.password", self._str(k, n)),
            "password": lambda k, n: self._set("auth.password", self._str(k, n)),
            "token": lambda k, n: self._set("auth.token", self._str(k, n)),
            "timeout": lambda k, n: self._set("auth.timeout", self._seconds(k, n)),
            "users": self._users,
        }
        self._dispatch(block, f"{key}.", handlers, frozenset(), AUTH_REFUSED)
        has_user = "auth.user" in self.opts or "auth.password" in self.opts
        if has_user and "auth.token" in self.opts:
            raise error_at(node.pos, f"{key}: cannot have both a user/password and a token")
        if "auth.users" in self.opts and has_user:
            raise error_at(node.pos, f"{key}: cannot have both a single user and a users array")
        if "auth.users" in self.opts and "auth.token" in self.opts:
            raise error_at(node.pos, f"{key}: cannot have both a token and a users array")

    def _users(self, key: str, node: Node) -> None:
        if not isinstance(node.value, list):
            raise self._type_error(key, node, "an array of users")
        users: list[User] = []
        nkeys: list[NkeyUser] = []
        for index, entry in enumerate(node.value):
            where = f"{key}[{index}]"
            fields: dict[str, str] = {}

            def setter(field: str, fields: dict[str, str] = fields) -> Handler:
                return lambda k, n: fields.__setitem__(field, self._str(k, n))

            handlers = {
                "user": setter("user"),
                "username": setter("user"),
                "pass": setter("password"),
                "password": setter("password"),
                "nkey": setter("nkey"),
            }
            self._dispatch(
                self._block(where, entry), f"{where}.", handlers, frozenset(), USER_REFUSED
            )
            if "nkey" in fields:
                nkeys.append(self._nkey_user(where, entry, fields, nkeys))
                continue
            if not fields.get("user"):
                raise error_at(entry.pos, f"{where}: a user entry needs a user or an nkey")
            if any(existing.user == fields["user"] for existing in users):
                raise error_at(entry.pos, f"{where}: duplicate user {fields['user']!r}")
            users.append(User(fields["user"], fields.get("password", "")))
        self.opts["auth.users"] = tuple(users)
        self.opts["auth.nkeys"] = tuple(nkeys)

    def _nkey_user(
        self, where: str, entry: Node, fields: dict[str, str], seen: list[NkeyUser]
    ) -> NkeyUser:
        """An entry with ``nkey``, checked as nats-server checks it."""
        public = fields["nkey"]
        if not is_public_user_key(public):
            raise error_at(
                entry.pos,
                f"{where}.nkey: not a valid public nkey for a user: {public!r} "
                "(expected the 56-character public key starting with 'U', not a seed)",
            )
        if "user" in fields or "password" in fields:
            raise error_at(entry.pos, f"{where}: nkey users do not take usernames or passwords")
        if any(existing.nkey == public for existing in seen):
            raise error_at(entry.pos, f"{where}: duplicate nkey {public!r}")
        return NkeyUser(public)

    def _tls(self, key: str, node: Node, prefix: str = "tls") -> None:
        """A ``tls {}`` block into ``<prefix>.*`` options: the client one, or the routes'
        (``cluster { tls {} }``, where TLS-first is how routes always start)."""
        block = self._block(key, node)
        handlers: dict[str, Handler] = {
            name: (lambda k, n, name=name: self._set(f"{prefix}.{name}", self._str(k, n)))
            for name in ("cert_file", "key_file", "ca_file")
        }
        handlers["verify"] = lambda k, n: self._set(f"{prefix}.verify", self._bool(k, n))
        handlers["timeout"] = lambda k, n: self._set(f"{prefix}.timeout", self._seconds(k, n))
        if prefix == "tls":
            for name in ("handshake_first", "first", "immediate"):
                handlers[name] = self._handshake_first
        self._dispatch(block, f"{key}.", handlers, TLS_IGNORED, TLS_REFUSED)
        for name in ("cert_file", "key_file"):
            if f"{prefix}.{name}" not in self.opts:
                # nats-server would start without a certificate and fail every handshake;
                # failing here says why.
                raise error_at(node.pos, f"{key}: {name} is required to serve TLS")
        for name in ("cert_file", "key_file", "ca_file"):
            path = self.opts.get(f"{prefix}.{name}")
            if path is not None and (problem := unreadable(path)):
                raise error_at(block[_key_for(block, name)].pos, f"{key}.{name}: {problem}")

    def _handshake_first(self, key: str, node: Node) -> None:
        """``true``/``false`` (or ``"on"``/``"off"``). nats-server's fallback forms (``"auto"``,
        or a delay such as ``"300ms"`` after which a plaintext INFO goes out after all) are
        refused: this server either requires TLS-first or does not offer it."""
        value = node.value
        if isinstance(value, bool):
            self.opts["tls.handshake_first"] = value
            return
        if not isinstance(value, str):
            raise self._type_error(key, node, "a boolean or a string")
        word = value.lower()
        if word in ("true", "on"):
            self.opts["tls.handshake_first"] = True
        elif word in ("false", "off"):
            self.opts["tls.handshake_first"] = False
        elif word in ("auto", "auto_fallback") or _is_duration(value):
            raise self._value_error(
                key,
                node,
                f"{value!r} (TLS-first with a fallback to plaintext INFO) is not supported by "
                "headwater-server; use true or false",
            )
        else:
            raise self._value_error(key, node, f"value {value!r} is invalid")

    def _jetstream(self, key: str, node: Node) -> None:
        value = node.value
        if isinstance(value, bool):
            self.opts["jetstream.enabled"] = value
            return
        if isinstance(value, str):
            word = value.lower()
            if word not in ("enabled", "enable", "disabled", "disable"):
                raise self._value_error(
                    key, node, f"expected 'enabled' or 'disabled', got {value!r}"
                )
            self.opts["jetstream.enabled"] = word.startswith("enable")
            return
        if not isinstance(value, dict):
            raise self._type_error(key, node, "a block, a boolean or 'enabled'/'disabled'")
        self.opts["jetstream.enabled"] = True
        handlers: dict[str, Handler] = {
            "enabled": lambda k, n: self._set("jetstream.enabled", self._bool(k, n)),
            "enable": lambda k, n: self._set("jetstream.enabled", self._bool(k, n)),
            "store_dir": self._store_dir,
            "storedir": self._store_dir,
            "store": self._store_dir,
            "domain": lambda k, n: self._set("jetstream.domain", self._str(k, n)),
            "sync_interval": self._sync_interval,
            "sync": self._sync_interval,
            "snapshot_format": self._snapshot_format,
            "request_queue_limit": lambda k, n: self._set(
                "jetstream.request_queue_limit", self._int(k, n)
            ),
        }
        for name in ("max_memory_store", "max_mem_store", "max_mem"):
            handlers[name] = lambda k, n: self._set("jetstream.max_memory_store", self._size(k, n))
        for name in ("max_file_store", "max_file"):
            handlers[name] = lambda k, n: self._set("jetstream.max_file_store", self._size(k, n))
        self._dispatch(value, f"{key}.", handlers, JS_IGNORED, JS_REFUSED)

    def _size(self, key: str, node: Node) -> int:
        """A JetStream limit: an integer (suffixes allowed) or a string like ``"1G"``."""
        value = node.value
        if isinstance(value, str):
            try:
                return parse_storage_size(value)
            except ValueError as exc:
                raise self._value_error(key, node, str(exc)) from None
        return self._int(key, node)

    def _snapshot_format(self, key: str, node: Node) -> None:
        value = self._str(key, node).lower()
        if value not in SNAPSHOT_FORMATS:
            raise self._value_error(
                key, node, f"expected one of {', '.join(SNAPSHOT_FORMATS)}, got {value!r}"
            )
        self.opts["jetstream.snapshot_format"] = value

    def _sync_interval(self, key: str, node: Node) -> None:
        if isinstance(node.value, str) and node.value.lower() == "always":
            self.opts["jetstream.sync_interval"] = -1.0
        else:
            self.opts["jetstream.sync_interval"] = self._interval(key, node)

    def _cluster(self, key: str, node: Node) -> None:
        block = self._block(key, node)
        handlers: dict[str, Handler] = {
            "name": self._cluster_name,
            "listen": self._cluster_listen,
            "host": lambda k, n: self._set("cluster.host", self._str(k, n)),
            "net": lambda k, n: self._set("cluster.host", self._str(k, n)),
            "port": lambda k, n: self._set(
                "cluster.port", self._checked_port(k, n, self._int(k, n))
            ),
            "routes": self._routes,
            "no_advertise": lambda k, n: self._set("cluster.no_advertise", self._bool(k, n)),
            "connect_retries": lambda k, n: self._set("cluster.connect_retries", self._count(k, n)),
            "advertise": lambda k, n: self._set("cluster.advertise", self._str(k, n)),
            "cluster_advertise": lambda k, n: self._set("cluster.advertise", self._str(k, n)),
            "authorization": self._cluster_authorization,
            "ping_interval": lambda k, n: self._set("cluster.ping_interval", self._interval(k, n)),
            "ping_max": lambda k, n: self._set("cluster.max_pings_out", self._count(k, n)),
            "pool_size": self._pool_size,
            "compression": self._route_compression,
            "tls": lambda k, n: self._tls(k, n, prefix="cluster.tls"),
            "etcd": self._etcd_urls,
        }
        self._dispatch(block, f"{key}.", handlers, CLUSTER_IGNORED, CLUSTER_REFUSED)
        self._check_etcd_tls(key, node)

    def _check_etcd_tls(self, key: str, node: Node) -> None:
        """etcd follows the cluster's TLS (docs/CLUSTERING.md, "etcd"): an external etcd is
        dialled with the cluster's TLS files, so https URLs need them, and a cluster with TLS
        keeps its metadata off plaintext too. Checked after the whole block: either key may
        come first."""
        urls = self.opts.get("cluster.etcd") or ()
        if not urls:
            return
        block = self._block(key, node)
        etcd_keys = [k for k in block if k.lower() == "etcd"]
        pos = block[etcd_keys[-1]].pos if etcd_keys else node.pos
        has_tls = "cluster.tls.cert_file" in self.opts
        for url in urls:
            https = url.lower().startswith("https://")
            if https and not has_tls:
                raise error_at(
                    pos,
                    f"{key}.etcd: https etcd URLs need the cluster's TLS files "
                    "(cluster { tls { cert_file, key_file, ca_file } })",
                )
            if not https and has_tls:
                raise error_at(
                    pos,
                    f"{key}.etcd: the cluster has TLS but etcd URL {url!r} is plain http; "
                    "use https:// (etcd is dialled with the cluster's TLS files)",
                )

    def _cluster_authorization(self, key: str, node: Node) -> None:
        block = self._block(key, node)
        handlers: dict[str, Handler] = {
            "user": lambda k, n: self._set("cluster.user", self._str(k, n)),
            "username": lambda k, n: self._set("cluster.user", self._str(k, n)),
            "password": lambda k, n: self._set("cluster.password", self._str(k, n)),
            "timeout": lambda k, n: self._set("cluster.auth_timeout", self._seconds(k, n)),
        }
        refused = {
            "token": "route authentication by token",
            "users": "several route users",
            "permissions": "route permissions",
        }
        self._dispatch(block, f"{key}.", handlers, frozenset(), refused)

    def _server_tags(self, key: str, node: Node) -> None:
        """``server_tags: [az:1, ssd]`` or ``"az:1, ssd"``: what stream placement tags match."""
        if isinstance(node.value, str):
            tags = [t.strip() for t in node.value.split(",")]
        elif isinstance(node.value, list):
            tags = [self._str(f"{key}[{i}]", item).strip() for i, item in enumerate(node.value)]
        else:
            raise self._type_error(key, node, "an array of tags")
        self.opts["server_tags"] = tuple(t for t in tags if t)

    def _etcd_urls(self, key: str, node: Node) -> None:
        """``cluster { etcd: [http://host:2379] }``: use this etcd instead of running one
        (``https://`` with the cluster's TLS files, checked in :meth:`_check_etcd_tls`)."""
        if not isinstance(node.value, list) or not node.value:
            raise self._type_error(key, node, "a non-empty array of etcd URLs")
        urls = []
        for index, item in enumerate(node.value):
            text = self._str(f"{key}[{index}]", item)
            try:
                parse_url(text, "etcd")
                parts = urllib.parse.urlsplit(text)
                if parts.scheme.lower() not in ("http", "https") or parts.port is None:
                    raise ValueError(
                        f"invalid etcd URL {text!r}: expected http://host:port or https://host:port"
                    )
            except ValueError as exc:
                raise self._value_error(f"{key}[{index}]", item, str(exc)) from None
            urls.append(text)
        self.opts["cluster.etcd"] = tuple(urls)

    def _pool_size(self, key: str, node: Node) -> None:
        # Headwater routes one connection per server pair: what nats-server does with
        # pool_size -1, and with a peer that does not pool (docs/CLUSTERING.md).
        value = self._int(key, node)
        if value > 1:
            raise self._value_error(
                key,
                node,
                f"route pooling is not supported by headwater-server (got {value}); "
                "remove it or set -1",
            )

    def _route_compression(self, key: str, node: Node) -> None:
        value = node.value
        if value is False or (isinstance(value, str) and value.lower() in ("off", "disabled")):
            return
        raise self._value_error(
            key,
            node,
            'route compression is not supported by headwater-server; remove it or set "off"',
        )

    def _cluster_name(self, key: str, node: Node) -> None:
        name = self._str(key, node)
        if " " in name:
            raise self._value_error(key, node, "cluster name cannot contain spaces")
        self.opts["cluster.name"] = name

    def _cluster_listen(self, key: str, node: Node) -> None:
        host, port = self._host_port(key, node)
        if host:
            self.opts["cluster.host"] = host
        self.opts["cluster.port"] = self._checked_port(key, node, port)

    def _routes(self, key: str, node: Node) -> None:
        if not isinstance(node.value, list):
            raise self._type_error(key, node, "an array of route URLs")
        routes = []
        for index, item in enumerate(node.value):
            text = self._str(f"{key}[{index}]", item)
            try:
                routes.append(parse_url(text, "route"))
            except ValueError as exc:
                raise self._value_error(f"{key}[{index}]", item, str(exc)) from None
        self.opts["cluster.routes"] = tuple(routes)


def _is_duration(text: str) -> bool:
    try:
        parse_duration(text)
    except ValueError:
        return False
    return True


def _key_for(block: dict[str, Node], name: str) -> str:
    """The key as spelled in the file for a case-insensitive ``name``."""
    return next(key for key in reversed(block) if key.lower() == name)


def unreadable(path: str) -> str | None:
    """Why ``path`` cannot be read as a file, or None if it can."""
    if not os.path.exists(path):
        return f"file {path!r} does not exist"
    if not os.path.isfile(path):
        return f"{path!r} is not a file"
    if not os.access(path, os.R_OK):
        return f"file {path!r} is not readable"
    return None
