"""Running the fake API server: in the test's event loop, or in a thread of its own.

kopf's ``KopfRunner`` runs the operator in a thread with its own loop and blocks the caller
while it stops, so for it the server must run in another thread (:class:`FakeKubeThread`);
plain async tests can share their loop (:class:`FakeKube`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml
from aiohttp import web

from .app import Config, build_app
from .inspector import Inspector
from .resources import Registry
from .store import Store

if TYPE_CHECKING:
    import kopf

T = TypeVar("T")
CrdSource = Path | str | dict[str, Any]
DEFAULT_TOKEN = "fakekube-token"


def read_crds(source: CrdSource) -> list[dict[str, Any]]:
    """CRD documents from a dict, or from a (multi-document) YAML file."""
    if isinstance(source, dict):
        return [source]
    with open(source, encoding="utf-8") as stream:
        documents = [doc for doc in yaml.safe_load_all(stream) if doc]
    return [doc for doc in documents if doc.get("kind") == "CustomResourceDefinition"]


class FakeKube:
    """A fake Kubernetes API server on 127.0.0.1 and an ephemeral port.

    ``async with FakeKube([crd_path]) as kube:`` then point a client at ``kube.url`` with
    ``kube.token``; ``kube.api`` reads and changes the state directly.
    """

    def __init__(
        self,
        crds: Iterable[CrdSource] = (),
        *,
        token: str | None = DEFAULT_TOKEN,
        history_limit: int = 1000,
        bookmark_interval: float = 5.0,
        kopf_peerings: bool = True,
    ) -> None:
        self.token = token
        # kopf_peerings=False: kopf's peering kinds are served only once their CRDs exist.
        self.store = Store(Registry(kopf_peerings=kopf_peerings), history_limit=history_limit)
        self.api = Inspector(self.store)
        # Every request as "METHOD /path?query" (PATCH adds "[content type]"), newest last.
        self.requests: deque[str] = deque(maxlen=2000)
        self._config = Config(token=token, bookmark_interval=bookmark_interval)
        self._runner: web.AppRunner | None = None
        self._port = 0
        for source in crds:
            for crd in read_crds(source):
                self.api.create(crd)

    @property
    def url(self) -> str:
        if not self._port:
            raise RuntimeError("the fake API server is not started")
        return f"http://127.0.0.1:{self._port}"

    async def start(self) -> None:
        app = build_app(self.store, self._config, self.requests)
        # Watches end when stop() closes them; the timeout only bounds a stuck client.
        self._runner = web.AppRunner(app, shutdown_timeout=2.0, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        self.store.history.close_all()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeKube:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def write_kubeconfig(self, path: Path | str) -> Path:
        return write_kubeconfig(path, self.url, self.token)

    def connection_info(self) -> kopf.ConnectionInfo:
        """Credentials for a ``@kopf.on.login`` handler (more robust than a kubeconfig)."""
        import kopf  # only the kopf-facing helpers need kopf

        return kopf.ConnectionInfo(server=self.url, token=self.token, default_namespace="default")


class FakeKubeThread:
    """A :class:`FakeKube` serving from a background thread with its own event loop.

    ``with FakeKubeThread([crd_path]) as kube:``; ``kube.api`` is thread-safe (each call runs on
    the server's loop).
    """

    def __init__(self, crds: Iterable[CrdSource] = (), **options: Any) -> None:
        self.kube = FakeKube(crds, **options)
        self.api = Inspector(self.kube.store, self._call)
        # Made in start(): an event loop that is never run or closed would leak.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started: concurrent.futures.Future[None] = concurrent.futures.Future()

    @property
    def url(self) -> str:
        return self.kube.url

    @property
    def token(self) -> str | None:
        return self.kube.token

    @property
    def requests(self) -> list[str]:
        """A snapshot of the request log, taken on the server's loop."""
        return self._call(lambda: list(self.kube.requests))

    def write_kubeconfig(self, path: Path | str) -> Path:
        return self.kube.write_kubeconfig(path)

    def connection_info(self) -> kopf.ConnectionInfo:
        return self.kube.connection_info()

    def _serve(self, loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self.kube.start())
        except BaseException as failure:
            self._started.set_exception(failure)
            loop.close()
            return
        self._started.set_result(None)
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def _call(self, fn: Callable[[], T]) -> T:
        async def run() -> T:
            return fn()

        if self._loop is None:
            raise RuntimeError("the fake API server thread is not started")
        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=10)

    def start(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._serve, args=(self._loop,), name="fakekube", daemon=True
        )
        self._thread.start()
        self._started.result(timeout=10)

    def stop(self) -> None:
        if self._loop is None or self._thread is None or not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self.kube.stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def __enter__(self) -> FakeKubeThread:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def write_kubeconfig(path: Path | str, server: str, token: str | None) -> Path:
    """A kubeconfig with one context for plain-http ``server``; the file is ``path``."""
    user: dict[str, Any] = {"token": token} if token else {}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fakekube", "cluster": {"server": server}}],
        "users": [{"name": "fakekube", "user": user}],
        "contexts": [
            {
                "name": "fakekube",
                "context": {"cluster": "fakekube", "user": "fakekube", "namespace": "default"},
            }
        ],
        "current-context": "fakekube",
    }
    target = Path(path)
    target.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return target
