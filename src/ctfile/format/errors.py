"""The ctfile error family.

One root, :class:`CtfileError`, and a few typed subclasses, in the manner of
delta-rs's ``DeltaError`` family. The storage boundary raises the builtin
``FileNotFoundError`` / ``FileExistsError`` (as fsspec does); the layers above
translate them into these types where the meaning is table-level (a missing
``_ct_log`` is :class:`TableNotFoundError`, a lost put-if-absent race is retried
and only surfaces as :class:`CommitConflictError` when it is a real conflict).

Messages say what was expected, what was found and where (version, path).

These live in ``ctfile.format`` because it is the lowest layer: every other
layer may import it, and it imports nothing of ctfile.
"""

from __future__ import annotations

import enum


class CtfileError(Exception):
    """Root of every error ctfile raises on purpose."""


class InvalidArgumentError(CtfileError, ValueError):
    """A public entry point was given an argument it cannot accept."""


class TableNotFoundError(CtfileError):
    """No ctfile table (no ``_ct_log/`` with a version file) at the URI."""


class TableExistsError(CtfileError):
    """``create_table`` found a table already at the URI."""


class SchemaMismatchError(CtfileError):
    """Data or an expression does not fit the table schema."""


class VersionNotFoundError(CtfileError):
    """A requested version or timestamp is outside the table's history."""


class StaleIntervalError(VersionNotFoundError):
    """A change interval reaches back before the oldest retained version.

    Attributes
    ----------
    oldest_available : int
        The oldest version whose log entry and partitions are still retained.
    """

    def __init__(self, message: str, *, oldest_available: int):
        super().__init__(message)
        self.oldest_available = oldest_available


class StaleStreamError(StaleIntervalError):
    """A stream's pending changes are no longer all retained (SPEC §Streams):
    it fell behind ``ctfile.maxRetentionExtension`` and a vacuum expired
    history it needed. Drop the stream and create it again.

    Attributes
    ----------
    stream : str
        The stream's name.
    stale_since : datetime.datetime or None
        When the vacuum that made it stale ran (None: its history was found
        missing without a vacuum recording it).
    oldest_available : int
        The oldest version still readable.
    """

    def __init__(self, message: str, *, stream: str, stale_since, oldest_available: int):
        super().__init__(message, oldest_available=oldest_available)
        self.stream = stream
        self.stale_since = stale_since


class StreamNotFoundError(CtfileError):
    """No live stream of that name exists on the table (SPEC §Streams)."""


class StreamExistsError(CtfileError):
    """A stream of that name already exists on the table (SPEC §Streams)."""


class DerivedTableError(CtfileError):
    """A write that would change a derived table's rows (or schema) outside a
    refresh, or a refresh asked of a table that is not derived (SPEC §Derived
    tables, protocol feature ``derivedTables``). Nothing is written."""


class AppendOnlyError(CtfileError):
    """A statement that would delete, change or bring back rows of a table
    whose ``ctfile.appendOnly`` property is ``true`` (SPEC §Append-only
    tables, protocol feature ``appendOnly``): only inserts are allowed.
    Nothing is written."""


class CorruptLogError(CtfileError):
    """A log entry, checkpoint or referenced path is malformed or unsafe."""


class UnsupportedFeatureError(CtfileError):
    """The table requires a protocol version or feature this build lacks."""


class StorageError(CtfileError):
    """The storage under a table refused or failed a request in a way that
    retrying will not fix: bad credentials, an unreachable endpoint, a denied
    permission, a path that would leave the table root (a symlink pointing
    outside it). The message names the table URI, the operation and the file.

    Attributes
    ----------
    uri : str
        The table root.
    path : str or None
        The file (relative to the root) the request was for, if any.
    """

    def __init__(self, message: str, *, uri: str, path: str | None = None):
        super().__init__(message)
        self.uri = uri
        self.path = path


class DataFileError(CtfileError):
    """A data file the log names cannot be read as the log describes it.

    Raised by reads (snapshots, change scans, DML), never silently turned
    into data. The message names the table, the version and the file.

    Attributes
    ----------
    uri : str
        The table root.
    path : str
        The data file, relative to the root.
    version : int
        The version whose log entry added the partition (its
        ``defaultRowVersion``).
    """

    def __init__(self, message: str, *, uri: str, path: str, version: int):
        super().__init__(message)
        self.uri = uri
        self.path = path
        self.version = version


class MissingDataFileError(DataFileError):
    """A data file the log names does not exist (deleted by hand, or by a
    vacuum with a shorter retention than the read needed)."""


class CorruptDataFileError(DataFileError):
    """A data file is damaged: its size or XXH3-128 checksum differs from its
    ``add`` action, it is not valid Parquet, or it holds another row count."""


class ConflictKind(str, enum.Enum):
    """Why a commit conflicted (SPEC §Conflict detection, rules 1-4), or
    that it gave up under contention."""

    #: Rule 1: the winner changed the schema, properties or protocol.
    METADATA = "metadata"
    #: Rule 2: the winner removed a partition the transaction read or removes.
    REMOVED_READ = "removed_read"
    #: Rule 3: the winner added rows to a table the transaction replaces.
    WHOLE_TABLE = "whole_table"
    #: Rule 4: the winner added rows that one of the transaction's read
    #: predicates matches.
    READ_PREDICATE = "read_predicate"
    #: No rule: the commit lost the race for a version too many times.
    CONTENTION = "contention"


class CommitConflictError(CtfileError):
    """A concurrent commit changed something this transaction depended on.

    Attributes
    ----------
    read_version : int
        The snapshot version the losing transaction read.
    winning_version : int
        The version of the concurrent commit that conflicts with it.
    kind : ConflictKind
        Which rule of SPEC §Conflict detection was broken.
    """

    def __init__(
        self, message: str, *, read_version: int, winning_version: int,
        kind: ConflictKind = ConflictKind.REMOVED_READ,
    ):
        super().__init__(message)
        self.read_version = read_version
        self.winning_version = winning_version
        self.kind = kind


__all__ = [
    "CtfileError",
    "InvalidArgumentError",
    "TableNotFoundError",
    "TableExistsError",
    "SchemaMismatchError",
    "VersionNotFoundError",
    "StaleIntervalError",
    "StaleStreamError",
    "StreamNotFoundError",
    "StreamExistsError",
    "CorruptLogError",
    "DerivedTableError",
    "UnsupportedFeatureError",
    "CommitConflictError",
    "ConflictKind",
    "StorageError",
    "DataFileError",
    "MissingDataFileError",
    "CorruptDataFileError",
]
