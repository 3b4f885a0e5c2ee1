"""The manifest log: storage with put-if-absent, replay, checkpoints, commits."""

from ctfile.log.manifest import ManifestLog
from ctfile.log.replay import TableState
from ctfile.log.object_store import FsspecStorage
from ctfile.log.storage import LocalStorage, Storage, open_storage
from ctfile.log.transaction import CommitResult, StagedFile, Transaction

__all__ = [
    "ManifestLog",
    "TableState",
    "Storage",
    "LocalStorage",
    "FsspecStorage",
    "open_storage",
    "Transaction",
    "CommitResult",
    "StagedFile",
]
