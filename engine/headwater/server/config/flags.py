"""nats-server's command-line flags, parsed the way Go's ``flag`` package parses them.

Go's rules, which scripts written for nats-server depend on:

* ``-p 4222``, ``-p=4222``, ``--port 4222`` and ``--port=4222`` are all the same flag;
* a boolean flag takes no separate argument: ``-js`` or ``-js=false`` (``-js false`` would
  leave ``false`` as a positional argument);
* a non-boolean flag takes the next argument whatever it looks like (``-p -1``);
* parsing stops at the first non-flag argument, or after ``--``;
* errors read ``flag provided but not defined: -foo``, ``invalid value "abc" for flag -p:
  parse error``, ``flag needs an argument: -p``, ``bad flag syntax: ---p``.

The flag set is nats-server's (``server/opts.go``). A few of its flags ask for things
headwater-server does not have: those that would change who may connect or where output
goes are refused with an error (``support="refused"``); cosmetic ones are accepted and
reported as having no effect (``support="ignored"``).
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass, field
from typing import Literal

from headwater.server.config.errors import ConfigError

FlagKind = Literal["bool", "int", "str"]
Support = Literal["yes", "ignored", "refused"]


@dataclass(frozen=True)
class FlagSpec:
    names: tuple[str, ...]
    """Spellings without dashes; each works with one or two dashes."""
    kind: FlagKind
    dest: str
    """Key in ``ParsedArgs.values``."""
    help: str
    section: str
    metavar: str = ""
    support: Support = "yes"


def _f(
    names: str,
    kind: FlagKind,
    dest: str,
    help_text: str,
    section: str,
    metavar: str = "",
    support: Support = "yes",
) -> FlagSpec:
    return FlagSpec(tuple(names.split()), kind, dest, help_text, section, metavar, support)


_SERVER, _LOG, _JS, _AUTH, _TLS, _CLUSTER, _COMMON = (
    "Server",
    "Logging",
    "JetStream",
    "Authorization",
    "TLS",
    "Cluster",
    "Common",
)

FLAGS: tuple[FlagSpec, ...] = (
    _f("a addr net", "str", "host", "Address to listen on (default: 0.0.0.0)", _SERVER, "host"),
    _f(
        "p port", "int", "port", "Client port; -1 picks a free one (default: 4222)", _SERVER, "port"
    ),
    _f(
        "n name server_name",
        "str",
        "server_name",
        "Server name (default: the server id)",
        _SERVER,
        "name",
    ),
    _f("P pid", "str", "pid_file", "Write the process id to this file", _SERVER, "file"),
    _f(
        "m http_port",
        "int",
        "http_port",
        "Monitoring HTTP port; -1 picks a free one",
        _SERVER,
        "port",
    ),
    _f("c config", "str", "config", "Configuration file", _SERVER, "file"),
    _f("t", "bool", "test_config", "Check the configuration file and exit", _SERVER),
    _f("l log", "str", "log_file", "Log to this file instead of stderr", _LOG, "file"),
    _f("T logtime", "bool", "logtime", "Timestamp log lines (default: true)", _LOG),
    _f("D debug", "bool", "debug", "Log debug messages", _LOG),
    _f("V trace", "bool", "trace", "Log every protocol message", _LOG),
    _f("VV", "bool", "trace_verbose", "Same as -V here", _LOG),
    _f("DV", "bool", "debug_trace", "Same as -D -V", _LOG),
    _f("DVV", "bool", "debug_trace_verbose", "Same as -D -V", _LOG),
    _f("js jetstream", "bool", "jetstream", "Enable JetStream", _JS),
    _f("sd store_dir", "str", "store_dir", "JetStream storage directory", _JS, "dir"),
    _f("user", "str", "user", "User name clients must give", _AUTH, "user"),
    _f("pass", "str", "password", "Password clients must give", _AUTH, "password"),
    _f("auth", "str", "token", "Token clients must give", _AUTH, "token"),
    _f("tls", "bool", "tls", "Serve clients over TLS (-tls=false turns TLS off)", _TLS),
    _f("tlscert", "str", "tlscert", "Server certificate file", _TLS, "file"),
    _f("tlskey", "str", "tlskey", "Server private key file", _TLS, "file"),
    _f("tlsverify", "bool", "tlsverify", "Serve over TLS and require client certificates", _TLS),
    _f("tlscacert", "str", "tlscacert", "CA certificates for client verification", _TLS, "file"),
    _f(
        "client_advertise",
        "str",
        "client_advertise",
        "host:port other servers tell clients for this one",
        _CLUSTER,
        "host:port",
    ),
    _f("routes", "str", "routes", "Comma-separated route URLs to connect to", _CLUSTER, "urls"),
    _f("cluster cluster_listen", "str", "cluster", "URL to accept routes on", _CLUSTER, "url"),
    _f("cluster_name", "str", "cluster_name", "Cluster name", _CLUSTER, "name"),
    _f("no_advertise", "bool", "no_advertise", "Do not tell clients about other servers", _CLUSTER),
    _f(
        "cluster_advertise",
        "str",
        "cluster_advertise",
        "host:port other servers dial for this one",
        _CLUSTER,
        "host:port",
    ),
    _f(
        "connect_retries",
        "int",
        "connect_retries",
        "Connect attempts for implicit routes",
        _CLUSTER,
        "n",
    ),
    _f("h help", "bool", "help", "Show this help", _COMMON),
    _f("v version", "bool", "version", "Show the version", _COMMON),
    _f("help_tls", "bool", "help_tls", "Show help on TLS configuration", _COMMON),
    # nats-server flags for features headwater-server does not have.
    _f("ms https_port", "int", "https_port", "", _SERVER, "port", "ignored"),
    _f("sl signal", "str", "signal", "signalling a running server", _SERVER, "signal", "refused"),
    _f("ports_file_dir", "str", "ports_file_dir", "ports files", _SERVER, "dir", "refused"),
    _f("logtime_utc", "bool", "logtime_utc", "", _LOG, "", "ignored"),
    _f("s syslog", "bool", "syslog", "", _LOG, "", "ignored"),
    _f("r remote_syslog", "str", "remote_syslog", "", _LOG, "addr", "ignored"),
    _f("log_size_limit", "int", "log_size_limit", "", _LOG, "bytes", "ignored"),
    _f("max_traced_msg_len", "int", "max_traced_msg_len", "", _LOG, "len", "ignored"),
    _f("profile", "int", "profile", "", _COMMON, "port", "ignored"),
)

_BY_NAME: dict[str, FlagSpec] = {name: spec for spec in FLAGS for name in spec.names}


@dataclass(frozen=True)
class ParsedArgs:
    values: dict[str, bool | int | str] = field(default_factory=dict)
    """``dest`` -> value for each flag given (the last one wins when repeated)."""
    given: tuple[str, ...] = ()
    """Flag names as typed (without dashes), in order."""
    positionals: tuple[str, ...] = ()
    """Arguments after the flags."""
    spelled: dict[str, str] = field(default_factory=dict)
    """``dest`` -> the name it was last given as, for error messages (``-p`` vs ``-port``)."""

    def specs_given(self, support: Support) -> list[tuple[str, FlagSpec]]:
        """(name as typed, spec) of the given flags with this kind of support."""
        return [(name, _BY_NAME[name]) for name in self.given if _BY_NAME[name].support == support]


def go_quote(text: str) -> str:
    """A string quoted roughly as Go's ``%q`` does, for error messages."""
    return json.dumps(text, ensure_ascii=False)


_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_INT_BODY = re.compile(r"[0-9a-fA-F_]+")


def parse_go_bool(text: str) -> bool:
    """``strconv.ParseBool``; ``ValueError("parse error")`` otherwise."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError("parse error")


def parse_go_int(text: str) -> int:
    """``strconv.ParseInt(text, 0, 64)``: sign, 0x/0o/0b prefixes, leading-0 octal, ``_``."""
    body = text[1:] if text[:1] in ("+", "-") else text
    base = 10
    if len(body) > 1 and body[0] == "0":
        prefix = body[1].lower()
        base = {"x": 16, "o": 8, "b": 2}.get(prefix, 8)
        body = body[2:] if prefix in "xob" else body[1:]
    if not _INT_BODY.fullmatch(body) or body.startswith("_") or body.endswith("_"):
        raise ValueError("parse error")
    try:
        value = int(body, base)
    except ValueError:
        raise ValueError("parse error") from None
    value = -value if text.startswith("-") else value
    if not -(2**63) <= value < 2**63:
        raise ValueError("value out of range")
    return value


def parse_flags(argv: list[str]) -> ParsedArgs:
    """Parse ``argv`` (without the program name); raises ``ConfigError`` like Go's flag.Parse."""
    values: dict[str, bool | int | str] = {}
    given: list[str] = []
    spelled: dict[str, str] = {}
    rest = list(argv)
    while rest:
        arg = rest[0]
        if len(arg) < 2 or arg[0] != "-":
            break
        dashes = 2 if arg[1] == "-" else 1
        if arg == "--":
            rest.pop(0)
            break
        name = arg[dashes:]
        if name == "" or name[0] in "-=":
            raise ConfigError(f"bad flag syntax: {arg}")
        rest.pop(0)
        has_value, value = False, ""
        if "=" in name:
            name, value = name.split("=", 1)
            has_value = True
        spec = _BY_NAME.get(name)
        if spec is None:
            raise ConfigError(f"flag provided but not defined: -{name}")
        if spec.kind == "bool":
            if has_value:
                try:
                    values[spec.dest] = parse_go_bool(value)
                except ValueError as exc:
                    raise ConfigError(
                        f"invalid boolean value {go_quote(value)} for -{name}: {exc}"
                    ) from None
            else:
                values[spec.dest] = True
        else:
            if not has_value:
                if not rest:
                    raise ConfigError(f"flag needs an argument: -{name}")
                value = rest.pop(0)
            try:
                values[spec.dest] = parse_go_int(value) if spec.kind == "int" else value
            except ValueError as exc:
                raise ConfigError(
                    f"invalid value {go_quote(value)} for flag -{name}: {exc}"
                ) from None
        given.append(name)
        spelled[spec.dest] = name
    return ParsedArgs(values, tuple(given), tuple(rest), spelled)


def _dashed(name: str) -> str:
    """How nats-server's usage spells a flag: ``-p``, ``-js``, ``-DV``, but ``--port``."""
    return ("-" if len(name) <= 2 or name in ("DVV", "VV", "DV") else "--") + name


def help_text(program: str = "headwater-server") -> str:
    """Usage listing every supported flag, grouped like nats-server's."""
    lines = [f"Usage: {program} [options]", ""]
    sections: dict[str, list[FlagSpec]] = {}
    for spec in FLAGS:
        if spec.support == "yes":
            sections.setdefault(spec.section, []).append(spec)
    for section, specs in sections.items():
        lines.append(f"{section} options:")
        for spec in specs:
            spelled = ", ".join(_dashed(name) for name in spec.names)
            if spec.metavar:
                spelled += f" <{spec.metavar}>"
            lines.append(f"    {spelled:<38} {spec.help}")
        lines.append("")
    ignored = ", ".join(_dashed(spec.names[-1]) for spec in FLAGS if spec.support == "ignored")
    lines.append("Accepted for nats-server compatibility, without effect:")
    lines.extend(textwrap.wrap(ignored, width=96, initial_indent="    ", subsequent_indent="    "))
    lines.append("")
    lines.append("Flags work with one or two dashes, and take values as -p 4222 or -p=4222.")
    return "\n".join(lines)


TLS_HELP = """\
TLS is set in the configuration file's tls block:

    tls {
        cert_file: "./certs/server-cert.pem"
        key_file:  "./certs/server-key.pem"
        ca_file:   "./certs/ca.pem"    # CA for client certificates
        verify:    true                # require and check client certificates
        timeout:   2                   # handshake timeout, seconds or "2s"
    }

or on the command line with --tlscert, --tlskey, --tlscacert and --tlsverify."""
