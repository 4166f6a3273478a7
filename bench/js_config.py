"""JetStream server configurations: one config file per server, with its own temporary store.

Both servers read the same ``jetstream { store_dir, sync_interval }`` block, so a durability
mode is written once and given to either. ``sync_interval`` is ``always`` (fsync every
message), a duration such as ``"2m"`` (periodic; nats-server's default), or left out, which
means each server's own default: fsync before every publish ack with group commit for
headwater-server, every two minutes for nats-server.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from servers import KINDS

# Durability modes by name; None leaves sync_interval out (the server's default).
DEFAULT: str | None = None
INTERVAL = '"2m"'
ALWAYS = "always"


def config_text(store_dir: Path, sync: str | None, domain: str = "") -> str:
    """A config on 127.0.0.1 with an ephemeral port and JetStream in ``store_dir`` (in the
    JetStream ``domain`` when one is given)."""
    sync_line = "" if sync is None else f"  sync_interval: {sync}\n"
    domain_line = f"  domain: {domain}\n" if domain else ""
    return (
        f'host: 127.0.0.1\nport: -1\njetstream {{\n  store_dir: "{store_dir}"\n'
        f"{sync_line}{domain_line}}}\n"
    )


@contextlib.contextmanager
def js_args(sync: dict[str, str | None], domain: str = "") -> Iterator[dict[str, list[str]]]:
    """Per-server ``["-c", conf]`` arguments; the configs and stores are removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="js-bench-") as tmp:
        args = {}
        for kind in KINDS:
            conf = Path(tmp) / f"{kind}.conf"
            conf.write_text(config_text(Path(tmp) / f"{kind}-store", sync[kind], domain))
            args[kind] = ["-c", str(conf)]
        yield args


def describe(sync: str | None) -> str:
    """How a mode is printed in the report."""
    return "default" if sync is None else "sync_interval " + sync.strip('"')
