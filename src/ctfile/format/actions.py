"""Log actions: the records a manifest log entry is made of (SPEC §Log entries).

Every action is a frozen dataclass. A log entry (one table version) is an
ordered list of actions with exactly one :class:`CommitInfo`. The JSON form of
each is defined in :mod:`ctfile.format.codec`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any, Union

from ctfile.format.append_only import FEATURE_APPEND_ONLY
from ctfile.format.derived import FEATURE_DERIVED_TABLES, DerivedDefinition, RefreshInfo, visible_schema
from ctfile.format.partition_stats import PartitionStats, stats_from_text
from ctfile.format.properties import IsolationLevel
from ctfile.format.schema import ROW_ID_FIELD_ID, Schema

# SPEC §Protocol: what this build reads and writes.
READER_VERSION = 1
WRITER_VERSION = 1
FEATURE_ROW_LINEAGE = "rowLineage"
FEATURE_CHECKPOINTS = "checkpoints"
FEATURE_TXN = "appTransactions"
# Revision 2 (writer features only: readers of revision 1 read these tables).
FEATURE_SERIALIZABLE_WRITES = "serializableWrites"  # SPEC §Conflict detection
FEATURE_ENTRY_CHECKSUMS = "entryChecksums"  # SPEC §Log entries: self-checking entries
# Revision 3 (a writer feature, listed only by tables that turned capture on).
FEATURE_CHANGE_CAPTURE = "changeCapture"  # SPEC §Change capture
FEATURE_SCHEMA_EVOLUTION = "schemaEvolution"  # SPEC §Schema evolution: projection by field id
FEATURE_STREAMS = "streams"  # SPEC §Streams: vacuum keeps what streams need
# Revision 7: partitions re-added by a RESTORE keep their lineage (SPEC §Restore).
FEATURE_RESTORED_PARTITIONS = "restoredPartitions"
# Revision 8: derived tables (SPEC §Derived tables), a reader and writer feature.
SUPPORTED_READER_FEATURES = frozenset(
    {FEATURE_ROW_LINEAGE, FEATURE_CHECKPOINTS, FEATURE_SCHEMA_EVOLUTION, FEATURE_RESTORED_PARTITIONS,
     FEATURE_DERIVED_TABLES}
)
SUPPORTED_WRITER_FEATURES = frozenset(
    {
        FEATURE_ROW_LINEAGE, FEATURE_CHECKPOINTS, FEATURE_TXN, FEATURE_SERIALIZABLE_WRITES, FEATURE_ENTRY_CHECKSUMS,
        FEATURE_CHANGE_CAPTURE,
        FEATURE_SCHEMA_EVOLUTION,
        FEATURE_STREAMS,
        FEATURE_RESTORED_PARTITIONS,
        FEATURE_DERIVED_TABLES,
        FEATURE_APPEND_ONLY,  # revision 9, SPEC §Append-only tables
    }
)


@dataclass(frozen=True)
class Protocol:
    """The protocol action; the defaults are what a new table gets."""

    min_reader_version: int = READER_VERSION
    min_writer_version: int = WRITER_VERSION
    reader_features: tuple[str, ...] = (FEATURE_ROW_LINEAGE, FEATURE_CHECKPOINTS)
    writer_features: tuple[str, ...] = (
        FEATURE_ROW_LINEAGE, FEATURE_CHECKPOINTS, FEATURE_TXN, FEATURE_SERIALIZABLE_WRITES, FEATURE_ENTRY_CHECKSUMS,
    )

    def with_writer_feature(self, feature: str) -> "Protocol":
        """This protocol with ``feature`` among its writer features (itself if
        already there): features are only ever added (SPEC §Protocol)."""
        if feature in self.writer_features:
            return self
        return replace(self, writer_features=(*self.writer_features, feature))

    def with_reader_feature(self, feature: str) -> "Protocol":
        """This protocol with ``feature`` among its reader and writer features
        (every reader feature is also a writer feature, SPEC §Protocol)."""
        out = self.with_writer_feature(feature)
        if feature in out.reader_features:
            return out
        return replace(out, reader_features=(*out.reader_features, feature))


@dataclass(frozen=True)
class Metadata:
    table_id: str
    schema: Schema
    created_time: int
    properties: dict[str, str] = field(default_factory=dict, hash=False)
    name: str | None = None
    description: str | None = None
    #: SPEC §Schema evolution: the highest field id ever assigned (None: the
    #: schema's highest, as for a table whose schema never lost a field).
    last_field_id: int | None = None
    #: SPEC §Derived tables: the definition and frontier of a derived table, else None.
    derived: DerivedDefinition | None = None

    def with_schema(self, schema: Schema) -> "Metadata":
        return replace(self, schema=schema)

    @property
    def visible_schema(self) -> Schema:
        """The schema of ordinary reads: ``schema`` without a derived table's
        derivation columns (SPEC §Derived tables)."""
        return visible_schema(self.schema, self.derived)

    @property
    def is_derived(self) -> bool:
        """Whether this is the metadata of a derived table (SPEC §Derived tables)."""
        return self.derived is not None

    @property
    def assigned_field_ids(self) -> int:
        """The highest field id the table has assigned: new fields get ids above it."""
        return max(self.last_field_id or 0, self.schema.max_field_id())


class DeferredStats:
    """Statistics kept as their JSON text until first read.

    A checkpoint stores each partition's ``stats`` as JSON text (SPEC
    §Checkpoints); opening a table with many partitions would spend most of
    its time decoding statistics no one reads. Pass a ``DeferredStats`` as the
    ``stats`` of a :class:`Partition`: ``partition.stats`` decodes it on first
    access (raising :class:`~ctfile.format.errors.CorruptLogError` naming
    ``where`` if the text is invalid) and keeps the result.

    Examples
    --------
    >>> p = Partition("data/a.parquet", 10, 2, 0, 1, 0, None, DeferredStats('{"numRecords":2}', "cp"))
    >>> pending_stats_text(p)
    '{"numRecords":2}'
    >>> p.stats.num_records, pending_stats_text(p)
    (2, None)
    """

    __slots__ = ("text", "where")

    def __init__(self, text: str, where: str):
        self.text = text
        self.where = where

    def __repr__(self) -> str:
        return f"DeferredStats({self.text!r:.60}, where={self.where!r})"


class _StatsField:
    """The ``stats`` field of :class:`Partition`, a data descriptor.

    The instance dict holds ``_stats``: a PartitionStats, None, or (while
    undecoded) the JSON text, with ``_stats_where`` naming its file for error
    messages. Equality, hashing, ``repr`` and ``dataclasses.replace`` go
    through attribute access, so they see decoded statistics.
    """

    def __get__(self, obj: Any, owner: Any = None) -> "PartitionStats | None":
        if obj is None:
            return None  # the dataclass default
        d = obj.__dict__
        value = d["_stats"]
        if type(value) is str:
            value = stats_from_text(value, d.get("_stats_where", "?"), num_records=d["num_records"], path=d["path"])
            d["_stats"] = value  # two threads racing decode equal values
        return value

    def __set__(self, obj: Any, value: "PartitionStats | DeferredStats | None") -> None:
        # Only reached from __init__: the dataclass is frozen.
        if type(value) is DeferredStats:
            obj.__dict__["_stats_where"] = value.where
            value = value.text
        elif value is not None and not isinstance(value, PartitionStats):
            raise TypeError(f"stats must be PartitionStats, DeferredStats or None, found {type(value).__name__}")
        obj.__dict__["_stats"] = value


@dataclass(frozen=True)
class Partition:
    """A micro-partition: one immutable Parquet file and what the log knows of it.

    ``stats`` may be given as a :class:`DeferredStats`, decoded on first
    access of ``partition.stats``.
    """

    path: str
    size_bytes: int
    num_records: int
    first_row_id: int
    default_row_version: int
    modification_time: int
    checksum: str | None = None
    stats: PartitionStats | None = _StatsField()  # type: ignore[assignment]
    #: SPEC §Restore: set on a partition a RESTORE re-added, the row version
    #: its rows with a null stored ``_ct_row_version`` inherit (instead of
    #: ``default_row_version``, the RESTORE's version).
    restored_row_version: int | None = None

    @property
    def is_restored(self) -> bool:
        """Whether a RESTORE re-added this partition (SPEC §Restore)."""
        return self.restored_row_version is not None

    @property
    def inherited_row_version(self) -> int:
        """The row version of the rows that store none (SPEC §Hidden columns):
        ``restoredRowVersion`` for a re-added partition, else ``defaultRowVersion``.

        >>> Partition("data/a.parquet", 10, 2, 0, 7, 0).inherited_row_version
        7
        >>> Partition("data/a.parquet", 10, 2, 0, 7, 0, restored_row_version=3).inherited_row_version
        3
        """
        return self.default_row_version if self.restored_row_version is None else self.restored_row_version

    @property
    def fresh_rows(self) -> int | None:
        """Rows whose ``_ct_row_id`` is null and that the partition's commit
        inserted: none in a re-added partition, whose rows were inserted
        before (SPEC §Restore)."""
        if self.restored_row_version is not None:
            return 0
        if self.stats is None:
            return None
        return self.stats.null_count.get(ROW_ID_FIELD_ID)


def pending_stats_text(p: Partition) -> str | None:
    """The JSON text of ``p``'s statistics while they are still undecoded, else None."""
    value = p.__dict__["_stats"]
    return value if type(value) is str else None


def partitions_from_columns(
    paths: list, size_bytes: list, num_records: list, first_row_ids: list, default_row_versions: list,
    modification_times: list, checksums: list, stats_texts: list, *, where: str,
    restored_row_versions: list | None = None,
) -> list[Partition]:
    """One :class:`Partition` per row of these columns, statistics deferred
    (``stats_texts`` holds JSON text or None), built without the frozen
    dataclass's per-field ``object.__setattr__``: opening a table builds
    10,000 of them from a checkpoint. The caller has validated the values.
    ``restored_row_versions`` (None: all None) holds each ``restoredRowVersion``."""
    new = object.__new__
    out: list[Partition] = []
    append = out.append
    restored = restored_row_versions if restored_row_versions is not None else itertools.repeat(None)
    for path, size, n, first, drv, mtime, checksum, stats, rrv in zip(
        paths, size_bytes, num_records, first_row_ids, default_row_versions, modification_times, checksums, stats_texts,
        restored,
    ):
        p = new(Partition)
        d = p.__dict__
        d["path"] = path
        d["size_bytes"] = size
        d["num_records"] = n
        d["first_row_id"] = first
        d["default_row_version"] = drv
        d["modification_time"] = mtime
        d["checksum"] = checksum
        d["_stats"] = stats
        if stats is not None:
            d["_stats_where"] = where
        d["restored_row_version"] = rrv
        append(p)
    return out


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
    #: SPEC §Change capture: the commit deletes every row of the partition
    #: and keeps none of them elsewhere (written only with capture on).
    deletes_all_rows: bool = False

    @property
    def path(self) -> str:
        return self.partition.path


@dataclass(frozen=True)
class ChangeFile:
    """A change file of one commit (SPEC §change): the old images of the rows
    it deleted or updated and the new images of the rows it updated (SPEC
    §Change capture). History, not state: it makes nothing live."""

    path: str
    size_bytes: int
    num_records: int
    modification_time: int
    checksum: str | None = None
    stats: PartitionStats | None = None


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
    isolation_level: str = IsolationLevel.SNAPSHOT.value
    #: True: the commit only added rows and read nothing (a blind append,
    #: SPEC §Conflict detection). None (absent, as in revision 1 entries)
    #: counts as False.
    is_blind_append: bool | None = None
    #: SPEC §Log entries, self-checking entries: the number of action lines
    #: of the entry (this one included) and the XXH3-128 of its other lines.
    #: Filled in by ``ctfile.format.entries.encode_entry`` from the bytes it writes; None in
    #: entries of revision 1 and in the actions a transaction builds.
    num_actions: int | None = None
    actions_checksum: str | None = None
    #: SPEC §Derived tables: what a refresh commit did (operation REFRESH), else None.
    refresh: RefreshInfo | None = None


@dataclass(frozen=True)
class CheckpointHeader:
    """First line of a checkpoint file (SPEC §Checkpoints)."""

    version: int
    timestamp: int
    next_row_id: int
    num_partitions: int


Action = Union[
    Protocol, Metadata, AddPartition, RemovePartition, ChangeFile, SetTransaction, CommitInfo, CheckpointHeader
]
