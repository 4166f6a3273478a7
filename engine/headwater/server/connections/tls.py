"""Server-side TLS context from the ``--tls*`` flags or the ``tls {}`` block."""

from __future__ import annotations

import ssl

from headwater.server.config.settings import TLSSettings


def server_context(settings: TLSSettings) -> ssl.SSLContext | None:
    """None when TLS is off; raises ``ssl.SSLError``/``OSError`` for unusable files."""
    if not settings.enabled:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    assert settings.cert_file is not None and settings.key_file is not None
    ctx.load_cert_chain(settings.cert_file, settings.key_file)
    if settings.ca_file:
        ctx.load_verify_locations(settings.ca_file)
    if settings.verify:
        # tlsverify: a client without a certificate signed by the CA is refused.
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx
