"""The operator's own settings: flags, each with an environment variable as its default.

kopf's flags (``--namespace``, ``--all-namespaces``, ``--peering``, ``--liveness``,
``--standalone`` ...) pass through to kopf unchanged; these are the ones kopf does not know.
One is added: ``--peering`` without ``--priority`` gets a priority derived from the pod's
name (see :func:`peering_priority`), so that replicas started with the same flags do not all
pause as "conflicting operators with the same priority".
"""

from __future__ import annotations

import argparse
import hashlib
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from click.core import ParameterSource
from kopf import cli

from headwater.control.connection import ConnectionSettings
from headwater_operator.ownership import check_cluster_id

DEFAULT_PROFILE = "headwater-connection"
"""A Secret/ConfigMap of this name gives every resource in its namespace its connection."""


@dataclass(frozen=True)
class OperatorConfig:
    connection: ConnectionSettings = field(default_factory=ConnectionSettings)
    """Defaults for every resource (``NATS_URL`` and friends, or the flags)."""
    namespace_profile: str = DEFAULT_PROFILE
    sync_interval: float = 30.0
    """Seconds between drift checks and live-figure refreshes of one resource."""
    wait_delay: float = 5.0
    """Seconds before a Consumer looks for its Stream again (and a Stream for its consumers)."""
    max_backoff: float = 300.0
    """Upper bound of the retry delay after a failure; it doubles from 1 s."""
    request_timeout: float = 5.0
    metrics_host: str = "0.0.0.0"
    metrics_port: int | None = None
    """Prometheus metrics port; None: no metrics endpoint (0: an ephemeral port)."""
    cache_dir: Path | None = None
    """Where credentials and TLS files from Secrets are written for nats-py (0600)."""
    watch_timeout: float | None = None
    """Server-side watch timeout (kopf's default when None)."""
    cluster_id: str = ""
    """Prefix of every owner this operator writes (``kubernetes:<cluster>/...``); empty: none."""
    peering_priority: int | None = None
    """The kopf priority derived from ``pod_name`` (None: given, or no peering)."""
    pod_name: str = ""
    """The name the priority was derived from (POD_NAME, else the host name)."""

    def priority_note(self) -> str:
        """What the operator logs at startup about a derived priority ("" when none)."""
        if self.peering_priority is None:
            return ""
        return (
            f"Peering priority {self.peering_priority}, derived from the pod name "
            f"{self.pod_name!r} (no --priority given)."
        )

    def backoff(self, retry: int) -> float:
        return float(min(self.max_backoff, 2 ** min(retry, 16)))


def _env_float(env: Mapping[str, str], name: str, default: float) -> float:
    return float(env[name]) if env.get(name) else default


def _cluster_id(value: str) -> str:
    try:
        return check_cluster_id(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


PRIORITY_RANGE = 2**31 - 1
"""Derived priorities lie in 1..PRIORITY_RANGE: two pods collide with odds of about 1 in 2e9."""
_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})


def peering_priority(pod_name: str) -> int:
    """A stable priority for ``pod_name``: the same pod name always gets the same one, and
    the replicas of a Deployment (whose pod names differ) get different ones."""
    digest = hashlib.sha256(pod_name.encode()).digest()
    return int.from_bytes(digest[:8], "big") % PRIORITY_RANGE + 1


def needs_priority(kopf_args: Sequence[str], env: Mapping[str, str]) -> bool:
    """Whether kopf will take part in peering with its default priority (0).

    kopf's own parser reads the flags (every spelling: ``-P x``, ``--priority=3``, ``-p3``);
    its environment fallbacks (``KOPF_RUN_*``) are read from ``env`` rather than the process.
    """
    context = cli.run.make_context("run", list(kopf_args), resilient_parsing=True)

    def given(name: str, variable: str) -> bool:
        if context.get_parameter_source(name) is ParameterSource.COMMANDLINE:
            return context.params.get(name) not in (None, False)
        return bool(env.get(variable))

    def flag(name: str, variable: str) -> bool:
        if context.get_parameter_source(name) is ParameterSource.COMMANDLINE:
            return bool(context.params.get(name))
        return env.get(variable, "").strip().lower() in _TRUE

    peering = given("peering_name", "KOPF_RUN_PEERING")
    priority = given("priority", "KOPF_RUN_PRIORITY")
    # --dev runs with kopf's own priority; --standalone takes no part in peering.
    exempt = flag("standalone", "KOPF_RUN_STANDALONE") or flag("dev", "KOPF_RUN_DEV")
    return peering and not priority and not exempt


def parse_args(
    argv: Sequence[str], env: Mapping[str, str] | None = None
) -> tuple[OperatorConfig, list[str]]:
    """The operator's flags out of ``argv``; the rest (kopf's) is returned as is, but for a
    ``--priority=N`` appended when peering is asked for without one (see the module doc)."""
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(
        prog="headwater-operator",
        description="Reconciles headwater.io resources; other flags go to `kopf run`.",
        allow_abbrev=False,
    )
    parser.add_argument("--nats-url", default=None, help="default servers (env NATS_URL)")
    parser.add_argument("--nats-creds", default=None, help="default .creds file (NATS_CREDS)")
    parser.add_argument("--nats-user", default=None, help="default user (NATS_USER)")
    parser.add_argument("--nats-password", default=None, help="default password")
    parser.add_argument("--nats-token", default=None, help="default token (NATS_TOKEN)")
    parser.add_argument("--nkey", default=None, help="default nkey user seed file (NATS_NKEY)")
    parser.add_argument(
        "--js-domain", default=None, help="default JetStream domain (NATS_JS_DOMAIN)"
    )
    parser.add_argument("--tls-cert", default=env.get("NATS_TLS_CERT"))
    parser.add_argument("--tls-key", default=env.get("NATS_TLS_KEY"))
    parser.add_argument("--tls-ca", default=env.get("NATS_TLS_CA"))
    parser.add_argument(
        "--tlsfirst",
        "--tls-first",
        dest="tls_first",
        action="store_true",
        help="default: start TLS before the server's INFO (tls handshake_first)",
    )
    parser.add_argument(
        "--connection-profile",
        default=env.get("HEADWATER_CONNECTION_PROFILE", DEFAULT_PROFILE),
        help="name of the per-namespace Secret/ConfigMap with connection settings",
    )
    parser.add_argument(
        "--sync-interval",
        type=float,
        default=_env_float(env, "HEADWATER_SYNC_INTERVAL", 30.0),
        help="seconds between drift checks of one resource",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=int(env["HEADWATER_METRICS_PORT"]) if env.get("HEADWATER_METRICS_PORT") else None,
    )
    parser.add_argument("--metrics-host", default=env.get("HEADWATER_METRICS_HOST", "0.0.0.0"))
    parser.add_argument("--cache-dir", type=Path, default=env.get("HEADWATER_CACHE_DIR") or None)
    parser.add_argument(
        "--cluster-id",
        type=_cluster_id,
        default=env.get("HEADWATER_CLUSTER_ID", ""),
        help="this cluster's name in the owner of what the operator manages "
        "(kubernetes:<cluster>/<ns>/<kind>/<name>; env HEADWATER_CLUSTER_ID)",
    )
    options, rest = parser.parse_known_args(list(argv))
    connection = ConnectionSettings.from_env(
        env,
        servers=options.nats_url,
        credentials=options.nats_creds,
        user=options.nats_user,
        password=options.nats_password,
        token=options.nats_token,
        nkey=options.nkey,
        js_domain=options.js_domain,
        tls_cert=options.tls_cert,
        tls_key=options.tls_key,
        tls_ca=options.tls_ca,
        tls_first=options.tls_first,
    )
    priority = None
    pod_name = ""
    if needs_priority(rest, env):
        pod_name = env.get("POD_NAME") or env.get("HOSTNAME") or socket.gethostname()
        priority = peering_priority(pod_name)
        rest = [*rest, f"--priority={priority}"]
    config = OperatorConfig(
        connection=connection,
        namespace_profile=options.connection_profile,
        sync_interval=options.sync_interval,
        metrics_host=options.metrics_host,
        metrics_port=options.metrics_port,
        cache_dir=Path(options.cache_dir) if options.cache_dir else None,
        cluster_id=options.cluster_id,
        peering_priority=priority,
        pod_name=pod_name,
    )
    return config, rest
