"""Serve the provider over go-plugin's gRPC transport, as Terraform starts it.

Normal mode: listen on a Unix socket with TLS, print the handshake line
``1|6|unix|<socket>|grpc|<certificate>`` (the first and only thing on stdout) and serve until
Terraform asks the plugin to shut down. ``--dev``: serve without TLS and print
``TF_REATTACH_PROVIDERS=<json>``; Terraform then attaches to this one process for every
command (no ``init``), which is how the tests run quickly.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import signal
import sys
import tempfile
import threading
from concurrent import futures
from typing import Any, TextIO

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from tf.gen import grpc_controller_pb2 as controller_pb
from tf.gen import grpc_controller_pb2_grpc as controller_rpc
from tf.gen import grpc_stdio_pb2_grpc as stdio_rpc
from tf.gen import tfplugin_pb2_grpc as rpc

from headwater_terraform.servicer import HeadwaterServicer

GO_PLUGIN_PROTOCOL = 1
TFPLUGIN_PROTOCOL = 6
WORKERS = 10
"""Terraform runs up to 10 operations at once (``-parallelism``)."""


def certificate() -> tuple[bytes, bytes, bytes]:
    """A fresh self-signed certificate for ``localhost``: (DER, PEM, PEM key).

    An EC key takes a millisecond to make, so nothing is cached on disk (a read-only HOME
    must not stop the plugin)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        # go-plugin trusts exactly this certificate as a root: it must be a CA for itself.
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return (
        cert.public_bytes(serialization.Encoding.DER),
        cert.public_bytes(serialization.Encoding.PEM),
        key_pem,
    )


class _Controller(controller_rpc.GRPCControllerServicer):
    def __init__(self, stopped: threading.Event, dev: bool) -> None:
        self.stopped = stopped
        self.dev = dev

    def Shutdown(self, request: Any, context: grpc.ServicerContext) -> Any:
        # In dev mode the process outlives any one Terraform command.
        if not self.dev:
            self.stopped.set()
        return controller_pb.Empty()


class _Stdio(stdio_rpc.GRPCStdioServicer):
    def StreamStdio(self, request: Any, context: grpc.ServicerContext) -> Any:
        # Logs go to stderr, which Terraform shows with TF_LOG; nothing is streamed here.
        return iter(())


def serve(provider: Any, *, dev: bool = False, out: TextIO = sys.stdout) -> None:
    stopped = threading.Event()
    if threading.current_thread() is threading.main_thread():
        # Ctrl-C or a SIGTERM (tests ending a --dev provider) shuts down cleanly, removing the
        # socket directory instead of leaving it behind.
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, lambda *_args: stopped.set())
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=WORKERS))
    rpc.add_ProviderServicer_to_server(HeadwaterServicer(provider), server)
    controller_rpc.add_GRPCControllerServicer_to_server(_Controller(stopped, dev), server)
    stdio_rpc.add_GRPCStdioServicer_to_server(_Stdio(), server)
    with tempfile.TemporaryDirectory(prefix="headwater-tf-") as tmp:
        socket = os.path.join(tmp, "plugin.sock")
        if dev:
            server.add_insecure_port(f"unix://{socket}")
            server.start()
            reattach = {
                provider.full_name(): {
                    "Protocol": "grpc",
                    "ProtocolVersion": TFPLUGIN_PROTOCOL,
                    "Pid": os.getpid(),
                    "Test": True,
                    "Addr": {"Network": "unix", "String": socket},
                }
            }
            print(f"TF_REATTACH_PROVIDERS={json.dumps(reattach)}", file=out, flush=True)
        else:
            der, pem, key = certificate()
            credentials = grpc.ssl_server_credentials([(key, pem)], require_client_auth=False)
            server.add_secure_port(f"unix://{socket}", credentials)
            server.start()
            encoded = base64.b64encode(der).decode().rstrip("=")
            line = f"{GO_PLUGIN_PROTOCOL}|{TFPLUGIN_PROTOCOL}|unix|{socket}|grpc|{encoded}"
            print(line, file=out, flush=True)
        try:
            stopped.wait()
        finally:
            server.stop(grace=0.5).wait(2)
            provider.runtime.close()
