"""Log actions: the records a manifest log entry is made of (SPEC §Log entries).

Every action is a frozen dataclass. A log entry (one table version) is an
ordered list of actions with exactly one :class:`CommitInfo`. The JSON form of
each is defined in :mod:`ctfile.format.codec`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Union

from ctfile.format.schema import ROW_ID_FIELD_ID, Schema

# SPEC §Protocol: what this build reads and writes.
READER_VERSION = 1
WRITER_VERSION = 1
FEATURE_ROW_LINEAGE = "rowLineage"
FEATURE_CHECKPOINTS = "checkpoints"
FEATURE_TXN = "appTransactions"
SUPPORTED_READER_FEATURES = frozenset({FEATURE_ROW_LINEAGE, FEATURE_CHECKPOINTS})
SUPPORTED_WRITER_FEATURES = frozenset({FEATURE_ROW_LINEAGE, FEATURE_CHECKPOINTS, FEATURE_TXN})


@dataclass(frozen=True)
class Protocol:
    min_reader_version: int = READER_VERSION
    min_writer_version: int = WRITER_VERSION
    reader_features: tuple[str, ...] = (FEATURE_ROW_LINEAGE, FEATURE_CHECKPOINTS)
    writer_features: tuple[str, ...] = (FEATURE_ROW_LINEAGE, FEATURE_CHECKPOINTS, FEATURE_TXN)


@dataclass(frozen=True)
class Metadata:
    table_id: str
    schema: Schema
    created_time: int
    properties: dict[str, str] = field(default_factory=dict, hash=False)
    name: str | None = None
    description: str | None = None

    def with_schema(self, schema: Schema) -> "Metadata":
        return replace(self, schema=schema)


@dataclass(frozen=True)
class PartitionStats:
    """Per-partition statistics keyed by field id (SPEC §Statistics).

    ``min_values`` / ``max_values`` hold JSON-encoded values (see
    :mod:`ctfile.format.stats`); a field absent from them has no usable bound.
    Hidden columns appear under their reserved ids with *stored* values, i.e.
    before null inheritance. ``nan_count`` is kept for float columns because
    min/max exclude NaN.
    """

    num_records: int
    min_values: dict[int, Any] = field(default_factory=dict, hash=False)
    max_values: dict[int, Any] = field(default_factory=dict, hash=False)
    null_count: dict[int, int] = field(default_factory=dict, hash=False)
    nan_count: dict[int, int] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Partition:
    """A micro-partition: one immutable Parquet file and what the log knows of it."""

    path: str
    size_bytes: int
    num_records: int
    first_row_id: int
    default_row_version: int
    modification_time: int
    checksum: str | None = None
    stats: PartitionStats | None = None

    @property
    def fresh_rows(self) -> int | None:
        """Rows whose ``_ct_row_id`` is null (inserted by this partition's commit)."""
        if self.stats is None:
            return None
        return self.stats.null_count.get(ROW_ID_FIELD_ID)


@dataclass(frozen=True)
class AddPartition:
    partition: Partition
    data_change: bool = True

    @property
    def path(self) -> str:
        return self.partition.path


@dataclass(frozen=True)
class RemovePartition:
    """Removes a partition; carries its full descriptor so a change scan needs
    only the log entries of its interval (SPEC §remove)."""

    partition: Partition
    deletion_timestamp: int
    data_change: bool = True

    @property
    def path(self) -> str:
        return self.partition.path


@dataclass(frozen=True)
class SetTransaction:
    """Idempotence marker for an external writer (a streaming query):
    ``version`` is the last batch id of ``app_id`` committed (SPEC §txn)."""

    app_id: str
    version: int
    last_updated: int


@dataclass(frozen=True)
class CommitInfo:
    timestamp: int
    operation: str
    operation_parameters: dict[str, Any] = field(default_factory=dict, hash=False)
    read_version: int | None = None
    data_change: bool = True
    operation_metrics: dict[str, int] = field(default_factory=dict, hash=False)
    engine_info: str | None = None
    txn_id: str | None = None
    isolation_level: str = "SnapshotIsolation"


@dataclass(frozen=True)
class CheckpointHeader:
    """First line of a checkpoint file (SPEC §Checkpoints)."""

    version: int
    timestamp: int
    next_row_id: int
    num_partitions: int


Action = Union[Protocol, Metadata, AddPartition, RemovePartition, SetTransaction, CommitInfo, CheckpointHeader]
