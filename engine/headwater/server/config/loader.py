"""``load(argv)``: nats-server's command line and config file -> what the server should do.

The order of checks is nats-server's: flag syntax first, then ``-v``/``-h`` (which need no
config file), then the config file, then flags laid over it. ``-t`` checks the file and
reports, and, as in nats-server, fails on warnings as well as on errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from headwater import __version__
from headwater.server.config.build import apply_flags, make_settings
from headwater.server.config.conffile import parse_file
from headwater.server.config.errors import ConfigError
from headwater.server.config.fileopts import FileReader
from headwater.server.config.flags import TLS_HELP, go_quote, help_text, parse_flags
from headwater.server.config.settings import Settings

Action = Literal["run", "help", "version", "test_config"]


@dataclass(frozen=True)
class LoadResult:
    settings: Settings
    action: Action
    """``run`` the server, print ``text`` and exit for ``help``/``version``, or report a
    successful ``test_config`` (``-t``) with ``text``."""
    text: str = ""
    warnings: tuple[str, ...] = ()
    """Lines for the server to log at start: nats-server's config warnings, and options that
    are accepted for compatibility but have no effect here."""
    config_file: str | None = None
    """The ``-c`` file, if any (kept for reloads)."""


def version_text() -> str:
    return f"headwater-server: v{__version__}"


def load(argv: list[str]) -> LoadResult:
    """Parse ``argv`` (without the program name); raises ``ConfigError``."""
    args = parse_flags(argv)
    given = args.values
    command = args.positionals[0] if args.positionals else ""
    if command and command.lower() not in ("version", "help"):
        raise ConfigError(f"unrecognized command: {go_quote(command)}")
    if given.get("version") or command.lower() == "version":
        return LoadResult(Settings(), "version", version_text())
    if given.get("help") or command.lower() == "help":
        return LoadResult(Settings(), "help", help_text())
    if given.get("help_tls"):
        return LoadResult(Settings(), "help", TLS_HELP)
    for name, spec in args.specs_given("refused"):
        raise ConfigError(f"flag -{name} ({spec.help}) is not supported by headwater-server")
    notices = [
        f"flag -{name} has no effect in headwater-server (accepted for nats-server compatibility)"
        for name, _ in args.specs_given("ignored")
    ]
    config_file = str(given.get("config") or "") or None
    reader = FileReader()
    if config_file:
        reader.read(parse_file(config_file), config_file)
    testing = bool(given.get("test_config"))
    if testing:
        if not config_file:
            raise ConfigError("-t checks a configuration file: give it with -c FILE")
        if reader.warnings:
            raise ConfigError("; ".join(reader.warnings))
    opts = dict(reader.opts)
    apply_flags(opts, args)
    settings = make_settings(opts)
    warnings = (*reader.warnings, *reader.notices, *notices)
    if testing:
        text = f"configuration file {config_file} is valid"
        return LoadResult(settings, "test_config", text, warnings, config_file)
    return LoadResult(settings, "run", "", warnings, config_file)
