"""Mirrors and sources: streams filled from other streams through internal push consumers.

:mod:`.wire` holds the reference's formats (names, subjects, headers, the consumer request),
:mod:`.link` keeps one internal consumer on an origin alive, :mod:`.mirror` and
:mod:`.sources` store what arrives, :mod:`.manager` attaches them to streams.
"""

from .manager import ReplicationManager, replication_info

__all__ = ["ReplicationManager", "replication_info"]
