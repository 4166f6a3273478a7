"""``headwater-server``: nats-server's command line, on uvloop."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys

import uvloop

from headwater import __version__
from headwater.server import config
from headwater.server import log as server_log
from headwater.server.connections.auth import plaintext_passwords
from headwater.server.node import Server
from headwater.server.watchdog import from_environment as stall_watchdog

log = logging.getLogger("headwater.server")


async def serve(settings: config.Settings) -> int:
    server = Server(settings)
    from headwater.server.services import attach_services

    attach_services(server)
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()

    def spawn(coro_fn: object) -> None:
        task = loop.create_task(coro_fn())  # type: ignore[operator]
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    loop.add_signal_handler(signal.SIGTERM, spawn, server.shutdown)
    loop.add_signal_handler(signal.SIGINT, spawn, server.shutdown)
    loop.add_signal_handler(signal.SIGUSR2, spawn, server.enter_lame_duck)
    try:
        await server.start()
    except OSError as exc:
        log.critical("Error listening on port: %s", exc)
        await server.shutdown()
        return 1
    # Watched from "ready" on: recovering the stores at start-up happens before any client is
    # served, so it stalls nobody.
    watchdog = stall_watchdog(loop)
    await server.wait_stopped()
    if watchdog is not None:
        watchdog.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        loaded = config.load(sys.argv[1:] if argv is None else argv)
    except config.ConfigError as exc:
        print(f"headwater-server: {exc}", file=sys.stderr)
        return 1
    if loaded.action in ("help", "version"):
        print(loaded.text)
        return 0
    if loaded.action == "test_config":
        print(loaded.text or "configuration file test is successful")
        return 0
    server_log.setup(loaded.settings.log)
    for warning in loaded.warnings:
        log.warning("%s", warning)
    if plaintext_passwords(loaded.settings.auth):
        # nats-server's start-up warning: a config file holding passwords in clear text.
        log.warning("Plaintext passwords detected, use nkeys or bcrypt")
    # Fewer young-generation collections: the hot path allocates many short-lived tuples and
    # bytes, and the default threshold (700) spends measurable time collecting them.
    gc.set_threshold(50_000, 20, 100)
    log.debug("headwater %s", __version__)
    return uvloop.run(serve(loaded.settings))


if __name__ == "__main__":
    sys.exit(main())
