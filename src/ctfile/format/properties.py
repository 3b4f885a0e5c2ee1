"""Table properties that ctfile itself interprets (SPEC §Table properties).

One table of keys, :data:`TABLE_PROPERTIES`, gives each property its type,
default and validation, in the manner of PyIceberg's ``TableProperties`` and
delta-rs's ``WriterProperties``. Everything that reads a property goes
through it:

* :func:`validate_properties` checks keys and values when they are *set*
  (``create_table(properties=...)``, ``Table.set_properties``, a Spark write
  that creates a table), so a bad value is refused with
  :class:`~ctfile.format.errors.InvalidArgumentError` before it reaches the
  log;
* :meth:`TableProperties.from_mapping` resolves the properties of a table's
  ``metadata`` for the writers, the DML, compaction, checkpoints and the
  Spark writers. It is lenient, as SPEC §Table properties requires of
  readers: a value some other writer stored malformed means the default.

Every other ``metadata.properties`` key belongs to the user and is kept as
given.

Examples
--------
>>> TableProperties.from_mapping({"ctfile.partitionRows": "1000"}).partition_rows
1000
>>> validate_properties({"ctfile.partitionRows": "big"})
Traceback (most recent call last):
...
ctfile.format.errors.InvalidArgumentError: table property ctfile.partitionRows must be a positive integer, found 'big'
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ctfile.format.errors import InvalidArgumentError
from ctfile.format.schema import Schema
from ctfile.format.stats import has_bounds

RESERVED_PREFIX = "ctfile."


class IsolationLevel(str, enum.Enum):
    """How a transaction is checked against concurrent commits (SPEC
    §Conflict detection); the value is what ``commitInfo.isolationLevel``
    records."""

    #: DML is serializable with respect to what it read, except that blind
    #: appends (INSERTs, append writes) committed concurrently are ordered
    #: after it: Delta Lake's default level of the same name.
    WRITE_SERIALIZABLE = "WriteSerializable"
    #: Every concurrent data-changing commit counts, blind appends included.
    SERIALIZABLE = "Serializable"
    #: What revision 1 writers recorded; read only, never written.
    SNAPSHOT = "SnapshotIsolation"


class ChangeCapture(str, enum.Enum):
    """What DML keeps of the rows it changes (SPEC §Change capture); the value
    is what ``ctfile.changeCapture`` holds."""

    #: Nothing: change scans derive every change from the partitions an
    #: interval added and removed (the default).
    NONE = "none"
    #: Change files with the old image of every deleted or updated row and the
    #: new image of every updated row.
    BEFORE_AFTER = "before_after"


COMPRESSIONS = ("zstd", "snappy", "gzip", "lz4", "brotli", "none")


_DECIMAL = re.compile(r"0|[1-9][0-9]{0,18}")
_LONG_MAX = 2**63 - 1


def _non_negative_int(raw: str) -> int:
    """A decimal integer as SPEC §Table properties writes it: ASCII digits, no
    sign, spaces, underscores or leading zeros, at most a ``long``
    (``int()`` alone accepts ``" +1_0"`` and non-ASCII digits)."""
    if _DECIMAL.fullmatch(raw) is None or int(raw) > _LONG_MAX:
        raise ValueError
    return int(raw)


def _positive_int(raw: str) -> int:
    value = _non_negative_int(raw)
    if value < 1:
        raise ValueError
    return value


def _compression(raw: str) -> str:
    if raw not in COMPRESSIONS:
        raise ValueError
    return raw


_DURATION = re.compile(r"(0|[1-9][0-9]{0,9})([smhd])")
_DURATION_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration_s(raw: str) -> int:
    """A duration as SPEC §Table properties writes it (one non-negative
    integer and a unit ``s``, ``m``, ``h`` or ``d``), in seconds.

    >>> parse_duration_s("14d"), parse_duration_s("36h"), parse_duration_s("0s")
    (1209600, 129600, 0)
    """
    m = _DURATION.fullmatch(raw)
    if m is None:
        raise ValueError
    return int(m.group(1)) * _DURATION_UNIT_S[m.group(2)]


_BOOLEANS = {"true": True, "false": False}


def _boolean(raw: str) -> bool:
    if raw not in _BOOLEANS:
        raise ValueError
    return _BOOLEANS[raw]


def parse_cluster_by(raw: str) -> tuple[str, ...]:
    """The clustering keys ``ctfile.clusterBy`` names (SPEC §Clustering):
    comma-separated column names, no spaces, each once; the empty string
    names none (the table is no longer clustered). Whether the columns exist
    is checked against a schema by :func:`check_cluster_keys`.

    >>> parse_cluster_by("region,id"), parse_cluster_by("")
    (('region', 'id'), ())
    >>> parse_cluster_by("id,,x")
    Traceback (most recent call last):
    ...
    ValueError: empty column name
    """
    if raw == "":
        return ()
    keys = tuple(raw.split(","))
    for k in keys:
        if not k or k != k.strip():
            raise ValueError("empty column name" if not k else f"column name {k!r} has spaces around it")
    if len(set(keys)) != len(keys):
        raise ValueError("a column is named twice")
    return keys


def _isolation_level(raw: str) -> IsolationLevel:
    level = IsolationLevel(raw)
    if level is IsolationLevel.SNAPSHOT:
        raise ValueError
    return level


@dataclass(frozen=True)
class PropertySpec:
    """One property: its key, what values mean, its default and its parser
    (which raises ``ValueError`` for a value it does not accept)."""

    key: str
    expected: str
    default: Any
    parse: Callable[[str], Any]
    doc: str

    def parse_or_raise(self, raw: str) -> Any:
        """The parsed value; :class:`InvalidArgumentError` naming the key, what
        is expected and what was found."""
        try:
            return self.parse(raw)
        except (ValueError, TypeError):
            raise InvalidArgumentError(f"table property {self.key} must be {self.expected}, found {raw!r}") from None


PARTITION_ROWS = "ctfile.partitionRows"
ROW_GROUP_ROWS = "ctfile.rowGroupRows"
COMPRESSION = "ctfile.compression"
CHECKPOINT_INTERVAL = "ctfile.checkpointInterval"
ISOLATION_LEVEL = "ctfile.isolationLevel"
CHANGE_CAPTURE = "ctfile.changeCapture"
MAX_RETENTION_EXTENSION = "ctfile.maxRetentionExtension"
CLUSTER_BY = "ctfile.clusterBy"
AUTO_COMPACT = "ctfile.autoCompact"
AUTO_COMPACT_MAX_DEPTH = "ctfile.autoCompactMaxDepth"
APPEND_ONLY = "ctfile.appendOnly"

DEFAULT_PARTITION_ROWS = 1 << 20
DEFAULT_ROW_GROUP_ROWS = 1 << 20
DEFAULT_COMPRESSION = "zstd"
DEFAULT_CHECKPOINT_INTERVAL = 100
DEFAULT_ISOLATION_LEVEL = IsolationLevel.WRITE_SERIALIZABLE
DEFAULT_CHANGE_CAPTURE = ChangeCapture.NONE
DEFAULT_MAX_RETENTION_EXTENSION_S = 14 * 86400
DEFAULT_AUTO_COMPACT_MAX_DEPTH = 3

#: Every property ctfile interprets, by key (SPEC §Table properties).
TABLE_PROPERTIES: dict[str, PropertySpec] = {
    s.key: s
    for s in (
        PropertySpec(PARTITION_ROWS, "a positive integer", DEFAULT_PARTITION_ROWS, _positive_int,
                     "target rows per micro-partition written by a statement"),
        PropertySpec(ROW_GROUP_ROWS, "a positive integer", DEFAULT_ROW_GROUP_ROWS, _positive_int,
                     "Parquet row group size, capped by ctfile.partitionRows"),
        PropertySpec(COMPRESSION, f"one of {', '.join(COMPRESSIONS)}", DEFAULT_COMPRESSION, _compression,
                     "Parquet codec of new data files"),
        PropertySpec(CHECKPOINT_INTERVAL, "a non-negative integer (0 disables checkpoints)",
                     DEFAULT_CHECKPOINT_INTERVAL, _non_negative_int,
                     "a checkpoint is written after every version that is a multiple of it"),
        PropertySpec(ISOLATION_LEVEL, "WriteSerializable or Serializable", DEFAULT_ISOLATION_LEVEL,
                     _isolation_level, "how DML is checked against concurrent commits"),
        PropertySpec(CHANGE_CAPTURE, "none or before_after", DEFAULT_CHANGE_CAPTURE, ChangeCapture,
                     "whether DML writes change files (old and new images of the rows it changes)"),
        PropertySpec(MAX_RETENTION_EXTENSION, "a duration: an integer and a unit s, m, h or d (14d)",
                     DEFAULT_MAX_RETENTION_EXTENSION_S, parse_duration_s,
                     "how much longer than its retention window a vacuum keeps history streams need"),
        PropertySpec(CLUSTER_BY, "a comma-separated list of column names, no spaces (region,id), or empty for none", (),
                     parse_cluster_by, "the clustering keys: writers sort the rows they write by them"),
        PropertySpec(AUTO_COMPACT, "true or false", False, _boolean,
                     "whether a commit that leaves small partitions is followed by a compaction of them"),
        PropertySpec(AUTO_COMPACT_MAX_DEPTH, "a positive integer", DEFAULT_AUTO_COMPACT_MAX_DEPTH, _positive_int,
                     "with ctfile.autoCompact and clustering keys, the most partitions a key value may lie in "
                     "after a commit"),
        PropertySpec(APPEND_ONLY, "true or false", False, _boolean,
                     "whether the table takes only commits that insert rows (SPEC §Append-only tables)"),
    )
}


def validate_properties(properties: Any, *, schema: Schema | None = None) -> dict[str, str]:
    """Check properties about to be set; returns them as a new dict.

    Keys and values must be strings. A ``ctfile.`` key must be one of
    :data:`TABLE_PROPERTIES` with a valid value (SPEC §Table properties:
    writers define no other ``ctfile.`` keys). Other keys are the user's.
    With ``schema`` (the schema of the version the properties are set on),
    ``ctfile.clusterBy`` must name its columns (:func:`check_cluster_keys`).

    Raises
    ------
    InvalidArgumentError
        Naming the first bad key, what it expects and what was found.
    """
    if not isinstance(properties, Mapping):
        raise InvalidArgumentError(f"properties must map strings to strings, found {properties!r}")
    out: dict[str, str] = {}
    for key, value in properties.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidArgumentError(f"properties must map strings to strings, found {key!r}: {value!r}")
        if key.startswith(RESERVED_PREFIX):
            spec = TABLE_PROPERTIES.get(key)
            if spec is None:
                raise InvalidArgumentError(
                    f"unknown table property {key}; the {RESERVED_PREFIX} prefix is reserved for "
                    f"{', '.join(sorted(TABLE_PROPERTIES))}"
                )
            parsed = spec.parse_or_raise(value)
            if key == CLUSTER_BY and schema is not None:
                check_cluster_keys(schema, parsed)
        out[key] = value
    return out


def check_cluster_keys(schema: Schema, keys: tuple[str, ...], *, what: str = f"table property {CLUSTER_BY}") -> None:
    """Refuse clustering keys that are not top-level columns of ``schema`` of
    a type with bounds (SPEC §Clustering, writer requirements).

    >>> from ctfile.format.schema import schema_from_arrow
    >>> import pyarrow as pa
    >>> s = schema_from_arrow(pa.schema([("id", pa.int64()), ("blob", pa.binary())]))
    >>> check_cluster_keys(s, ("id",))
    >>> check_cluster_keys(s, ("blob",))
    Traceback (most recent call last):
    ...
    ctfile.format.errors.InvalidArgumentError: table property ctfile.clusterBy: column 'blob' is of type binary, which has no min/max statistics; clustering keys must be of a type with bounds (every primitive type but binary)
    """
    for k in keys:
        if k not in schema.names:
            raise InvalidArgumentError(
                f"{what}: the table has no column {k!r}; "
                f"expected top-level columns among {schema.names}"
            )
        typ = schema.field(k).type
        if not has_bounds(typ):
            shown = typ if isinstance(typ, str) else type(typ).__name__
            raise InvalidArgumentError(
                f"{what}: column {k!r} is of type {shown}, which has no min/max "
                f"statistics; clustering keys must be of a type with bounds (every primitive type but binary)"
            )


def cluster_keys(properties: Mapping[str, str], schema: Schema) -> tuple[str, ...]:
    """The clustering keys writers follow (SPEC §Clustering): those of
    ``ctfile.clusterBy``, or none when the property is malformed or names
    a column ``schema`` lacks or cannot order (set by another writer).

    >>> from ctfile.format.schema import schema_from_arrow
    >>> import pyarrow as pa
    >>> s = schema_from_arrow(pa.schema([("id", pa.int64())]))
    >>> cluster_keys({"ctfile.clusterBy": "id"}, s), cluster_keys({"ctfile.clusterBy": "gone"}, s)
    (('id',), ())
    """
    keys = TableProperties.from_mapping(properties).cluster_by
    try:
        check_cluster_keys(schema, keys)
    except InvalidArgumentError:
        return ()
    return keys


@dataclass(frozen=True)
class TableProperties:
    """The resolved values of a table's properties (defaults filled in).

    ``row_group_rows`` is already capped by ``partition_rows``;
    ``checkpoint_interval`` 0 means no automatic checkpoints.
    """

    partition_rows: int = DEFAULT_PARTITION_ROWS
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS
    compression: str = DEFAULT_COMPRESSION
    checkpoint_interval: int = DEFAULT_CHECKPOINT_INTERVAL
    isolation_level: IsolationLevel = DEFAULT_ISOLATION_LEVEL
    change_capture: ChangeCapture = DEFAULT_CHANGE_CAPTURE
    #: Seconds (SPEC §Streams, retention).
    max_retention_extension_s: int = DEFAULT_MAX_RETENTION_EXTENSION_S
    #: The clustering keys as the property names them (SPEC §Clustering);
    #: :func:`cluster_keys` drops them when the schema lacks one.
    cluster_by: tuple[str, ...] = ()
    auto_compact: bool = False
    #: SPEC §Clustering, automatic compaction: the clustering depth it keeps.
    auto_compact_max_depth: int = DEFAULT_AUTO_COMPACT_MAX_DEPTH
    #: SPEC §Append-only tables: writers refuse every commit that removes rows.
    append_only: bool = False

    @classmethod
    def from_mapping(cls, properties: Mapping[str, str]) -> "TableProperties":
        """Resolve ``metadata.properties``; a missing or malformed value means
        the default (SPEC §Table properties)."""

        def get(key: str) -> Any:
            spec = TABLE_PROPERTIES[key]
            raw = properties.get(key)
            if raw is None:
                return spec.default
            try:
                return spec.parse(raw)
            except (ValueError, TypeError, AttributeError):
                return spec.default

        partition_rows = get(PARTITION_ROWS)
        return cls(
            partition_rows=partition_rows,
            row_group_rows=min(partition_rows, get(ROW_GROUP_ROWS)),
            compression=get(COMPRESSION),
            checkpoint_interval=get(CHECKPOINT_INTERVAL),
            isolation_level=get(ISOLATION_LEVEL),
            change_capture=get(CHANGE_CAPTURE),
            max_retention_extension_s=get(MAX_RETENTION_EXTENSION),
            cluster_by=get(CLUSTER_BY),
            auto_compact=get(AUTO_COMPACT),
            auto_compact_max_depth=get(AUTO_COMPACT_MAX_DEPTH),
            append_only=get(APPEND_ONLY),
        )
