"""etcd over TLS: the member's flags and the client's channel, from the cluster's TLS files.

When the cluster block has ``tls { cert_file, key_file, ca_file }``, etcd follows it
(docs/CLUSTERING.md, "etcd"): the member serves its client and peer URLs over https with the
route certificate and key, and every client (the servers' ``MetaClient``, the member's own
``member add``/``list``/``promote`` calls) dials with the same certificate, checking etcd's
against the CA.

**Client certificates.** etcd has no other authentication here and its keys decide where
streams live, so a member demands a certificate signed by the CA from every client and peer
(``--client-cert-auth``, ``--peer-client-cert-auth``) whenever ``ca_file`` is given, whatever
``verify`` says: ``verify`` is how routes treat the other server, and loosening etcd with it
would open the metadata to anyone who reaches the port. Without ``ca_file`` there is no CA to
check against; ``verify: true`` then still demands a client certificate, which etcd checks
against the system's roots (as Go does), and ``verify: false`` leaves etcd open to any TLS
client. The route certificate is presented both ways (server and client), so it must carry
both key usages, as routes need already.

aetcd 1.0 (``aetcd.Client``) opens plaintext channels only: :class:`TLSClient` is the same
client on a TLS channel.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aetcd
import grpc
from aetcd import rpc, watcher

from headwater.server.config.settings import TLSSettings


@dataclass(frozen=True)
class EtcdTLS:
    """The files etcd's TLS uses: the cluster's route certificate, key and CA."""

    cert_file: str
    key_file: str
    ca_file: str | None = None
    verify: bool = False
    """The cluster's ``verify``: demands client certificates even without ``ca_file``."""

    @classmethod
    def from_settings(cls, settings: TLSSettings) -> EtcdTLS | None:
        """None when the cluster has no TLS (etcd speaks plain http then)."""
        if not settings.enabled:
            return None
        assert settings.cert_file is not None and settings.key_file is not None
        return cls(settings.cert_file, settings.key_file, settings.ca_file, settings.verify)

    @property
    def client_cert_auth(self) -> bool:
        """Whether the member demands a client (and peer) certificate (see the module doc)."""
        return self.ca_file is not None or self.verify

    def member_args(self) -> list[str]:
        """etcd's TLS flags, the same files for the client and the peer side."""
        args: list[str] = []
        for prefix in ("--", "--peer-"):
            args += [f"{prefix}cert-file", self.cert_file, f"{prefix}key-file", self.key_file]
            if self.ca_file is not None:
                args += [f"{prefix}trusted-ca-file", self.ca_file]
            if self.client_cert_auth:
                args.append(f"{prefix}client-cert-auth")
        return args

    @functools.cached_property
    def credentials(self) -> grpc.ChannelCredentials:
        """gRPC credentials presenting the certificate and trusting the CA (the system roots
        without one). The files are read once: a few KB, and every client shares them."""
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca_file) if self.ca_file else None,
            private_key=_read(self.key_file),
            certificate_chain=_read(self.cert_file),
        )


def _read(path: str) -> bytes:
    return Path(path).read_bytes()


class TLSClient(aetcd.Client):
    """``aetcd.Client`` on a TLS channel (aetcd 1.0 opens only plaintext ones).

    Only :meth:`connect` differs: it builds the stubs and the watcher as aetcd's own does, on
    ``grpc.aio.secure_channel``. Username/password authentication is not used by Headwater and
    not supported here.
    """

    def __init__(
        self, host: str, port: int, *, credentials: grpc.ChannelCredentials, **kwargs: Any
    ) -> None:
        super().__init__(host, port, **kwargs)
        self._credentials = credentials

    async def connect(self) -> None:
        if self._connected.is_set():
            return
        # Opening a channel object does no I/O: the handshake happens at the first call.
        self.channel = grpc.aio.secure_channel(
            f"{self._host}:{self._port}", self._credentials, options=list(self._options.items())
        )
        self.kvstub = rpc.KVStub(self.channel)
        self.clusterstub = rpc.ClusterStub(self.channel)
        self.leasestub = rpc.LeaseStub(self.channel)
        self.maintenancestub = rpc.MaintenanceStub(self.channel)
        self._watcher = watcher.Watcher(
            rpc.WatchStub(self.channel), timeout=self._timeout, metadata=self.metadata
        )
        self._connected.set()


def make_client(
    host: str,
    port: int,
    tls: EtcdTLS | None,
    *,
    timeout: float,
    options: dict[str, Any] | None = None,
) -> aetcd.Client:
    """An (unconnected) aetcd client for one member, over TLS when ``tls`` is given."""
    if tls is None:
        return aetcd.Client(host, port, timeout=timeout, options=options)  # type: ignore[arg-type]
    return TLSClient(host, port, credentials=tls.credentials, timeout=timeout, options=options)


__all__ = ["EtcdTLS", "TLSClient", "make_client"]
