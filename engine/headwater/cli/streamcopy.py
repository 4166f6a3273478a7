"""``stream cp --data``: copy a stream's messages by sourcing it, with a progress bar.

A stream's messages keep their subjects, and two streams cannot listen on the same subjects,
so the client cannot simply republish them. The server can: the copy is created with
``sources: [{name: SOURCE}]`` (and no subjects of its own unless given), the server pulls
every message across, and once the copy holds as many messages as the source did, the source
is removed from its configuration (unless ``--follow``). Copied messages carry the
``Nats-Stream-Source`` header the server adds to sourced messages.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from headwater.cli import output
from headwater.cli.errors import CliError
from headwater.cli.jsapi import JetStreamApi, Json

POLL_SECONDS = 0.1


def sourcing(config: dict[str, Any], source: str, own_subjects: bool) -> dict[str, Any]:
    """``config`` set up to receive ``source``'s messages."""
    copy = {**config, "sources": [{"name": source}]}
    if not own_subjects:
        copy["subjects"] = []  # a pure copy: it stores only what it sources
    return copy


async def wait_for_copy(
    api: JetStreamApi, destination: str, target: int, stall_seconds: float, show: bool
) -> None:
    """Poll until ``destination`` holds ``target`` messages; fail when it stops growing."""
    last, last_change = -1, time.monotonic()
    with output.progress(f"Copying into {destination}", total=target, enabled=show) as bar:
        while True:
            held = int((await api.stream_info(destination))["state"].get("messages", 0))
            if held != last:
                bar.advance(held - max(last, 0))
                last, last_change = held, time.monotonic()
            if held >= target:
                return
            if time.monotonic() - last_change > stall_seconds:
                raise CliError(
                    f"copy into {destination} stopped at {held} of {target} messages"
                    " (are its limits smaller than the source's content?)"
                )
            await asyncio.sleep(POLL_SECONDS)


async def copy_stream(
    api: JetStreamApi,
    source: str,
    config: dict[str, Any],
    own_subjects: bool,
    follow: bool,
    show_progress: bool,
) -> Json:
    """Create the copy from ``config``, wait for the messages, detach unless ``follow``."""
    target = int((await api.stream_info(source))["state"].get("messages", 0))
    wanted = sourcing(config, source, own_subjects)
    await api.stream_create(wanted)
    await wait_for_copy(api, wanted["name"], target, max(api.timeout, 5.0), show_progress)
    if follow:
        return await api.stream_info(wanted["name"])
    detached = {key: value for key, value in wanted.items() if key != "sources"}
    return await api.stream_update(detached)
