"""Message stores: one ``StreamStore`` protocol, memory and file implementations."""

from headwater.server.store.atomic import write_atomic
from headwater.server.store.base import (
    ByteBudget,
    MaxBytesExceeded,
    MaxMsgsExceeded,
    MaxMsgsPerSubjectExceeded,
    MsgTooLarge,
    RecoveryReport,
    StorageFull,
    StoreConfig,
    StoredMsg,
    StoreError,
    StoreFailed,
    StoreLimits,
    StreamState,
    StreamStore,
    SyncPolicy,
)
from headwater.server.store.factory import open_store

__all__ = [
    "ByteBudget",
    "MaxBytesExceeded",
    "MaxMsgsExceeded",
    "MaxMsgsPerSubjectExceeded",
    "MsgTooLarge",
    "RecoveryReport",
    "StorageFull",
    "StoreConfig",
    "StoreError",
    "StoreFailed",
    "StoreLimits",
    "StoredMsg",
    "StreamState",
    "StreamStore",
    "SyncPolicy",
    "open_store",
    "write_atomic",
]
