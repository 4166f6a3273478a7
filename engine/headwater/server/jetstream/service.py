"""The JetStream service: start-up banner, stream registry, persistence and the API.

``JetStreamService(server)`` is attached by ``services.attach_services`` when ``-js`` is on.
``start()`` prints nats-server's "Starting JetStream" block, reloads every file stream from
``<store_dir>/jetstream/$G/streams`` and subscribes the ``$JS.API`` subjects through one
:class:`InternalClient`; ``stop()`` unsubscribes, sends the acks still queued and closes the
stores cleanly (so the next start can use their index snapshots). The service sets
``server.jetstream = self`` so monitoring can read :meth:`stats`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headwater.server.connections.internal import InternalClient
from headwater.server.consumers.api import ConsumerApi, consumer_info
from headwater.server.consumers.config import stored_json
from headwater.server.consumers.manager import ConsumerManager
from headwater.server.store import StoreConfig, StreamStore, SyncPolicy, open_store

from . import errors, groupseed, layout
from .accountinfo import ApiStats, Resources, account_info
from .advisories import API_LIMIT_ADVISORY, api_limit_reached_body, publish_stream_action
from .api import CONSUMER_ROUTES, ROUTES, ApiRouter
from .clustered import ClusteredJetStream
from .registry import Claim, NameTaken, StreamRegistry
from .replication import ReplicationManager, replication_info
from .snapshot import SNAPSHOT_ROUTES, SnapshotApi
from .stream import Stream, store_limits
from .streamapi import StreamApi
from .streamconfig import StreamConfig
from .streamconfig_validate import CLUSTER_LIMITS, NO_LIMITS, StreamLimits
from .streaminfo import info_for_list
from .templateapi import TEMPLATE_ROUTES, TemplateApi
from .templates import TemplateManager
from .versioning import JS_API_LEVEL

if TYPE_CHECKING:
    from headwater.server.consumers.consumer import Consumer
    from headwater.server.node import Server

__all__ = ["JetStreamService"]

log = logging.getLogger("headwater.server")


def sync_policy(interval: float) -> SyncPolicy:
    """``sync_interval`` → store policy: 0 fsync before each ack, >0 periodic, <0 every write."""
    if interval == 0:
        return SyncPolicy("ack")
    if interval < 0:
        return SyncPolicy("always")
    return SyncPolicy("interval", interval)


class JetStreamService:
    """One server's JetStream: streams of the global account and the API that manages them."""

    def __init__(self, server: Server) -> None:
        self.server = server
        settings = server.settings.jetstream
        self.settings = settings
        self.domain = settings.domain or None
        self.root: Path = layout.jetstream_root(settings.store_dir)
        self.streams = StreamRegistry()
        """Every path that adds or removes a stream goes through a claim on it (registry.py)."""
        self.replicating: dict[str, layout.StoredStream] = {}
        """Streams found on disk in the middle of becoming replicated groups, kept closed until
        the cluster's placement says which they are (:mod:`.groupseed`; owned by
        :class:`.replicas.Replicas` once the cluster is joined)."""
        self.stats = ApiStats()
        self.resources = Resources(settings.max_memory_store, settings.max_file_store)
        self.sync = sync_policy(settings.sync_interval)
        prefixes = ["$JS.API"]
        if self.domain:
            prefixes.append(f"$JS.{self.domain}.API")
        self.api_prefixes = tuple(prefixes)
        self.client: InternalClient | None = None
        self.router: ApiRouter | None = None
        self.consumers = ConsumerManager(self)
        self.templates = TemplateManager(self)
        self.replication = ReplicationManager(self)
        self.clustered = ClusteredJetStream(self) if server.cluster is not None else None
        """The cluster-wide API and placement, when this server is in a cluster."""

    @property
    def server_name(self) -> str:
        return self.server.name

    @property
    def cluster_name(self) -> str | None:
        """The cluster's name in STREAM.INFO's ``cluster`` block, when clustered."""
        return self.clustered.cluster.name if self.clustered is not None else None

    @property
    def stream_limits(self) -> StreamLimits:
        """What a stream config is checked against here (no account limits yet, issue 19)."""
        return CLUSTER_LIMITS if self.clustered is not None else NO_LIMITS

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        began = time.perf_counter()
        log.info("Starting JetStream")
        self.root.mkdir(parents=True, exist_ok=True)
        log.info("---------------- JETSTREAM ----------------")
        log.info("  Max Memory:      %s", self.resources.describe_memory())
        log.info("  Max Storage:     %s", self.resources.describe_storage(str(self.root)))
        log.info('  Store Directory: "%s"', self.root)
        if self.domain:
            log.info("  Domain:          %s", self.domain)
        log.info("  API Level:       %d", JS_API_LEVEL)
        log.info("-------------------------------------------")
        self.client = InternalClient(self.server, "JetStream")
        self.server.jetstream = self
        await self._recover()
        self.templates.recover()
        apis = (
            StreamApi(self),
            ConsumerApi(self, self.consumers),
            TemplateApi(self.templates),
            SnapshotApi(self),
        )
        routes = ROUTES + CONSUMER_ROUTES + TEMPLATE_ROUTES + SNAPSHOT_ROUTES
        self.router = ApiRouter(
            self.client,
            apis,
            self.stats,
            self.api_prefixes,
            routes,
            queue_limit=self.settings.request_queue_limit,
            on_dropped=self._api_requests_dropped,
        )
        self.router.start()
        if self.clustered is not None:
            self.router.interceptor = self.clustered
            self.clustered.start()
        log.info("Took %.2fms to start JetStream", (time.perf_counter() - began) * 1000)

    def _api_requests_dropped(self, dropped: int) -> None:
        if self.client is not None:
            body = api_limit_reached_body(self.server_name, dropped, self.domain or "")
            self.client.publish(API_LIMIT_ADVISORY, body)

    async def stop(self) -> None:
        log.info("Initiating JetStream Shutdown...")
        if self.clustered is not None:
            await self.clustered.stop()
        if self.router is not None:
            await self.router.stop()
            self.router = None
        await self.templates.close()
        self.replication.close()
        for stream in list(self.streams.values()):
            try:
                await self.consumers.close_stream(stream, deleted=False)
                await stream.close()
            except Exception:
                log.exception("error closing stream %r", stream.name)
        self.streams.clear()
        if self.client is not None:
            self.client.close()
        log.info("JetStream Shutdown")

    async def _recover(self) -> None:
        found = layout.load_streams(self.root)
        if found:
            log.info('Recovering JetStream state for account "$G"')
        for item in found:
            if groupseed.marked(item.directory):
                if self.clustered is not None:
                    # Becoming a replicated group when the server stopped: which it is, only
                    # the placement says (read once the cluster is joined: groupseed).
                    self.replicating[item.config.name] = item
                    continue
                # Started without its cluster: no placement will say; the stream as it was
                # when the conversion began is all this server has.
                log.warning("stream %r was becoming replicated: opened as it was", item.config.name)
                await groupseed.unmark(item.directory)
            await self.recover_stream(item)
        if found:
            log.info("Recovering %d streams", len(self.streams))

    async def recover_stream(self, item: layout.StoredStream) -> None:
        """Open a stream found on disk, with its consumers (errors logged)."""
        cfg = item.config
        began = time.perf_counter()
        try:
            with self.streams.claim(cfg.name, "being recovered") as claim:
                stream = await self.open_claimed(cfg, item.created_ns, item.directory, claim)
        except Exception as exc:
            log.error('Error recreating stream "%s": %s', cfg.name, exc)
            return
        self.consumers.recover(stream)
        log.info(
            "  Restored %s messages for stream '$G > %s' in %.2fms",
            f"{stream.state().msgs:,}",
            cfg.name,
            (time.perf_counter() - began) * 1000,
        )

    # --- stream management (called by the API handlers) ----------------------------------

    def _store_config(self, cfg: StreamConfig, directory: Path | None) -> StoreConfig:
        return StoreConfig(
            name=cfg.name,
            storage=cfg.storage,
            directory=directory,
            limits=store_limits(cfg),
            first_seq=cfg.first_seq or 1,
            sync=self.sync,
            compression=cfg.compression,
            budget=self.resources.budget(cfg.storage),
        )

    def new_stream(
        self,
        cfg: StreamConfig,
        created_ns: int,
        directory: Path | None = None,
        store: StreamStore | None = None,
    ) -> Stream:
        """A stream over its store (opened here unless given), not yet started."""
        assert self.client is not None
        if store is None:
            store = open_store(self._store_config(cfg, directory))
        return Stream(
            config=cfg,
            created_ns=created_ns,
            store=store,
            client=self.client,
            resources=self.resources,
            directory=directory,
            domain=self.domain,
            api_prefixes=self.api_prefixes,
            durable_acks=cfg.storage == "file" and self.sync.mode != "interval",
        )

    async def open_claimed(
        self,
        cfg: StreamConfig,
        created_ns: int,
        directory: Path | None,
        claim: Claim,
        store: StreamStore | None = None,
    ) -> Stream:
        """Make a stream live under its claimed name, over its store: opened here, or one
        filled already (restore)."""
        stream = self.new_stream(cfg, created_ns, directory, store)
        claim.install(stream)
        await stream.start()
        self.replication.attach(stream)
        return stream

    async def create_stream(self, cfg: StreamConfig) -> Stream:
        try:
            claim = self.streams.claim(cfg.name, "being created")
        except NameTaken:
            raise errors.STREAM_NAME_EXIST.exc() from None
        with claim:
            stream = await self._create_claimed(cfg, claim)
        if self.clustered is not None:
            self.clustered.created_here(stream.name)
        return stream

    async def _create_claimed(self, cfg: StreamConfig, claim: Claim) -> Stream:
        created = time.time_ns()
        directory: Path | None = None
        if cfg.storage == "file":
            directory = layout.stream_dir(self.root, cfg.name)
            if directory.exists():
                # Left over by a delete that crashed half-way: never resurrect its messages.
                await asyncio.to_thread(layout.remove_stream_dir, directory)
            try:
                await asyncio.to_thread(layout.write_meta, directory, cfg, created)
            except OSError as exc:
                raise errors.STREAM_CREATE.exc(err=str(exc)) from None
        try:
            stream = await self.open_claimed(cfg, created, directory, claim)
        except Exception as exc:
            log.error("JetStream failed to create stream '%s': %s", cfg.name, exc)
            if directory is not None:
                layout.remove_stream_dir(directory)
            raise errors.STREAM_CREATE.exc(err="error creating store for stream") from None
        self.advise_action(cfg, "create")
        return stream

    async def update_stream(self, name: str, cfg: StreamConfig) -> Stream:
        stream = self.streams[name]
        if stream.directory is not None:
            try:
                await asyncio.to_thread(layout.write_meta, stream.directory, cfg, stream.created_ns)
            except OSError as exc:
                raise errors.STREAM_UPDATE.exc(err=str(exc)) from None
        previous = stream.config
        await stream.update(cfg)
        self.replication.reconfigure(stream, previous.mirror, previous.sources)
        self.advise_action(cfg, "modify")
        return stream

    async def delete_stream(self, name: str, advise: bool = True) -> None:
        try:
            claim, stream = self.streams.claim_live(name, "being deleted")
        except NameTaken as exc:
            raise errors.STREAM_DELETE.exc(err=str(exc)) from None
        with claim:  # the name stays taken until its files are gone
            self.replication.detach(stream)
            await self.consumers.close_stream(stream, deleted=True)
            await stream.delete()
            if stream.directory is not None:
                await asyncio.to_thread(layout.remove_stream_dir, stream.directory)
        if advise:
            self.advise_action(stream.config, "delete")

    def advise_action(self, cfg: StreamConfig, action: str) -> None:
        """The stream_action advisory for a lifecycle change made through the API."""
        publish_stream_action(self.client, cfg.name, action, cfg.template_owner, self.domain or "")

    # --- monitoring ----------------------------------------------------------------------

    @property
    def store_dir(self) -> str:
        """The JetStream directory as the banner and ``/varz`` report it."""
        return str(self.root)

    def health_error(self) -> str | None:
        """Why JetStream as a whole is unhealthy (what ``/healthz?js-meta-only=true`` stops
        after); None while it runs and, in a cluster, this server is current with the
        metadata's leader (nats-server's texts, from :meth:`ClusteredJetStream.health_error`).
        ``/healthz`` adds the checks of each stream and consumer (monitoring/healthz.py)."""
        if self.router is None:
            return "JetStream is not running"
        if self.clustered is not None:
            return self.clustered.health_error()
        return None

    def stored_stream_names(self) -> list[str] | None:
        """The entries of the global account's streams directory, sorted: what nats-server's
        single-server ``/healthz`` walks (a live stream's directory, or one left by a stream
        that could not be recovered); None while the account has no directory (no file
        stream was ever created). Read-only: one directory listing, no file opened."""
        account = self.root / layout.ACCOUNT
        if not account.is_dir():
            return None
        try:
            return sorted(entry.name for entry in os.scandir(layout.streams_dir(self.root)))
        except OSError:  # the account's directory without a streams directory yet
            return []

    def cluster_block(self, stream: Stream | None = None) -> dict[str, Any]:
        """STREAM.INFO's ``cluster`` for a stream or consumer hosted here: a replicated
        stream's from its group (leader and replicas); else the cluster's name when clustered,
        and this server's (an R1 stream's server leads it)."""
        if stream is not None and stream.group is not None and self.clustered is not None:
            return stream.group.cluster_block(self.cluster_name)
        block: dict[str, Any] = {"name": self.cluster_name} if self.cluster_name else {}
        block["leader"] = self.server_name
        return block

    def stream_report(self, stream: Stream, with_config: bool) -> dict[str, Any]:
        """One stream in ``/jsz``'s ``stream_detail`` (no consumers): the config as stored,
        as STREAM.LIST shows it, only ``with_config``."""
        listed = info_for_list(stream)
        report: dict[str, Any] = {
            "name": stream.name,
            "created": listed["created"],
            "cluster": self.cluster_block(stream),
        }
        if with_config:
            report["config"] = listed["config"]
        report["state"] = listed["state"]
        report.update(replication_info(stream))
        return report

    def consumer_report(self, consumer: Consumer, with_config: bool) -> dict[str, Any]:
        """One consumer in ``/jsz``'s ``consumer_detail``: CONSUMER.INFO with the stored
        config only ``with_config``, and a ``cluster`` block only in a cluster (nats-server
        shows none for a single server's consumers there)."""
        info = consumer_info(consumer, self.cluster_block() if self.cluster_name else None)
        if with_config:
            info["config"] = stored_json(consumer.config)
        else:
            del info["config"]
        return info

    def varz(self) -> dict[str, Any]:
        """The ``jetstream`` section of ``/varz``: nats-server's ``config`` and ``stats``."""
        max_storage = self.resources.max_store
        if max_storage < 0:
            try:
                max_storage = shutil.disk_usage(self.root).free * 3 // 4
            except OSError:
                max_storage = -1
        config: dict[str, Any] = {
            "max_memory": self.resources.max_memory,
            "max_storage": max_storage,
            "store_dir": self.store_dir,
        }
        interval = self.settings.sync_interval
        if interval > 0:
            config["sync_interval"] = int(interval * 1_000_000_000)
        else:
            config["sync_always"] = True
        if self.domain:
            config["domain"] = self.domain
        report = account_info(self.streams.values(), self.stats, None)
        stats = {
            key: report[key] for key in ("memory", "storage", "reserved_memory", "reserved_storage")
        }
        # In a cluster the metadata group is the one replicated asset (every stream is R1).
        ha_assets = 1 if self.clustered is not None else 0
        stats |= {"accounts": 1, "ha_assets": ha_assets, "api": report["api"]}
        return {"config": config, "stats": stats}
