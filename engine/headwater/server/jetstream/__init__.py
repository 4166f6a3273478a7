"""JetStream: the API error table, stream configuration and the request handlers built on them.

Import the modules, not names from here: ``from headwater.server.jetstream import errors``.
"""

__all__ = [
    "errors",
    "streamconfig",
    "streamconfig_update",
    "streamconfig_validate",
    "subject_rules",
    "versioning",
]
