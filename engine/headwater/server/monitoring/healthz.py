"""/healthz: the probe Kubernetes and load balancers ask, with nats-server's answers.

The order of checks and the status codes follow nats-server's ``healthz`` (monitor.go):

1. ``stream`` without ``account``, or ``consumer`` without ``stream``: 400 (before anything
   else, even ``js-server-only``);
2. not accepting clients (starting, shutting down, or in lame-duck mode, where nats-server has
   closed its client listener): 500 ``{"status": "error", "error": ...}``;
3. ``js-server-only=true``: stop here, 200;
4. JetStream not configured: 200 (``js-enabled-only`` does not fail a server without it);
5. JetStream configured but not running: 503 ``{"status": "unavailable", ...}``;
6. ``js-enabled-only=true``: stop here, 200;
7. the JetStream service's own check (it runs; in a cluster, contact with and being current
   with the metadata's leader): 503 on failure. In a cluster ``js-meta-only=true`` stops here;
8. the streams and consumers, or only those of ``account``, ``stream``, ``consumer``: an
   account, stream or consumer asked for and not found is 404; one that is not healthy, 503.
   A single server walks the stream directories on disk, as nats-server does: a directory
   whose stream is not live failed to recover, and a memory stream (no directory) is not
   found. ``js-meta-only`` does not stop this walk (nats-server has no meta layer there).
   In a cluster the walk covers the streams placed on this server: a stream placed elsewhere
   is not found here, and the account is found while the cluster has any stream. A stream
   being created, deleted or restored at that moment is skipped, neither found nor failed.
   A replicated stream with a replica here must be current (``JetStream stream '$G > S' is
   not current``, as nats-server words it): its replica leads and committed in its epoch,
   or follows a leader it hears from and applied what that leader committed. A server back
   from a restart is thus unhealthy until it caught up, and a rolling restart waits for it.

Headwater has only the global account ``$G``: any other ``account`` is not found, as an
unknown account is in nats-server. ``details=true`` answers with the ``errors`` list
(``type``, ``account``, ``stream``, ``consumer``, ``error``) and status ``error`` or ``ok``
instead of one ``error`` text: every unhealthy stream is listed, not only the first. The
deprecated ``js-enabled`` parameter is read as ``js-enabled-only``, as nats-server does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from headwater.server.jetstream.layout import ACCOUNT
from headwater.server.monitoring.params import Query

if TYPE_CHECKING:
    from headwater.server.jetstream.service import JetStreamService
    from headwater.server.node import Server

OK = 200
BAD_REQUEST = 400
NOT_FOUND = 404
NOT_READY = 500
UNAVAILABLE = 503

JS_NOT_ENABLED = "JetStream not enabled"

# The ``type`` of each entry of the detailed form's ``errors``.
CONNECTION = "CONNECTION"
BAD_REQUEST_ERROR = "BAD_REQUEST"
JETSTREAM = "JETSTREAM"
ACCOUNT_ERROR = "ACCOUNT"
STREAM_ERROR = "STREAM"
CONSUMER_ERROR = "CONSUMER"


@dataclass(frozen=True)
class HealthzOptions:
    js_enabled_only: bool = False
    js_server_only: bool = False
    js_meta_only: bool = False
    account: str = ""
    stream: str = ""
    consumer: str = ""
    details: bool = False

    @classmethod
    def from_query(cls, query: Query) -> HealthzOptions:
        # Decoded in nats-server's order, so the first bad parameter is the one reported.
        legacy = query.boolean("js-enabled")
        enabled_only = query.boolean("js-enabled-only")
        server_only = query.boolean("js-server-only")
        meta_only = query.boolean("js-meta-only")
        details = query.boolean("details")
        return cls(
            js_enabled_only=enabled_only or legacy,
            js_server_only=server_only,
            js_meta_only=meta_only,
            account=query.get("account"),
            stream=query.get("stream"),
            consumer=query.get("consumer"),
            details=details,
        )


@dataclass
class _Health:
    """The answer being built: one ``error`` text, or with ``details`` the ``errors`` list."""

    details: bool
    status: str = "ok"
    code: int = 0
    error: str = ""
    errors: list[dict[str, str]] = field(default_factory=list)

    def fail(
        self,
        kind: str,
        text: str,
        *,
        status: str = "unavailable",
        code: int = 0,
        replace: bool = False,
        **names: str,
    ) -> None:
        """Record one failure. ``replace`` drops the ones listed before (a 404 answers alone);
        without ``details`` the caller stops at the first failure."""
        if code:
            self.code = code
        if not self.details:
            self.status, self.error = status, text
            return
        entry = {"type": kind, **{k: v for k, v in names.items() if v}, "error": text}
        self.errors = [entry] if replace else [*self.errors, entry]

    @property
    def failed(self) -> bool:
        return bool(self.error or self.errors)

    def answer(self) -> tuple[int, dict[str, Any]]:
        if self.details:
            self.status = "error" if self.errors else "ok"
        code = self.code or (UNAVAILABLE if self.failed else OK)
        body: dict[str, Any] = {"status": self.status}
        if self.error:
            body["error"] = self.error
        if self.errors:
            body["errors"] = self.errors
        return code, body


def healthz(server: Server, options: HealthzOptions | None = None) -> tuple[int, dict[str, Any]]:
    """(HTTP status, body) for ``server``'s health under ``options``."""
    opts = options or HealthzOptions()
    health = _Health(opts.details)
    _check(server, opts, health)
    return health.answer()


def _check(server: Server, opts: HealthzOptions, health: _Health) -> None:
    if opts.stream and not opts.account:
        text = '"account" must not be empty when checking stream health'
        health.fail(BAD_REQUEST_ERROR, text, status="error", code=BAD_REQUEST)
        return
    if opts.consumer and not opts.stream:
        text = '"stream" must not be empty when checking consumer health'
        health.fail(BAD_REQUEST_ERROR, text, status="error", code=BAD_REQUEST)
        return
    if server.lame_duck or not server.ready:
        text = (
            "server is in lame duck mode: not accepting clients"
            if server.lame_duck
            else "server is not ready for client connections"
        )
        health.fail(CONNECTION, text, status="error", code=NOT_READY)
        return
    if opts.js_server_only or not server.settings.jetstream.enabled:
        return
    js = server.jetstream
    if js is None:
        # JetStream is configured but its service is not running (failed or not started).
        health.fail(JETSTREAM, JS_NOT_ENABLED, code=UNAVAILABLE)
        return
    if opts.js_enabled_only:
        return
    meta_problem = js.health_error()
    if meta_problem:
        health.fail(JETSTREAM, meta_problem)
        return
    if js.clustered is None:
        _check_single(js, opts, health)
    elif not opts.js_meta_only:
        _check_clustered(js, opts, health)


def _check_single(js: JetStreamService, opts: HealthzOptions, health: _Health) -> None:
    """nats-server's single-server walk over the stream directories it keeps on disk."""
    names = js.stored_stream_names()
    account = opts.account
    account_found = stream_found = consumer_found = False
    if names is not None and (not account or account == ACCOUNT):
        account_found = bool(account)
        for name in names:
            if js.streams.holder(name) not in (None, "live"):
                # Being created, deleted or restored right now: neither there nor failed.
                continue
            if opts.stream:
                if name != opts.stream:
                    continue
                stream_found = True
            stream = js.streams.get(name)
            if stream is None:
                text = f"JetStream stream '{ACCOUNT} > {name}' could not be recovered"
                health.fail(STREAM_ERROR, text, account=ACCOUNT, stream=name)
                if not health.details:
                    return
                continue
            if stream_found:
                consumer_found = bool(opts.consumer) and opts.consumer in stream.consumers
                break
    if account and not account_found:
        _not_found_account(health, account)
    elif opts.stream and not stream_found:
        _not_found_stream(health, opts)
    elif opts.consumer and not consumer_found:
        _not_found_consumer(health, opts)


def _check_clustered(js: JetStreamService, opts: HealthzOptions, health: _Health) -> None:
    """The streams placed on this server, with their consumers beside them: an R1 stream must
    be live here; a replicated stream's replica must be open here and current (it leads, or
    it follows a leader it hears from, holds its state and applied what that leader
    committed), so that a rolling restart moves on only once the replica caught up.
    Placements come from the cluster's metadata (clustered.py)."""
    clustered = js.clustered
    assert clustered is not None
    here = clustered.name
    placements = clustered.placements
    mine = sorted(name for name, placed in placements.items() if _placed_here(placed, here))
    if opts.account:
        # The account is known to the metadata while any stream of it exists anywhere.
        if opts.account != ACCOUNT or not placements:
            _not_found_account(health, opts.account)
            return
        if opts.stream:
            placed = placements.get(opts.stream)
            if placed is None or not _placed_here(placed, here):
                _not_found_stream(health, opts)
                return
            stream = js.streams.get(opts.stream)
            # The consumers of a stream live beside it: known only while it is live here (if
            # not, the stream's own failure below is the answer, as in nats-server).
            if opts.consumer and stream is not None and not _has_consumer(stream, opts.consumer):
                _not_found_consumer(health, opts)
                return
            mine = [opts.stream]
    for name in mine:
        text = f"JetStream stream '{ACCOUNT} > {name}' is not current"
        placed = placements[name]
        if placed.replicated:
            group = clustered.replicas.groups.get(name)
            if group is not None and group.current():
                continue
            if group is None:
                if placed.config is None:
                    continue  # being created: its config is not in the placement yet
                if js.streams.holder(name) is None:
                    text += ": stream not found"
                # Else its replica is opening here (a file store cut back to its checkpoint,
                # its log read): not current until it opened and caught up.
        elif name in js.streams or js.streams.holder(name) is not None:
            continue  # live, or being created, deleted or restored right now
        else:
            text += ": stream not found"
        health.fail(STREAM_ERROR, text, account=ACCOUNT, stream=name)
        if not health.details:
            return


def _placed_here(placed: Any, here: str) -> bool:
    """An R1 stream hosted by this server, or a replicated stream with a replica here."""
    return here in placed.peers if placed.replicated else placed.server == here


def _has_consumer(stream: Any, name: str) -> bool:
    # Mirrors' and sources' internal (direct) consumers are not in the cluster's metadata.
    return any(c.name == name for c in stream.public_consumers())


def _not_found_account(health: _Health, account: str) -> None:
    text = f'JetStream account "{account}" not found'
    health.fail(ACCOUNT_ERROR, text, code=NOT_FOUND, replace=True, account=account)


def _not_found_stream(health: _Health, opts: HealthzOptions) -> None:
    text = f'JetStream stream "{opts.stream}" not found on account "{opts.account}"'
    health.fail(
        STREAM_ERROR, text, code=NOT_FOUND, replace=True, account=opts.account, stream=opts.stream
    )


def _not_found_consumer(health: _Health, opts: HealthzOptions) -> None:
    text = (
        f'JetStream consumer "{opts.consumer}" not found for stream "{opts.stream}" '
        f'on account "{opts.account}"'
    )
    health.fail(
        CONSUMER_ERROR,
        text,
        code=NOT_FOUND,
        replace=True,
        account=opts.account,
        stream=opts.stream,
        consumer=opts.consumer,
    )
