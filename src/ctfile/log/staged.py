"""What a transaction stages and what it reports (SPEC §Commit protocol):
:class:`StagedFile`, a file written but not yet committed, and
:class:`CommitResult`, what a statement or transaction did. Both are
re-exported by :mod:`ctfile.log.transaction`, which uses them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ctfile.format.actions import ChangeFile, Partition, PartitionStats

# SPEC §Partition lineage: a staged partition has no row lineage until commit.
PENDING = -1


def now_ms() -> int:
    """The wall clock in milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class StagedFile:
    """A data file written by a transaction, not yet committed."""

    path: str
    size_bytes: int
    num_records: int
    checksum: str
    stats: PartitionStats
    modification_time: int

    def as_pending_partition(self) -> Partition:
        return Partition(
            self.path, self.size_bytes, self.num_records, PENDING, PENDING,
            self.modification_time, self.checksum, self.stats,
        )

    def as_change_file(self) -> ChangeFile:
        """The ``change`` action naming this file as a change file (SPEC §change)."""
        return ChangeFile(
            self.path, self.size_bytes, self.num_records, self.modification_time, self.checksum, self.stats,
        )


@dataclass(frozen=True)
class CommitResult:
    """What a DML statement or transaction did.

    ``version`` is the version committed, or the version the statement read if
    it changed nothing (``committed`` is then False and no version was written).
    ``app_transaction_replayed`` is True when nothing was committed because
    the table already holds the transaction's application batch (its
    ``app_id`` at ``app_version`` or later, SPEC §txn): a replayed batch, whose
    statements were skipped or whose files were discarded.
    """

    version: int
    committed: bool
    operation: str
    num_inserted_rows: int = 0
    num_updated_rows: int = 0
    num_deleted_rows: int = 0
    num_copied_rows: int = 0
    num_added_partitions: int = 0
    num_removed_partitions: int = 0
    attempts: int = 1
    app_transaction_replayed: bool = False
    #: The follow-up compaction ``ctfile.autoCompact`` committed after this
    #: commit (SPEC §Clustering), or None.
    auto_compaction: "CommitResult | None" = None
