"""The file store: block files, a delete log and an index snapshot under ``<dir>/msgs/``."""

from headwater.server.store.file.fileio import FileIO
from headwater.server.store.file.store import FileStore

__all__ = ["FileIO", "FileStore"]
