"""Which optional services a server runs, decided from its settings."""

from __future__ import annotations

from headwater.server.node import Server


def attach_services(server: Server) -> None:
    """Monitoring and JetStream attach here once they exist for the given settings."""
    settings = server.settings
    if settings.http_port:
        from headwater.server.monitoring.http import MonitoringService

        server.add_service(MonitoringService(server))
    if settings.jetstream.enabled:
        from headwater.server.jetstream.service import JetStreamService

        server.add_service(JetStreamService(server))
