"""TLS contexts: the server side from the ``--tls*`` flags or a ``tls {}`` block, and the
dialling side of a route (``cluster { tls {} }``)."""

from __future__ import annotations

import ssl

from headwater.server.config.settings import TLSSettings


def server_context(settings: TLSSettings) -> ssl.SSLContext | None:
    """None when TLS is off; raises ``ssl.SSLError``/``OSError`` for unusable files."""
    if not settings.enabled:
        return None
    ctx = _context(ssl.PROTOCOL_TLS_SERVER, settings)
    if settings.ca_file:
        ctx.load_verify_locations(settings.ca_file)
    if settings.verify:
        # tlsverify: a client without a certificate signed by the CA is refused.
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def route_client_context(settings: TLSSettings) -> ssl.SSLContext | None:
    """The context a server dials its routes with: it presents the route certificate (the
    other side may demand it) and checks the remote's against ``ca_file`` and the route URL's
    host, as nats-server does."""
    if not settings.enabled:
        return None
    ctx = _context(ssl.PROTOCOL_TLS_CLIENT, settings)
    if settings.ca_file:
        ctx.load_verify_locations(settings.ca_file)
    else:
        ctx.load_default_certs()
    return ctx


def _context(protocol: int, settings: TLSSettings) -> ssl.SSLContext:
    """TLS 1.2 or later, presenting the configured certificate."""
    ctx = ssl.SSLContext(protocol)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    assert settings.cert_file is not None and settings.key_file is not None
    ctx.load_cert_chain(settings.cert_file, settings.key_file)
    return ctx
