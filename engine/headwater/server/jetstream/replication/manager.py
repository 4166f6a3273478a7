"""Which streams replicate, and their STREAM.INFO reports.

The service calls :meth:`ReplicationManager.attach` for every stream it opens (created or
recovered), :meth:`reconfigure` after an update and :meth:`detach` before a stream closes or
goes away. Everything a mirror or source needs after a restart is in the stream's config and
its stored messages, so attaching a recovered stream resumes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .mirror import Mirror
from .sources import Sources
from .wire import stream_identity

if TYPE_CHECKING:
    from headwater.server.jetstream.service import JetStreamService
    from headwater.server.jetstream.stream import Stream

__all__ = ["ReplicationManager", "replication_info"]


class ReplicationManager:
    def __init__(self, service: JetStreamService) -> None:
        self.service = service

    def identity(self, name: str) -> str:
        """The identity of origin ``name`` when it is one of ours, else ""."""
        origin = self.service.streams.get(name)
        return stream_identity(name, origin.created_ns) if origin is not None else ""

    def local_origin(self, name: str) -> Stream | None:
        """Origin ``name`` when it is a stream of this server alone (a replica of a
        replicated one may be behind its leader: its messages come through a consumer)."""
        origin = self.service.streams.get(name)
        return origin if origin is not None and origin.group is None else None

    def attach(self, stream: Stream) -> None:
        client = self.service.client
        assert client is not None
        cfg = stream.config
        runner: Mirror | Sources | None = None
        if cfg.mirror is not None:
            runner = Mirror(stream, client, self.local_origin)
        elif cfg.sources:
            runner = Sources(stream, client, self.identity, self.local_origin)
        stream.replication = runner
        if runner is not None:
            runner.start()

    def detach(self, stream: Stream) -> None:
        runner = stream.replication
        stream.replication = None
        if runner is not None:
            runner.close()

    def reconfigure(self, stream: Stream, mirror: object, sources: object) -> None:
        """After an update: restart replication when the mirror or the sources changed
        (removing the mirror promotes the stream to a normal one)."""
        cfg = stream.config
        if cfg.mirror == mirror and cfg.sources == sources:
            return
        self.detach(stream)
        self.attach(stream)

    def close(self) -> None:
        for stream in self.service.streams.values():
            self.detach(stream)


def replication_info(stream: Stream) -> dict[str, Any]:
    """The ``mirror`` / ``sources`` members of a StreamInfo (empty when neither)."""
    runner = stream.replication
    if isinstance(runner, Mirror):
        return {"mirror": runner.info()}
    if isinstance(runner, Sources):
        return {"sources": runner.info()}
    return {}
